"""Token streams through the front door's gRPC ModelStreamInfer with the
unmodified tritonclient, for perf/frontdoor-stream.sh: one stream of
TOKENS tokens of the `endless` decoder at a time (TPF tokens per frame,
default 1), ROUNDS streams; prints JSON with the gap between responses the
client's callback sees (p50, p99, ns), tokens/s and time to first token.

    python stream_driver.py GRPC_ADDR TOKENS ROUNDS [TPF]
"""

import json
import queue
import sys
import time

import numpy as np
import tritonclient.grpc as grpcclient


def main():
    addr, tokens, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    tpf = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    c = grpcclient.InferenceServerClient(addr)
    q = queue.Queue()

    def cb(result, error):
        q.put((time.perf_counter_ns(), result, error))

    c.start_stream(cb)
    prompt = grpcclient.InferInput("token", [5], "INT64")
    prompt.set_data_from_numpy(np.frombuffer(b"bench", np.uint8).astype(np.int64))
    gaps, ttfts, rates = [], [], []
    for r in range(rounds):
        t0 = time.perf_counter_ns()
        c.async_stream_infer("endless", [prompt], model_version="1", request_id=str(r),
                             parameters={"max_tokens": tokens, "tokens_per_frame": tpf})
        last, n = None, 0
        while True:
            t, res, err = q.get(timeout=60)
            if err is not None:
                sys.exit(f"stream error: {err}")
            resp = res.get_response()
            n += len(res.as_numpy("token")) if resp.outputs else 0
            if last is None:
                ttfts.append(t - t0)
            else:
                gaps.append(t - last)
            last = t
            if resp.parameters["triton_final_response"].bool_param:
                break
        if n != tokens:
            sys.exit(f"got {n} tokens, wanted {tokens}")
        rates.append(tokens / ((last - t0) / 1e9))
    c.stop_stream()
    gaps.sort()
    print(json.dumps({
        "itl_p50_ns": gaps[len(gaps) // 2],
        "itl_p99_ns": gaps[int(len(gaps) * 0.99)],
        "ttft_p50_ns": sorted(ttfts)[len(ttfts) // 2],
        "tokens_per_s": sorted(rates)[len(rates) // 2],
    }))


if __name__ == "__main__":
    main()
