#!/usr/bin/env python3
"""Published ONNX models served by sluiced, checked against onnxruntime-python.

Starts sluiced (the real Go control plane and Rust engine) from a config that
lists Silero VAD (both exports) and NudeNet's detector, loads ddddocr's OCR
model through `sluicectl models load`, checks `sluicectl models show`, then
sends real-looking inputs over UDP and compares every output element with
onnxruntime-python run on the same inputs (same ONNX Runtime release, one
thread). Bad input gets its error code. Exits non-zero on any mismatch.

    python3 tests/published_models/check_published.py   (from the repo root)

Needs: .cache/bin/sluiced and sluicectl (scripts/build-ffi.sh), the models
(scripts/setup-models.sh), the ONNX Runtime library (SLUICE_ORT_LIB) and
onnxruntime + numpy for Python (scripts/setup.sh installs the pinned ones).
"""

import json
import math
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODELS = os.path.join(ROOT, ".cache", "models")
BIN = os.path.join(ROOT, ".cache", "bin")

# Wire format v1 (docs/wire.md): the few pieces a request and a response need.
DTYPE_CODE = {np.float32: 1, np.uint8: 2, np.int8: 3, np.int32: 6, np.int64: 7, np.float64: 11}
CODE_DTYPE = {1: np.float32, 2: np.uint8, 3: np.int8, 6: np.int32, 7: np.int64, 11: np.float64}
KIND_REQUEST, KIND_RESPONSE, KIND_ERROR = 1, 2, 3


def align64(n):
    return (n + 63) & ~63


def encode_request(request_id, model, version, tensors):
    """tensors: list of (name, np.ndarray). Returns the frame bytes."""
    strings = model.encode() + version.encode()
    entries = b""
    header_len = 96 + len(strings) + sum(12 + 8 * a.ndim + len(n) for n, a in tensors)
    off = header_len
    body_parts = []
    for name, a in tensors:
        a = np.require(a, requirements="C")
        start = align64(off)
        data = a.tobytes()
        entries += struct.pack("<BBBBII", DTYPE_CODE[a.dtype.type], a.ndim, len(name), 0, start, len(data))
        entries += b"".join(struct.pack("<Q", d) for d in a.shape) + name.encode()
        body_parts.append((start, data))
        off = start + len(data)
    frame = bytearray(off)
    fixed = struct.pack(
        "<4sBBHHHIQQIIII16s8sBBBBBBBB16s",
        b"SLCE", 1, KIND_REQUEST, 0, header_len, 0, 0, request_id, 0, off - header_len,
        0, 0, 0, b"\0" * 16, b"\0" * 8, 0, len(model), len(version), 0, 0, 0, len(tensors), 0, b"\0" * 16,
    )
    assert len(fixed) == 96
    frame[:96] = fixed
    frame[96:header_len] = strings + entries
    for start, data in body_parts:
        frame[start:start + len(data)] = data
    return bytes(frame)


def decode(frame):
    """Returns ('response', {name: array}) or ('error', (code, message))."""
    assert frame[:4] == b"SLCE", "not a Sluice frame"
    kind = frame[5]
    header_len, = struct.unpack_from("<H", frame, 8)
    model_len, version_len, adapter_len, intent_len, ext_count, tensor_count = frame[73:79]
    if kind == KIND_ERROR:
        code, mlen = struct.unpack_from("<HH", frame, header_len)
        return "error", (code, frame[header_len + 4:header_len + 4 + mlen].decode())
    assert kind == KIND_RESPONSE, f"kind {kind}"
    off = 96 + model_len + version_len + adapter_len + intent_len
    for _ in range(ext_count):
        off += 2 + frame[off] + frame[off + 1]
    out = {}
    for _ in range(tensor_count):
        dtype, rank, name_len, _, data_off, data_len = struct.unpack_from("<BBBBII", frame, off)
        off += 12
        dims = struct.unpack_from("<" + "Q" * rank, frame, off)
        off += 8 * rank
        name = frame[off:off + name_len].decode()
        off += name_len
        assert data_off % 64 == 0
        a = np.frombuffer(frame[data_off:data_off + data_len], dtype=CODE_DTYPE[dtype]).reshape(dims)
        out[name] = a
    return "response", out


