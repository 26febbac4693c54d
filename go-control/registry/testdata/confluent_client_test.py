#!/usr/bin/env python3
"""Conformance test of the Sluice schema registry with Confluent's own
Python client (confluent-kafka's SchemaRegistryClient, AvroSerializer and
AvroDeserializer).

    pip install "confluent-kafka[avro,schemaregistry]"
    python3 go-control/registry/testdata/confluent_client_test.py

With SR_URL set it talks to that server; otherwise it builds
./registry/cmd/regserver, starts it on a free loopback port with an
in-memory store, and stops it at the end.
"""
import os
import pathlib
import subprocess
import sys
import tempfile
import unittest
import warnings

from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

GO_CONTROL = pathlib.Path(__file__).resolve().parents[2]

V1 = '{"type":"record","name":"Req","namespace":"sluice","fields":[{"name":"id","type":"int"}]}'
V2 = ('{"type":"record","name":"Req","namespace":"sluice","fields":[{"name":"id","type":"int"},'
      '{"name":"tag","type":"string","default":""}]}')
V3_BAD = ('{"type":"record","name":"Req","namespace":"sluice","fields":[{"name":"id","type":"int"},'
          '{"name":"must","type":"long"}]}')
SIG = ('{"inputs":[{"name":"x","dtype":"f32","shape":[-1,4]}],'
       '"outputs":[{"name":"y","dtype":"f32","shape":[-1,3]}]}')

server = None
url = os.environ.get("SR_URL")


def setUpModule():
    global server, url
    if url:
        return
    tmp = tempfile.mkdtemp(prefix="regserver-")
    binary = os.path.join(tmp, "regserver")
    subprocess.run(["go", "build", "-o", binary, "./registry/cmd/regserver"], cwd=GO_CONTROL, check=True)
    server = subprocess.Popen([binary, "-listen", "127.0.0.1:0"], stdout=subprocess.PIPE, text=True)
    line = server.stdout.readline().strip()
    if not line.startswith("listening on "):
        server.kill()
        raise RuntimeError("regserver did not start: %r" % line)
    url = "http://" + line.split()[-1]


def tearDownModule():
    if server is not None:
        server.terminate()
        server.wait(timeout=10)


