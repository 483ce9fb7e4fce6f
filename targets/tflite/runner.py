"""The LiteRT interpreter as the runner of .tflite artifacts."""

from __future__ import annotations

import re
import warnings

import numpy as np

from edgekit.core import io_params
from edgekit.core.signature import Signature
from edgekit.targets.lm_cache import writing


def _order(name: str) -> tuple[int, str]:
    m = re.search(r"(\d+)$", name)
    return (int(m.group(1)) if m else 0, name)


def _signature_keys(names, ours) -> list[str]:
    """A signature's input `names` in the order of the source's inputs `ours`: the same names where the converter
    kept them, else by their trailing numbers (litert-torch names inputs args_0, args_1, ...)."""
    return list(ours) if set(ours) == set(names) else sorted(names, key=_order)


class TfliteRunner:
    """A .tflite (a path, or the model's bytes) in the LiteRT interpreter on one thread, through its first
    signature when it has one. `keep_intermediates` keeps every tensor (`interp.get_tensor` reads any of them
    after `run`: per-layer tracing, calibration statistics) and so runs without the default delegate."""

    def __init__(self, model: str | bytes, signature: Signature, *, keep_intermediates: bool = False):
        from ai_edge_litert.interpreter import Interpreter, OpResolverType

        # Keeping every intermediate tensor needs the built-in kernels: a delegate (XNNPACK by
        # default) runs its part of the graph as one op and keeps nothing in between.
        extra = {"experimental_preserve_all_tensors": True,
                 "experimental_op_resolver_type": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES} if keep_intermediates else {}
        where = {"model_content": model} if isinstance(model, bytes) else {"model_path": str(model)}
        with warnings.catch_warnings():  # "intended for debugging purposes only": keeping every tensor is the point
            warnings.simplefilter("ignore", UserWarning)
            self.interp = Interpreter(**where, num_threads=1, **extra)
        sigs = self.interp.get_signature_list()
        self.runner = self.interp.get_signature_runner(next(iter(sigs))) if sigs else None
        self.signature = signature
        if self.runner is not None:
            details = self.runner.get_input_details()
            self.keys = _signature_keys(list(details), list(signature.input_names))
            self.inputs = [details[k] for k in self.keys]
            outs = self.runner.get_output_details()
            self.out_keys = sorted(outs, key=_order)
            self.outputs = [outs[k] for k in self.out_keys]
        else:
            self.interp.allocate_tensors()
            self.inputs = self.interp.get_input_details()
            self.outputs = self.interp.get_output_details()

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """One sample by input name → the outputs in order; integer I/O takes the model's own scale and zero-point,
        so callers see float. An input at another size of a dynamic dimension resizes the interpreter."""
        arrays = [_quantize(np.array(feeds[s.name], copy=True), d) for s, d in zip(self.signature.inputs, self.inputs)]
        if self.runner is not None:
            result = self.runner(**dict(zip(self.keys, arrays)))
            raw = [result[k] for k in self.out_keys]
        else:
            current = {d["index"]: tuple(d["shape"]) for d in self.interp.get_input_details()}
            resized = [(d, a) for a, d in zip(arrays, self.inputs) if current[d["index"]] != a.shape]
            for d, a in resized:  # another size of a dynamic dimension (the signature runner resizes by itself)
                self.interp.resize_tensor_input(d["index"], a.shape)
            if resized:
                self.interp.allocate_tensors()
            for a, d in zip(arrays, self.inputs):
                self.interp.set_tensor(d["index"], a)
            self.interp.invoke()
            raw = [self.interp.get_tensor(d["index"]) for d in self.outputs]
        return [_dequantize(r, d) for r, d in zip(raw, self.outputs)]


def _quantize(x: np.ndarray, detail: dict) -> np.ndarray:
    """Integer inputs take the model's own scale and zero-point; float inputs pass through."""
    dtype = np.dtype(detail["dtype"])
    if dtype.kind in "iu" and x.dtype.kind == "f":
        scale, zero = detail["quantization"]
        return io_params.quantize(x, scale, zero, dtype)
    return x.astype(dtype, copy=False)


def _dequantize(y: np.ndarray, detail: dict) -> np.ndarray:
    scale, zero = detail["quantization"]
    if np.dtype(detail["dtype"]).kind in "iu" and scale:
        return io_params.dequantize(y, scale, zero)
    return y


def lm_entry_points(path: str, threads: int = 1) -> dict:
    """A decoder LM .tflite's signatures by name (prefill, decode), each called with (tokens, input_pos,
    k_cache, v_cache) and returning (logits, k_cache, v_cache), the new keys and values written into the caches
    (edgekit.targets.lm_cache); ids and positions go in as LiteRT's int32."""
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=path, num_threads=threads)
    calls = {}
    for name in interp.get_signature_list():
        runner = interp.get_signature_runner(name)
        ins = runner.get_input_details()
        keys = sorted(ins, key=_order)
        outs = sorted(runner.get_output_details(), key=_order)

        def call(*args, runner=runner, keys=keys, ins=ins, outs=outs):
            got = runner(**{k: np.asarray(a, dtype=ins[k]["dtype"]) for k, a in zip(keys, args)})
            return tuple(got[k] for k in outs)

        calls[name] = writing(call)
    return calls
