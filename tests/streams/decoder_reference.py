#!/usr/bin/env python3
"""The reference for token streams of the bundled decoder (models/decoder.onnx).

Runs greedy generation with onnxruntime-python, one step per run, carrying
the state from each step's `hN` into the next step's `h` (zeros at the
start) as the appliance does: every prompt byte is one step, the prompt's
last step chooses the first token, each chosen token is the next step's
input; generation ends at EOS (token 0, not included) or after
MAX_TOKENS tokens. Prints one JSON object: {"<prompt>": [tokens...], ...}.

    python3 tests/streams/decoder_reference.py MODEL.onnx MAX_TOKENS PROMPT...
"""

import json
import sys

import numpy as np
import onnxruntime as ort

EOS = 0
HIDDEN = 16


def generate(sess, prompt, max_tokens):
    h = np.zeros((1, HIDDEN), dtype=np.float32)
    nxt = EOS
    for b in prompt:
        nxt_a, h = sess.run(["next", "hN"], {"token": np.array([b], dtype=np.int64), "h": h})
        nxt = int(nxt_a[0])
    out = []
    while len(out) < max_tokens and nxt != EOS:
        out.append(nxt)
        if len(out) == max_tokens:
            break
        nxt_a, h = sess.run(["next", "hN"], {"token": np.array([nxt], dtype=np.int64), "h": h})
        nxt = int(nxt_a[0])
    return out


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    sess = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
    max_tokens = int(sys.argv[2])
    result = {p: generate(sess, p.encode(), max_tokens) for p in sys.argv[3:]}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