class ConfluentClientTest(unittest.TestCase):
    def setUp(self):
        # The client leaves its HTTP connections to the garbage collector.
        warnings.simplefilter("ignore", ResourceWarning)
        self.sr = SchemaRegistryClient({"url": url})

    def expect_error(self, code, fn, *args, **kwargs):
        with self.assertRaises(SchemaRegistryError) as cm:
            fn(*args, **kwargs)
        self.assertEqual(cm.exception.error_code, code, str(cm.exception))
        return cm.exception

    def test_register_fetch_and_evolve(self):
        sr = self.sr
        self.assertIn("TENSOR", sr.get_schema_types())
        id1 = sr.register_schema("py-req-value", Schema(V1, "AVRO"))
        # A fresh client (no cache) gets the same id for the same schema
        # under another subject: ids are global.
        other = SchemaRegistryClient({"url": url})
        self.assertEqual(other.register_schema("py-other-value", Schema(V1, "AVRO")), id1)
        self.assertEqual(other.get_schema(id1).schema_str, V1)

        id2 = sr.register_schema("py-req-value", Schema(V2, "AVRO"))
        self.assertNotEqual(id1, id2)
        latest = other.get_latest_version("py-req-value")
        self.assertEqual((latest.schema_id, latest.version, latest.subject), (id2, 2, "py-req-value"))
        self.assertEqual(other.get_version("py-req-value", 1).schema.schema_str, V1)
        self.assertEqual(other.get_versions("py-req-value"), [1, 2])
        found = other.lookup_schema("py-req-value", Schema(V1, "AVRO"))
        self.assertEqual((found.schema_id, found.version), (id1, 1))
        self.assertIn("py-req-value", other.get_subjects())
        self.assertEqual(sorted(other.get_subjects_by_schema_id(id1)), ["py-other-value", "py-req-value"])

        # Compatibility: a new field without default breaks BACKWARD.
        self.assertFalse(other.test_compatibility("py-req-value", Schema(V3_BAD, "AVRO")))
        self.assertTrue(other.test_compatibility("py-req-value", Schema(V2, "AVRO"), version=1))
        err = self.expect_error(409, other.register_schema, "py-req-value", Schema(V3_BAD, "AVRO"))
        self.assertIn("READER_FIELD_MISSING_DEFAULT_VALUE", err.error_message)
        self.assertEqual(err.http_status_code, 409)

        other.set_compatibility("py-req-value", "NONE")
        self.assertEqual(other.get_compatibility("py-req-value"), "NONE")
        id3 = other.register_schema("py-req-value", Schema(V3_BAD, "AVRO"))
        # A fresh client: the client caches "latest" lookups.
        self.assertEqual(SchemaRegistryClient({"url": url}).get_latest_version("py-req-value").schema_id, id3)

        # Errors with Confluent's codes.
        self.expect_error(40401, other.get_versions, "py-no-such-subject")
        self.expect_error(40402, other.get_version, "py-req-value", 42)
        self.expect_error(40403, other.get_schema, 987654)
        self.expect_error(42201, other.register_schema, "py-bad", Schema('{"type":"nope"}', "AVRO"))
        # A body over the limit: 413 with the same body shape as every error
        # (error_code and message are what Confluent's client reads).
        big = '{"type":"record","name":"big","doc":"' + "x" * (5 << 20) + '","fields":[]}'
        err = self.expect_error(413, other.register_schema, "py-big", Schema(big, "AVRO"))
        self.assertEqual(err.http_status_code, 413)
        self.assertIn("over", err.error_message)

        # Soft, then hard delete.
        self.assertEqual(other.delete_version("py-req-value", 3), 3)
        self.assertEqual(other.get_versions("py-req-value"), [1, 2])
        self.expect_error(40405, other.delete_subject, "py-req-value", permanent=True)
        self.assertEqual(other.delete_subject("py-req-value"), [1, 2])
        self.assertEqual(other.delete_subject("py-req-value", permanent=True), [1, 2, 3])
        self.assertNotIn("py-req-value", other.get_subjects())

    def test_protobuf_json_tensor_and_references(self):
        sr = self.sr
        money = 'syntax = "proto3";\npackage common;\nmessage Money { int64 cents = 1; }\n'
        order = ('syntax = "proto3";\npackage shop;\nimport "common/money.proto";\n'
                 'message Order { common.Money price = 1; }\n')
        sr.register_schema("py-money", Schema(money, "PROTOBUF"))
        ref = SchemaReference("common/money.proto", "py-money", 1)
        oid = sr.register_schema("py-order", Schema(order, "PROTOBUF", [ref]))
        got = SchemaRegistryClient({"url": url}).get_schema(oid)
        self.assertEqual(got.schema_type, "PROTOBUF")
        self.assertEqual([(r.name, r.subject, r.version) for r in got.references],
                         [("common/money.proto", "py-money", 1)])
        # Reusing field number 1 with another type is refused.
        bad = order.replace("common.Money price = 1;", "string price = 1;")
        self.expect_error(409, sr.register_schema, "py-order", Schema(bad, "PROTOBUF", [ref]))
        self.expect_error(42206, sr.delete_subject, "py-money")

        sr.register_schema("py-json", Schema('{"type":"object","properties":{"a":{"type":"string"}}}', "JSON"))
        sr.register_schema("py-mlp", Schema(SIG, "TENSOR"))
        self.assertTrue(sr.test_compatibility("py-mlp", Schema(SIG.replace("[-1,4]", "[-1,-1]"), "TENSOR")))
        self.assertFalse(sr.test_compatibility("py-mlp", Schema(SIG.replace('"f32","shape":[-1,4]', '"f16","shape":[-1,4]'), "TENSOR")))

    def test_avro_serde_round_trip(self):
        # The real producer/consumer path: the serializer registers the
        # schema and frames the payload with its id; the deserializer
        # fetches the schema by that id from the registry.
        ser = AvroSerializer(self.sr, V2)
        ctx = SerializationContext("py-serde", MessageField.VALUE)
        payload = ser({"id": 7, "tag": "hello"}, ctx)
        self.assertEqual(payload[0], 0)  # Confluent magic byte
        schema_id = int.from_bytes(payload[1:5], "big")
        self.assertEqual(SchemaRegistryClient({"url": url}).get_latest_version("py-serde-value").schema_id, schema_id)
        de = AvroDeserializer(SchemaRegistryClient({"url": url}))
        self.assertEqual(de(payload, ctx), {"id": 7, "tag": "hello"})


if __name__ == "__main__":
    unittest.main(verbosity=2)
