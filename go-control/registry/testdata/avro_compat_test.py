#!/usr/bin/env python3
"""Cross-check of the registry's Avro compatibility verdicts against
Apache Avro's own checker (the `avro` package's
ReaderWriterCompatibilityChecker, Apache's Python port of Java's
SchemaCompatibility; installed with confluent-kafka[avro]).

Every ordered pair (writer, reader) of a pool of schemas is asked of the
registry (POST /compatibility/subjects/S/versions/latest under BACKWARD,
S holding the writer) and of Avro; the answers must agree. Pairs whose
schemas Python's Avro refuses to parse are skipped (Java's parser, which
the registry follows, is the reference for parsing: TestAvroParse).

Known difference between Avro's Python and Java checkers, so left out of
the pool: a reader field whose name and aliases match several writer
fields, where Java throws (Confluent: incompatible) and Python takes the
first; the registry follows Java, and TestAvroDiff has those cases.

    python3 go-control/registry/testdata/avro_compat_test.py
"""
import itertools
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import urllib.request

import avro.schema
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

GO_CONTROL = pathlib.Path(__file__).resolve().parents[2]


def rec(name, *fields, ns=None, aliases=None):
    s = {"type": "record", "name": name, "fields": list(fields)}
    if ns:
        s["namespace"] = ns
    if aliases:
        s["aliases"] = aliases
    return s


def f(name, typ, **kw):
    return dict({"name": name, "type": typ}, **kw)


def enum(name, *symbols, **kw):
    return dict({"type": "enum", "name": name, "symbols": list(symbols)}, **kw)


def fixed(name, size, ns=None):
    s = {"type": "fixed", "name": name, "size": size}
    if ns:
        s["namespace"] = ns
    return s


# Families of one record "R" (so most pairs are real evolutions), plus
# top-level primitives, unions and containers.
POOL = [
    "int", "long", "float", "double", "string", "bytes", "boolean", "null",
    ["null", "int"], ["int", "string"], ["string", "long"], ["null", "string", "long"],
    {"type": "array", "items": "int"}, {"type": "array", "items": "long"},
    {"type": "map", "values": "string"}, {"type": "map", "values": "bytes"},
    enum("E", "A", "B"), enum("E", "A", "B", "C"), enum("E", "A"), enum("E", "A", "B", default="A"),
    enum("F", "A", "B"), enum("E", "A", "B", namespace="x"),
    fixed("H", 4), fixed("H", 8), fixed("H", 4, ns="x"), fixed("G", 4),
    rec("R", f("a", "int")),
    rec("R", f("a", "long")),
    rec("R", f("a", "int"), f("b", "string")),
    rec("R", f("a", "int"), f("b", "string", default="")),
    rec("R", f("a", "int"), f("b", ["null", "string"], default=None)),
    rec("R", f("a", ["null", "int"], default=None)),
    rec("R", f("a", ["string", "long"])),
    rec("R", f("c", "int", aliases=["a"])),
    rec("R", f("a", "int"), ns="x"),
    rec("R", f("a", "int"), ns="y"),
    rec("Q", f("a", "int")),
    rec("Q", f("a", "int"), aliases=["R"]),
    rec("R", f("a", "int"), f("k", enum("K", "X", "Y"), default="X")),
    rec("R", f("a", "int"), f("k", enum("K", "X"), default="X")),
    rec("R", f("a", "int"), f("k", enum("K", "X", "Y", default="X"))),
    rec("R", f("a", rec("S", f("v", "int")))),
    rec("R", f("a", rec("S", f("v", "long")))),
    rec("R", f("a", rec("S", f("v", "int"), ns="z"))),
    rec("R", f("a", rec("S", f("v", "int"), f("w", "string")))),
    rec("R", f("a", ["null", rec("S", f("v", "int"))], default=None)),
    rec("R", f("a", ["null", rec("S", f("v", "int"), ns="z")], default=None)),
    rec("R", f("next", ["null", "R"], default=None), f("v", "int")),
    rec("R", f("next", ["null", "R"], default=None), f("v", "long")),
    rec("R", f("a", {"type": "array", "items": "int"})),
    rec("R", f("a", {"type": "array", "items": "double"})),
    rec("R", f("a", {"type": "map", "values": "float"})),
    rec("R", f("a", fixed("H", 4))),
    rec("R", f("a", fixed("H", 16))),
    # A union whose first matching branch fails while a later one fits.
    [rec("A", f("z", "int"), aliases=["R"]), rec("R", f("a", "int"))],
]


def start_server():
    tmp = tempfile.mkdtemp(prefix="regserver-")
    binary = os.path.join(tmp, "regserver")
    subprocess.run(["go", "build", "-o", binary, "./registry/cmd/regserver"], cwd=GO_CONTROL, check=True)
    server = subprocess.Popen([binary, "-listen", "127.0.0.1:0"], stdout=subprocess.PIPE, text=True)
    line = server.stdout.readline().strip()
    if not line.startswith("listening on "):
        server.kill()
        raise RuntimeError("regserver did not start: %r" % line)
    return server, "http://" + line.split()[-1]


def call(url, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method,
                                 headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def main():
    server, url = (None, os.environ["SR_URL"]) if os.environ.get("SR_URL") else start_server()
    try:
        parsed, subjects = {}, {}
        for i, s in enumerate(POOL):
            text = json.dumps(s)
            try:
                parsed[i] = avro.schema.parse(text)
            except Exception as e:  # Python's parser refuses: not compared
                print(f"skip {text}: python avro: {e}")
                continue
            subj = f"avro-xcheck-{i}"
            code, body = call(url, "POST", f"/subjects/{subj}/versions", {"schema": text})
            if code != 200:
                sys.exit(f"registry refused {text}: {code} {body}")
            call(url, "PUT", f"/config/{subj}", {"compatibility": "BACKWARD"})
            subjects[i] = subj
        pairs = disagree = compatible = 0
        for w, r in itertools.product(sorted(parsed), repeat=2):
            want = ReaderWriterCompatibilityChecker().get_compatibility(parsed[r], parsed[w]).compatibility \
                is SchemaCompatibilityType.compatible
            code, body = call(url, "POST", f"/compatibility/subjects/{subjects[w]}/versions/latest?verbose=true",
                              {"schema": json.dumps(POOL[r])})
            if code != 200:
                sys.exit(f"compatibility check failed: {code} {body}")
            pairs += 1
            compatible += want
            if body["is_compatible"] != want:
                disagree += 1
                print(f"DISAGREE writer {json.dumps(POOL[w])}\n         reader {json.dumps(POOL[r])}\n"
                      f"  avro: {want}, registry: {body['is_compatible']} {body.get('messages', [])[:1]}")
        print(f"avro cross-check: {pairs} pairs ({compatible} compatible per Apache Avro), {disagree} disagreements")
        if disagree or pairs < 1000:
            sys.exit(1)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)


if __name__ == "__main__":
    main()
