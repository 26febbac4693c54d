"""A small tritonclient-based load driver (perf_analyzer needs a newer
glibc than Debian 12 has), against any KServe v2 server. Concurrency 1 is
a closed loop of `infer` calls through tritonclient's ordinary clients
(`tritonclient.http`, geventhttpclient; `tritonclient.grpc`), as a user
calls it; concurrency N > 1 runs N asyncio tasks, each a closed loop
through tritonclient's asyncio clients (`tritonclient.http.aio`, aiohttp;
`tritonclient.grpc.aio`). Prints one JSON line: requests, errors, req/s,
p50 and p99 in microseconds.

  driver.py --url 127.0.0.1:8000 --protocol http --concurrency 32 --duration 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import numpy as np


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--protocol", choices=["http", "grpc"], required=True)
    p.add_argument("--model", default="mlp")
    p.add_argument("--version", default="1")
    p.add_argument("--input", default="x")
    p.add_argument("--output", default="y")
    p.add_argument("--shape", default="1,4")
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--header", action="append", default=[], help="Name: value")
    p.add_argument("--json-data", action="store_true", help="HTTP: JSON tensors instead of binary")
    return p.parse_args()


def sync_loop(a: argparse.Namespace, x: np.ndarray, headers: dict) -> None:
    shape = list(x.shape)
    if a.protocol == "http":
        import tritonclient.http as tc

        client = tc.InferenceServerClient(a.url)
    else:
        import tritonclient.grpc as tc

        client = tc.InferenceServerClient(a.url)
        headers = {k.lower(): v for k, v in headers.items()}
    i = tc.InferInput(a.input, shape, "FP32")
    if a.protocol == "http":
        i.set_data_from_numpy(x, binary_data=not a.json_data)
        o = tc.InferRequestedOutput(a.output, binary_data=not a.json_data)
    else:
        i.set_data_from_numpy(x)
        o = tc.InferRequestedOutput(a.output)
    lat, errors, first = [], 0, ""
    t_record = time.perf_counter() + a.warmup
    t_end = t_record + a.duration
    while True:
        t0 = time.perf_counter()
        if t0 >= t_end:
            break
        try:
            client.infer(a.model, [i], model_version=a.version, outputs=[o], headers=dict(headers)).as_numpy(a.output)
        except Exception as e:  # counted and reported, never hidden
            errors += 1
            first = first or str(e)[:200]
            continue
        if t0 >= t_record:
            lat.append(time.perf_counter() - t0)
    client.close()
    report(a, lat, errors, first)


def report(a: argparse.Namespace, lat: list, errors: int, first: str) -> None:
    lat.sort()
    n = len(lat)
    pct = lambda q: round(lat[min(n - 1, int(q * n))] * 1e6, 1) if n else None
    print(json.dumps({
        "protocol": a.protocol, "concurrency": a.concurrency, "requests": n,
        "errors": errors, "first_error": first,
        "rps": round(n / a.duration, 1), "p50_us": pct(0.50), "p99_us": pct(0.99),
    }))


async def main() -> None:
    a = parse()
    shape = [int(d) for d in a.shape.split(",")]
    x = (np.arange(np.prod(shape), dtype=np.float32).reshape(shape) % 7) * 0.25 - 0.5
    headers = dict(h.split(": ", 1) for h in a.header)
    if a.concurrency == 1:
        sync_loop(a, x, headers)
        return
    if a.protocol == "http":
        import tritonclient.http.aio as tc

        client = tc.InferenceServerClient(a.url, conn_limit=max(a.concurrency, 1))
        binary = not a.json_data
    else:
        import tritonclient.grpc.aio as tc

        client = tc.InferenceServerClient(a.url)
        headers = {k.lower(): v for k, v in headers.items()}
        binary = True

    def request():
        i = tc.InferInput(a.input, shape, "FP32")
        if a.protocol == "http":
            i.set_data_from_numpy(x, binary_data=binary)
            o = tc.InferRequestedOutput(a.output, binary_data=binary)
        else:
            i.set_data_from_numpy(x)
            o = tc.InferRequestedOutput(a.output)
        return [i], [o]

    lat: list = []
    errors = {"n": 0, "first": ""}
    t_start = time.perf_counter()
    t_record = t_start + a.warmup
    t_end = t_record + a.duration

    async def worker() -> None:
        inputs, outputs = request()
        while True:
            t0 = time.perf_counter()
            if t0 >= t_end:
                return
            try:
                r = await client.infer(a.model, inputs, model_version=a.version, outputs=outputs,
                                       headers=dict(headers))
                r.as_numpy(a.output)
            except Exception as e:  # counted and reported, never hidden
                errors["n"] += 1
                errors["first"] = errors["first"] or str(e)[:200]
                continue
            t1 = time.perf_counter()
            if t0 >= t_record:
                lat.append(t1 - t0)

    await asyncio.gather(*(worker() for _ in range(a.concurrency)))
    await client.close()
    report(a, lat, errors["n"], errors["first"])


if __name__ == "__main__":
    asyncio.run(main())
