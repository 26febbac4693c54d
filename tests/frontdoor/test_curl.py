"""Every curl example of docs/frontdoor.md, run against a real sluiced.
A block's `# ...` lines are its expected output; a block without them must
answer JSON without an error."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from conftest import ROOT

DOC = (ROOT / "docs" / "frontdoor.md").read_text()
BLOCKS = re.findall(r"```sh title=(\S+)\n(.*?)```", DOC, re.S)


def test_the_doc_has_curl_examples():
    assert len(BLOCKS) >= 4


@pytest.mark.parametrize("title,block", BLOCKS, ids=[t for t, _ in BLOCKS])
def test_curl_example(appliance, title, block):
    script = block.replace("127.0.0.1:8000", appliance.http_url)
    expected = [l[2:] for l in block.splitlines() if l.startswith("# ")]
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    text = out.stdout.strip()
    if expected:
        assert text == "\n".join(expected), text
        return
    body = json.loads(text)
    assert "error" not in body, body
    if "infer" in title:
        y = body["outputs"][0]
        assert y["name"] == "y" and y["shape"] == [1, 3] and len(y["data"]) == 3
