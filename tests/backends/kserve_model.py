"""A KServe v2 (Open Inference Protocol) backend without model weights.

KServe's own ModelServer serving one model, `tiny`, over REST and gRPC, so
Sluice can be tested against a real KServe server. scripts/backends.sh runs
it as

    python tests/backends/kserve_model.py --http_port 8201 --grpc_port 8202

(the port flags are KServe's own; it reads them when `kserve` is imported).

The model, fixed and deterministic:
    input  x: FP32, shape [1, 4]
    output y: FP32, shape [1, 4], y = 2 * x + 1 (element-wise)
so x = [[1, 2, 3, 4]] gives y = [[3, 5, 7, 9]]. Any other input (another
name, datatype or shape, or more than one input) is refused with KServe's
InvalidInput (HTTP 400, gRPC INVALID_ARGUMENT).

Note: KServe 0.21 binds REST on 0.0.0.0 and gRPC on [::]; it has no option
for the address.
"""

import uuid

import numpy as np
from kserve import InferOutput, InferRequest, InferResponse, Model, ModelServer
from kserve.errors import InvalidInput

NAME = "tiny"
SHAPE = [1, 4]


class Tiny(Model):
    def __init__(self) -> None:
        super().__init__(NAME)
        self.load()

    def load(self) -> bool:
        # Nothing to load: the function is the model.
        self.ready = True
        return self.ready

    def get_input_types(self):
        return [{"name": "x", "datatype": "FP32", "shape": SHAPE}]

    def get_output_types(self):
        return [{"name": "y", "datatype": "FP32", "shape": SHAPE}]

    async def predict(self, payload, headers=None, response_headers=None):
        if not isinstance(payload, InferRequest):
            raise InvalidInput("tiny speaks the v2 protocol only")
        if len(payload.inputs) != 1:
            raise InvalidInput(f"expected one input, got {len(payload.inputs)}")
        inp = payload.inputs[0]
        if inp.name != "x" or inp.datatype != "FP32" or list(inp.shape) != SHAPE:
            raise InvalidInput(
                f"expected input x FP32 {SHAPE}, got {inp.name} {inp.datatype} {list(inp.shape)}"
            )
        x = inp.as_numpy()
        y = (2 * x + 1).astype(np.float32)
        out = InferOutput(name="y", shape=SHAPE, datatype="FP32", data=y.flatten().tolist())
        # The v2 request's id is optional; the response's is a string, so one
        # is made when the request has none (KServe answers 500 on None).
        rid = payload.id or str(uuid.uuid4())
        return InferResponse(response_id=rid, model_name=NAME, infer_outputs=[out])


if __name__ == "__main__":
    ModelServer().start([Tiny()])
