"""The README's Python examples run, in order, against the appliance (its
address in place of the demo's); the schemas they negotiate are registered
as the README's curl lines do."""

from __future__ import annotations

import json
import os
import pathlib
import re

import pytest

from conftest import ROOT

README = ROOT / "clients" / "python" / "README.md"


def test_readme_examples_run(appliance, tmp_path: pathlib.Path, capsys) -> None:
    pytest.importorskip("onnx")  # the own-model example builds one
    text = README.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 8
    appliance.http("POST", "/registry/subjects/chat-request/versions",
                   {"schemaType": "JSON", "schema": json.dumps({"type": "object", "required": ["prompt"]})})
    avro = {"type": "record", "name": "Req",
            "fields": [{"name": "id", "type": "int"}, {"name": "tag", "type": "string"}]}
    appliance.http("POST", "/registry/subjects/chat-request-avro/versions", {"schema": json.dumps(avro)})
    import sluice

    ns: dict = {}
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        for i, code in enumerate(blocks):
            code = code.replace("127.0.0.1:7070", appliance.data).replace("127.0.0.1:7072", appliance.tcp)
            if "negotiate(" in code:  # the registry reaches the data plane asynchronously
                from test_schemas import negotiated

                negotiated(ns["client"], "chat-request")
                negotiated(ns["client"], "chat-request-avro")
            exec(compile(code, f"README.md python block {i + 1}", "exec"), ns)
    finally:
        os.chdir(cwd)
        if "client" in ns:
            ns["client"].close()
    out = capsys.readouterr().out
    assert "formal" in out and "deadline_exceeded False" in out and "[1. 1. 1.]" in out
    assert "[[131072.]]" in out
    assert (tmp_path / "classifier.onnx").is_file()
    assert isinstance(ns["out"], dict) and len(ns["ys"]) == 32
    assert ns["avro"].schema_type == "AVRO" and isinstance(ns["schema"], sluice.NegotiatedSchema)
