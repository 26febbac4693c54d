#!/usr/bin/env python3
"""Loads and unloads one model version through sluiced's admin API, over and
over, and samples the daemon's RSS (VmRSS from /proc) as it goes.

    cycle.py --admin 127.0.0.1:PORT --pid PID --cycles 1000 --kind onnx --path models/mlp.onnx

Prints one line per sample ("cycle rss anon file go_sys", KiB) and a summary: KiB of growth
per cycle over the first and the second half (after a warm-up).
"""
import argparse
import http.client
import json
import sys
import time


def rss_kib(pid):
    """VmRSS and its anonymous (heaps) and file-backed (mapped files such as
    the bbolt store and libraries) parts, in KiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key = line.split(":")[0]
            if key in ("VmRSS", "RssAnon", "RssFile"):
                out[key] = int(line.split()[1])
    return out["VmRSS"], out["RssAnon"], out["RssFile"]


def go_sys_kib(conn):
    """What the Go runtime holds from the OS (go_memstats_sys_bytes), KiB."""
    conn.request("GET", "/metrics")
    resp = conn.getresponse()
    text = resp.read().decode()
    for line in text.splitlines():
        if line.startswith("go_memstats_sys_bytes "):
            return int(float(line.split()[1])) // 1024
    return 0


def call(conn, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    text = resp.read()
    if resp.status >= 300:
        raise RuntimeError(f"{method} {path}: {resp.status} {text[:200]!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--admin", required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--cycles", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--kind", default="onnx")
    ap.add_argument("--path", default="")
    a = ap.parse_args()
    host, port = a.admin.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    model = {"name": "rsscycle", "version": "1", "kind": a.kind}
    if a.path:
        model["path"] = a.path
    samples = []
    t0 = time.monotonic()
    for i in range(a.warmup + a.cycles + 1):
        if i >= a.warmup and (i - a.warmup) % a.every == 0:
            samples.append((i - a.warmup, *rss_kib(a.pid), go_sys_kib(conn)))
            print(" ".join(map(str, samples[-1])), flush=True)
        if i == a.warmup + a.cycles:
            break
        call(conn, "POST", "/v1/models", model)
        call(conn, "DELETE", "/v1/models/rsscycle/versions/1")
    dt = time.monotonic() - t0
    half = len(samples) // 2
    s0, sm, s1 = samples[0], samples[half], samples[-1]
    rate = lambda a_, b_, k: round((b_[k] - a_[k]) / max(b_[0] - a_[0], 1), 3)
    print(json.dumps({"kind": a.kind, "cycles": a.cycles, "seconds": round(dt, 1),
                      "rss_start_kib": s0[1], "rss_end_kib": s1[1],
                      "kib_per_cycle_first_half": rate(s0, sm, 1),
                      "kib_per_cycle_second_half": rate(sm, s1, 1),
                      "anon_kib_per_cycle": rate(s0, s1, 2),
                      "file_kib_per_cycle": rate(s0, s1, 3),
                      "go_runtime_kib_per_cycle": rate(s0, s1, 4)}))


if __name__ == "__main__":
    sys.exit(main())
