"""KServe's own Python ModelServer (kserve 0.21 from PyPI) serving an ONNX
model through onnxruntime: what a user would pick instead of Sluice's front
door. The model class is KServe's documented custom-model pattern: load an
onnxruntime session, answer InferRequest with InferResponse (binary
outputs when the request asks for them).

  kserve_server.py --model_name mlp --model_path models/mlp.onnx --http_port 18080 --grpc_port 18081
"""

from __future__ import annotations

import argparse

import kserve
import numpy as np
import onnxruntime as ort
from kserve import InferOutput, InferRequest, InferResponse
from kserve.utils.utils import generate_uuid


class OnnxModel(kserve.Model):
    def __init__(self, name: str, path: str) -> None:
        super().__init__(name)
        self.path = path
        self.load()

    def load(self) -> bool:
        so = ort.SessionOptions()
        # One intra-op thread, as each Sluice worker runs its session.
        so.intra_op_num_threads = 1
        self.session = ort.InferenceSession(self.path, so, providers=["CPUExecutionProvider"])
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.ready = True
        return self.ready

    def predict(self, payload: InferRequest, headers=None, response_headers=None) -> InferResponse:
        feeds = {i.name: i.as_numpy() for i in payload.inputs}
        ys = self.session.run(self.output_names, feeds)
        outputs = []
        for name, y in zip(self.output_names, ys):
            o = InferOutput(name=name, shape=list(y.shape), datatype="FP32")
            o.set_data_from_numpy(np.ascontiguousarray(y), binary_data=payload.from_grpc)
            outputs.append(o)
        return InferResponse(
            response_id=payload.id or generate_uuid(),
            model_name=self.name,
            infer_outputs=outputs,
            use_binary_outputs=payload.use_binary_outputs,
            requested_outputs=payload.request_outputs,
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(parents=[kserve.model_server.parser])
    parser.add_argument("--model_path", required=True)
    args, _ = parser.parse_known_args()
    model = OnnxModel(args.model_name, args.model_path)
    kserve.ModelServer(http_port=args.http_port, grpc_port=args.grpc_port, workers=1,
                       enable_latency_logging=False).start([model])
