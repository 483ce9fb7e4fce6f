"""The PyTorch Mobile lite interpreter as the runner of .ptl artifacts (a legacy format)."""

from __future__ import annotations

import warnings

import numpy as np

from edgekit.core.signature import Signature

ENGINE = "qnnpack"  # the quantized engine PyTorch Mobile runs on phones; int8 .ptl files are built for it


class PtlRunner:
    """A .ptl in the lite interpreter, on the qnnpack engine where this torch has it (int8 files are packed for
    it); the engine is set for the whole process, not restored."""

    def __init__(self, path: str, signature: Signature):
        import torch
        from torch.jit.mobile import _load_for_lite_interpreter

        if ENGINE in torch.backends.quantized.supported_engines:
            torch.backends.quantized.engine = ENGINE  # before loading: packed weights are packed on load
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # "Lite Interpreter is deprecated"
            self.module = _load_for_lite_interpreter(path, map_location="cpu")
        self.signature = signature

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """One sample by input name → the outputs, nested lists, tuples and dicts flattened in order."""
        import torch

        args = [torch.from_numpy(np.array(feeds[spec.name], copy=True)) for spec in self.signature.inputs]
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            out = self.module(*args)
        return [t.detach().numpy() for t in _flatten(out)]


def _flatten(out) -> list:
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _flatten(o)]
    if isinstance(out, dict):
        return [t for k in out for t in _flatten(out[k])]
    return [out]
