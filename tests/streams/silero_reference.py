#!/usr/bin/env python3
"""The reference for the Silero VAD stream test (dataplane/engine/tests/e2e_streams.rs).

Makes 10 s of 16 kHz audio: real synthetic speech from espeak-ng (Debian
package, installed by scripts/setup.sh) with pauses between sentences and
a little noise, deterministic for one espeak-ng build; runs Silero VAD over it in 512-sample chunks with onnxruntime-python,
carrying the state from each step's `stateN` into the next step's `state`
(zeros at the start), and writes the results. As the silero-vad package's
own wrapper does, each step's input is the last 64 samples of the previous
chunk (zeros at first) followed by the chunk: 576 samples. The context is
audio the client has anyway; the recurrent state is what the appliance
keeps. Writes

    <out>.f32   the audio, little-endian float32
    <out>.json  {"chunk": 512, "context": 64, "sr": 16000, "probs": [...]}

    python3 tests/streams/silero_reference.py MODEL.onnx OUT_PREFIX
"""

import io
import json
import subprocess
import sys
import wave

import numpy as np
import onnxruntime as ort

SR = 16000
CHUNK = 512
CONTEXT = 64
SECONDS = 10


SENTENCES = [
    "Sluice keeps the state of every stream in the appliance.",
    "The client sends only the new chunk of audio.",
    "It gets back the probability of speech.",
]


def speech(text: str) -> np.ndarray:
    """espeak-ng's 22 050 Hz mono 16-bit WAV of `text`, as float32 at 16 kHz."""
    wav = subprocess.run(["espeak-ng", "--stdout", "-s", "150", text], check=True,
                         capture_output=True).stdout
    with wave.open(io.BytesIO(wav)) as w:
        rate = w.getframerate()
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float64) / 32768
    t_out = np.arange(int(pcm.size * SR / rate)) / SR
    return np.interp(t_out, np.arange(pcm.size) / rate, pcm)


def audio() -> np.ndarray:
    rng = np.random.default_rng(18)
    parts = []
    for text in SENTENCES:
        parts.append(speech(text))
        parts.append(np.zeros(int(0.8 * SR)))
    x = np.concatenate(parts)[: SR * SECONDS]
    x = np.pad(x, (0, SR * SECONDS - x.size))
    x += 0.002 * rng.standard_normal(x.size)
    return x.astype(np.float32)


def main() -> None:
    model, out = sys.argv[1], sys.argv[2]
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    x = audio()
    state = np.zeros((2, 1, 128), dtype=np.float32)
    context = np.zeros(CONTEXT, dtype=np.float32)
    sr = np.array(SR, dtype=np.int64)
    probs = []
    for i in range(x.size // CHUNK):
        chunk = x[i * CHUNK:(i + 1) * CHUNK]
        step = np.concatenate([context, chunk])[None, :]
        prob, state = sess.run(["output", "stateN"], {"input": step, "state": state, "sr": sr})
        probs.append(float(prob[0, 0]))
        context = chunk[-CONTEXT:]
    x.tofile(out + ".f32")
    with open(out + ".json", "w") as f:
        json.dump({"chunk": CHUNK, "context": CONTEXT, "sr": SR, "probs": probs}, f)


if __name__ == "__main__":
    main()
