"""ONNX Runtime (CPU) as the runner of .onnx artifacts."""

from __future__ import annotations

import numpy as np

from edgekit.signature import Signature

_ORT_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64,
              "tensor(int32)": np.int32, "tensor(int8)": np.int8, "tensor(uint8)": np.uint8,
              "tensor(bool)": np.bool_}


class OnnxRunner:
    def __init__(self, path: str, signature: Signature):
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.log_severity_level = 3
        self.session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        self.signature = signature
        inputs = self.session.get_inputs()
        by_name = {i.name: i for i in inputs}
        ours = signature.input_names
        self.inputs = [by_name[n] for n in ours] if set(ours) <= set(by_name) else inputs

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        onnx_feeds = {
            meta.name: np.array(feeds[spec.name], copy=True).astype(_ORT_TYPES.get(meta.type, np.float32), copy=False)
            for spec, meta in zip(self.signature.inputs, self.inputs)
        }
        return list(self.session.run(None, onnx_feeds))
