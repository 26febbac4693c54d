"""The reference for the async-jobs tests: onnxruntime-python runs
models/mlp.onnx (with its LoRA adapter when asked) on each input.

stdin: one JSON object per line, {"x": [...], "batch": N, "adapter": ""|"formal"}
stdout: one JSON list per line, the output y (f32, [batch, 3]) flattened.
"""

import json
import sys

import numpy as np
import onnxruntime as ort

models = sys.argv[1]
so = ort.SessionOptions()
so.log_severity_level = 3  # the LoRA initializers-as-inputs warning is expected
mlp = ort.InferenceSession(models + "/mlp.onnx", so, providers=["CPUExecutionProvider"])
adapter = ort.LoraAdapter()
adapter.Load(models + "/mlp_formal.onnx_adapter")
with_adapter = ort.RunOptions()
with_adapter.add_active_adapter(adapter)

for line in sys.stdin:
    req = json.loads(line)
    x = np.asarray(req["x"], dtype=np.float32).reshape(req["batch"], 4)
    ro = with_adapter if req["adapter"] else None
    (y,) = mlp.run(["y"], {"x": x}, ro)
    print(json.dumps([float(v) for v in y.reshape(-1)]))
