"""ONNX Runtime (CPU) as the runner of .onnx artifacts."""

from __future__ import annotations

import numpy as np

from edgekit.core import io_params
from edgekit.core.signature import Signature
from edgekit.targets.lm_cache import writing

ORT_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64,
             "tensor(int32)": np.int32, "tensor(int8)": np.int8, "tensor(uint8)": np.uint8,
             "tensor(bool)": np.bool_}


def session(path: str, *, threads: int = 1, ort_format: bool = False, optimized: bool = True):
    """An ONNX Runtime CPU session on `path` as edgekit runs it: `threads` threads, quiet. An .ort
    (`ort_format`) is loaded as ORT format and run exactly as saved, with no graph optimization: a
    minimal or mobile build of ONNX Runtime cannot optimize an .ort at load, so neither does edgekit.
    `optimized` False runs an .onnx as written too (a float reference: some rewrites refuse a pre-processed
    model)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    if ort_format:
        opts.add_session_config_entry("session.load_model_format", "ORT")
    if ort_format or not optimized:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


class OnnxRunner:
    """An .onnx in a one-thread onnxruntime CPU session; inputs are matched to the signature by name when the
    session has every name, else by position."""

    ORT_FORMAT = False  # the .ort runner: True

    def __init__(self, path: str, signature: Signature):
        self.session = session(path, ort_format=self.ORT_FORMAT)
        self.signature = signature
        inputs = self.session.get_inputs()
        by_name = {i.name: i for i in inputs}
        ours = signature.input_names
        self.inputs = [by_name[n] for n in ours] if set(ours) <= set(by_name) else inputs
        # Integer I/O: the parameters are written beside the model by the quantizer.
        self.io = io_params.read(path) or {"inputs": [], "outputs": []}

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """One sample by input name → the outputs in order; integer I/O (a sidecar beside the model) is quantized
        in and dequantized out, so callers see float either way."""
        outputs = []
        for j, y in enumerate(self.session.run(None, self.feeds(feeds))):
            p = self.io["outputs"][j] if j < len(self.io["outputs"]) else None
            outputs.append(io_params.dequantize(y, p["scale"], p["zero_point"]) if p is not None else y)
        return outputs

    def feeds(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The session's feeds for one sample given by input name (integer inputs quantized)."""
        onnx_feeds = {}
        for i, (spec, meta) in enumerate(zip(self.signature.inputs, self.inputs)):
            x = np.array(feeds[spec.name], copy=True)
            p = self.io["inputs"][i] if i < len(self.io["inputs"]) else None
            if p is not None:
                x = io_params.quantize(x, p["scale"], p["zero_point"], np.dtype(p["dtype"]))
            onnx_feeds[meta.name] = x.astype(ORT_TYPES.get(meta.type, np.float32), copy=False)
        return onnx_feeds


def lm_entry_points(path: str, threads: int = 1, ort_format: bool = False) -> dict:
    """A decoder LM .onnx (or .ort) as its entry points: one graph whose token count is dynamic serves both
    prefill and decode, (tokens, input_pos, k_cache, v_cache) → (logits, k_cache, v_cache), the graph's new
    keys and values written into the caches (edgekit.targets.lm_cache)."""
    sess = session(path, threads=threads, ort_format=ort_format)
    names = [i.name for i in sess.get_inputs()]

    def call(*args):
        return tuple(sess.run(None, dict(zip(names, args))))

    step = writing(call)
    return {"prefill": step, "decode": step}