class Client:
    def __init__(self, addr):
        self.s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.s.settimeout(5.0)
        self.addr = addr
        self.rid = 1

    def call(self, model, version, tensors):
        rid = self.send(model, version, tensors)
        return self.collect([rid])[rid]

    def send(self, model, version, tensors):
        self.rid += 1
        frame = encode_request(self.rid, model, version, tensors)
        assert len(frame) <= 65472, f"request of {len(frame)} bytes does not fit one datagram"
        self.s.sendto(frame, self.addr)
        return self.rid

    def collect(self, rids):
        """The answers to requests `rids` (sent with send), by request id."""
        out = {}
        while len(out) < len(rids):
            data, _ = self.s.recvfrom(70000)
            rid, = struct.unpack_from("<Q", data, 16)
            if rid in rids:
                out[rid] = decode(data)
        return out


def free_port(kind):
    s = socket.socket(socket.AF_INET, kind)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def reference(path):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


failures = []
report = []


def compare(label, got, sess, feeds):
    want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    if set(got) != set(want):
        failures.append(f"{label}: outputs {sorted(got)} != {sorted(want)}")
        return
    exact = True
    for name, w in want.items():
        g = got[name]
        if g.shape != w.shape or g.dtype != w.dtype:
            failures.append(f"{label}: {name} is {g.dtype}{list(g.shape)}, reference {w.dtype}{list(w.shape)}")
            continue
        if not np.array_equal(g, w):
            exact = False
            diff = np.max(np.abs(g.astype(np.float64) - w.astype(np.float64)))
            if not np.allclose(g, w, rtol=1e-5, atol=1e-6):
                failures.append(f"{label}: {name} differs by up to {diff}")
    n = sum(a.size for a in want.values())
    report.append(f"{label}: {n} output elements {'bit-identical' if exact else 'within 1e-5'}")


def speechy(n, seed):
    """16 kHz audio-like signal: a voiced tone with harmonics, noise, silence."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) / 16000.0
    f0 = 140 + 30 * math.sin(seed)
    s = sum(np.sin(2 * np.pi * f0 * k * t) / k for k in range(1, 6))
    env = np.clip(np.sin(np.pi * np.arange(n) / n), 0, 1)
    return (0.3 * s * env + 0.01 * rng.standard_normal(n)).astype(np.float32)


def picture(shape, seed):
    """An image-like tensor in [0, 1]: gradients, a bright blob and noise."""
    rng = np.random.default_rng(seed)
    c, h, w = shape[-3], shape[-2], shape[-1]
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([(x / w) * (0.5 + 0.5 * k / max(c, 1)) + 0.3 * np.exp(-((x - w / 2) ** 2 + (y - h / 3) ** 2) / (w * 2)) for k in range(c)])
    img = img + 0.05 * rng.standard_normal(img.shape)
    return np.clip(img, 0, 1).astype(np.float32).reshape(shape)


def main():
    sluiced, sluicectl = os.path.join(BIN, "sluiced"), os.path.join(BIN, "sluicectl")
    lib = os.environ.get("SLUICE_ORT_LIB") or os.path.join(ROOT, ".cache/onnxruntime/libonnxruntime.so.1.31.1")
    for f in [sluiced, sluicectl, lib, os.path.join(MODELS, "silero_vad.onnx")]:
        if not os.path.exists(f):
            sys.exit(f"missing {f}: run scripts/build-ffi.sh and scripts/setup-models.sh")
    tmp = tempfile.mkdtemp(prefix="sluice-published-")
    port, admin = free_port(socket.SOCK_DGRAM), free_port(socket.SOCK_STREAM)
    m = lambda f: os.path.join(MODELS, f)
    # Unsigned requests: this check is about models and outputs, not
    # authentication (which the engine's own e2e tests cover).
    cfg = f"""
[auth]
mode = "none"
[engine]
workers = [{1 if os.cpu_count() > 1 else 0}]
transport = "io_uring"
poll = "adaptive"
[io_uring]
listen = "127.0.0.1:{port}"
rx_buffers = 64
tx_buffers = 64
buffer_size = 65536
[onnxruntime]
library = "{lib}"
[[shards]]
name = "cpu"
[[routes]]
name = "all"
shard = "cpu"
[[models]]
name = "silero"
version = "6.2.3"
kind = "onnx"
path = "{m('silero_vad.onnx')}"
aliases = ["stable"]
[[models]]
name = "silero16k"
version = "6.2.3"
kind = "onnx"
path = "{m('silero_vad_16k_op15.onnx')}"
[[models]]
name = "nudenet"
version = "3.4.2"
kind = "onnx"
path = "{m('nudenet_320n.onnx')}"
[[models]]
name = "nudenet"
version = "3.4.2-batched"
kind = "onnx"
path = "{m('nudenet_320n.onnx')}"
batch_max = 8
batch_delay_us = 50000
[control]
admin_listen = "127.0.0.1:{admin}"
store = "embedded"
data_dir = "{tmp}/data"
"""
    cfg_path = os.path.join(tmp, "sluice.toml")
    with open(cfg_path, "w") as f:
        f.write(cfg)
    log = open(os.path.join(tmp, "sluiced.log"), "w+")
    proc = subprocess.Popen([sluiced, "-config", cfg_path], stdout=log, stderr=subprocess.STDOUT)
    env = dict(os.environ, SLUICE_ADDR=f"127.0.0.1:{admin}")
    ctl = lambda *a: subprocess.run([sluicectl, *a], env=env, capture_output=True, text=True, timeout=60)
    try:
        for _ in range(300):
            log.seek(0)
            if "sluiced serving" in log.read():
                break
            if proc.poll() is not None:
                log.seek(0)
                sys.exit("sluiced exited:\n" + log.read())
            time.sleep(0.1)
        else:
            sys.exit("sluiced did not start in 30 s")

        for name, version, file in (("ocrdet", "1.4.4", "ppocrv4_det.onnx"), ("ocr", "1.6.1", "ddddocr_common_old.onnx")):
            r = ctl("models", "load", "-name", name, "-version", version, "-kind", "onnx", "-path", m(file))
            if r.returncode != 0:
                failures.append(f"sluicectl models load {name}: {r.stderr.strip()}")
        r = ctl("models", "show", "silero")
        if r.returncode != 0 or "allocator-placed" not in r.stdout or "stateN" not in r.stdout or "[2, ?, 128]" not in r.stdout:
            failures.append(f"sluicectl models show silero:\n{r.stdout}{r.stderr}")
        print(r.stdout)
        r = ctl("-json", "models", "show", "silero16k")
        doc = json.loads(r.stdout) if r.returncode == 0 else {}
        outs = {o["name"]: o for o in doc.get("versions", [{}])[0].get("outputs", [])}
        if outs.get("output", {}).get("placement") != "in-place-preallocated" or outs.get("stateN", {}).get("placement") != "allocator-placed":
            failures.append(f"silero16k placements: {r.stdout}{r.stderr}")
        if doc.get("versions", [{}])[0].get("inputs", [{}])[0].get("dims") != ["batch", "sequence"]:
            failures.append(f"silero16k input dims: {r.stdout}")
        r = ctl("models", "show", "nudenet")
        if r.returncode != 0 or "batching   yes (dimension 0), batch_max 8" not in r.stdout:
            failures.append(f"sluicectl models show nudenet (batching):\n{r.stdout}{r.stderr}")
        r = ctl("-json", "models", "show", "silero")
        doc = json.loads(r.stdout) if r.returncode == 0 else {}
        v = doc.get("versions", [{}])[0]
        if v.get("batchable") is not False or "dimension 0" not in v.get("batch_refusal", ""):
            failures.append(f"silero must say why it cannot batch: {r.stdout}{r.stderr}")
        r = ctl("models", "show", "nosuchmodel")
        if r.returncode == 0 or "not found" not in (r.stdout + r.stderr):
            failures.append(f"models show of an unknown model: {r.returncode} {r.stdout}{r.stderr}")

        c = Client(("127.0.0.1", port))
        # Silero VAD, both exports: a stream of 512-sample chunks with the
        # state fed back, as the Python wrapper does.
        for name, file in [("silero", "silero_vad.onnx"), ("silero16k", "silero_vad_16k_op15.onnx")]:
            sess = reference(m(file))
            state = np.zeros((2, 1, 128), np.float32)
            sr = np.array(16000, np.int64)
            audio = speechy(512 * 6, 7)
            for i in range(6):
                x = audio[i * 512:(i + 1) * 512].reshape(1, 512)
                kind, got = c.call(name, "6.2.3", [("input", x), ("state", state), ("sr", sr)])
                if kind != "response":
                    failures.append(f"{name} chunk {i}: {got}")
                    break
                compare(f"{name} chunk {i}", got, sess, {"input": x, "state": state, "sr": sr})
                state = np.array(got["stateN"])
            # Batch of 3 at once.
            x = np.stack([speechy(512, s) for s in (1, 2, 3)])
            st = np.zeros((2, 3, 128), np.float32)
            kind, got = c.call(name, "6.2.3", [("input", x), ("state", st), ("sr", sr)])
            if kind != "response":
                failures.append(f"{name} batch 3: {got}")
            else:
                compare(f"{name} batch 3", got, sess, {"input": x, "state": st, "sr": sr})
            # Bad input: sr sent as int32.
            kind, got = c.call(name, "6.2.3", [("input", x[:1]), ("state", st[:, :1]), ("sr", np.array(16000, np.int32))])
            if kind != "error" or got[0] != 11:  # bad_tensor
                failures.append(f"{name} with an int32 sr: {kind} {got}")
        # NudeNet's detector on a 64x64 image (the largest that fits one
        # datagram with room to spare; 320x320 needs large frames).
        sess = reference(m("nudenet_320n.onnx"))
        for seed in (1, 2):
            img = picture((1, 3, 64, 64), seed)
            kind, got = c.call("nudenet", "3.4.2", [("images", img)])
            if kind != "response":
                failures.append(f"nudenet: {got}")
            else:
                compare(f"nudenet 64x64 seed {seed}", got, sess, {"images": img})
        # Dynamic batching on a published model with a batch dimension
        # ("batch" at dimension 0 of its input and output): 8 requests sent
        # at once are stacked into runs of up to 8 images; every answer must
        # equal onnxruntime-python's single-image run bit for bit.
        rids = {}
        for seed in range(10, 18):
            img = picture((1, 3, 64, 64), seed)
            rids[c.send("nudenet", "3.4.2-batched", [("images", img)])] = img
        answers = c.collect(list(rids))
        exact = True
        for rid, img in rids.items():
            kind, got = answers[rid]
            if kind != "response":
                failures.append(f"nudenet batched: {got}")
                exact = False
                continue
            want = sess.run(None, {"images": img})[0]
            if not np.array_equal(got["output0"], want):
                failures.append(f"nudenet batched request {rid}: differs from the single run by up to {np.max(np.abs(got['output0'] - want))}")
                exact = False
        time.sleep(0.15)  # stats are published every 50 ms
        r = ctl("-json", "stats")
        models = json.loads(r.stdout).get("models", []) if r.returncode == 0 else []
        nb = next((x for x in models if x["name"] == "nudenet" and x["version"] == "3.4.2-batched"), {})
        if nb.get("requests") != 8 or not 0 < nb.get("executions", 0) < 8:
            failures.append(f"nudenet batched: want 8 requests in fewer than 8 runs, stats {nb}")
        elif exact:
            report.append(f"nudenet batched: 8 requests in {nb['executions']} runs, every output bit-identical to single runs")
        # PaddleOCR's text detector (rapidocr, loaded through sluicectl):
        # every output dimension named only by the output.
        sess = reference(m("ppocrv4_det.onnx"))
        for h, w in ((64, 64), (32, 96)):
            img = picture((1, 3, h, w), h + w)
            kind, got = c.call("ocrdet", "1.4.4", [("x", img)])
            if kind != "response":
                failures.append(f"ocrdet {h}x{w}: {got}")
            else:
                compare(f"ocrdet {h}x{w}", got, sess, {"x": img})
        # ddddocr's OCR (loaded through sluicectl) answers 12x1x8210 floats
        # for a 64x96 line: larger than a datagram, so the answer is
        # response_too_large with the length needed.
        sess = reference(m("ddddocr_common_old.onnx"))
        line = picture((1, 1, 64, 96), 5)
        want = sess.run(None, {"input1": line})[0]
        kind, got = c.call("ocr", "1.6.1", [("input1", line)])
        if kind != "error" or got[0] != 20 or str(want.nbytes)[:2] not in got[1]:
            failures.append(f"ocr (400 KB answer): {kind} {got}")
        else:
            report.append(f"ocr 64x96: response_too_large ({got[1]}; reference answer {want.nbytes} bytes)")
        r = ctl("-json", "stats")
        if r.returncode == 0:
            ws = json.loads(r.stdout).get("workers", [])
            ok = sum(w.get("ok", 0) for w in ws)
            copied = sum(w.get("payload_bytes_copied", 0) for w in ws)
            print(f"engine: {ok} responses, payload_bytes_copied {copied}")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
    for line in report:
        print(line)
    if failures:
        log.seek(0)
        print("sluiced log:\n" + log.read()[-4000:])
        for f in failures:
            print("FAIL:", f)
        print(f"{len(report)} passed, {len(failures)} failed")
        sys.exit(1)
    print(f"{len(report)} passed, 0 failed")


if __name__ == "__main__":
    main()
