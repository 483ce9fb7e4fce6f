"""The ExecuTorch runtime as the runner of .pte artifacts."""

from __future__ import annotations

import importlib.util
import os
import sys
import types

import numpy as np

from edgekit.core import io_params
from edgekit.core.signature import Signature
from edgekit.targets.lm_cache import writing


class PteRunner:
    """A .pte's `forward` in the ExecuTorch runtime as a default app has it: kernel libraries the program
    declares it needs are not imported here (its runtime worker imports them)."""

    def __init__(self, path: str, signature: Signature):
        # Only the runtime a default app has: kernel libraries an artifact declares it needs (its inspection's
        # runtime needs) are imported by the worker that runs it, never here for every program.
        from executorch.runtime import Runtime

        self.program = Runtime.get().load_program(path)
        self.method = self.program.load_method("forward")
        self.signature = signature
        # Integer I/O: the parameters are written beside the program (a .pte does not expose them).
        self.io = io_params.read(path) or {"inputs": [], "outputs": []}

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """One sample by input name → the outputs in order; integer I/O (a sidecar beside the program) is
        quantized in and dequantized out, so callers see float either way."""
        import torch

        args = []
        for i, spec in enumerate(self.signature.inputs):
            # A fresh copy per input: ExecuTorch rejects zero strides (see STACK.md).
            x = np.array(feeds[spec.name], copy=True)
            p = _entry(self.io["inputs"], i)
            if p is not None:
                x = io_params.quantize(x, p["scale"], p["zero_point"], np.dtype(p["dtype"]))
            args.append(torch.from_numpy(x))
        outputs = []
        for j, o in enumerate(self.method.execute(args)):
            y = o.numpy() if hasattr(o, "numpy") else np.asarray(o)
            p = _entry(self.io["outputs"], j)
            outputs.append(io_params.dequantize(y, p["scale"], p["zero_point"]) if p is not None else y)
        return outputs


def without_compiler() -> None:
    """Let `executorch.runtime` load without ExecuTorch's compiler, in a process that only runs programs.

    The runtime's bindings import `executorch.exir._warnings`, and importing it runs the package
    `executorch.exir`, which imports the whole compiler (torch.export, dynamo, sympy: seconds, most
    of a check's time). A bare package module with the same path stands in for `executorch.exir`, so
    its submodules load alone. Only for the runtime worker: a process that compiles must not call it.
    """
    if "executorch.exir" in sys.modules:
        return
    spec = importlib.util.find_spec("executorch")
    if spec is None or not spec.submodule_search_locations:
        return
    exir = types.ModuleType("executorch.exir")
    exir.__path__ = [os.path.join(spec.submodule_search_locations[0], "exir")]
    sys.modules["executorch.exir"] = exir


def _entry(entries: list, i: int) -> dict | None:
    return entries[i] if i < len(entries) else None


def lm_entry_points(path: str, threads: int = 1) -> dict:
    """A decoder LM .pte's methods by name (prefill, decode), each called with (tokens, input_pos, k_cache,
    v_cache) and returning (logits, k_cache, v_cache) as numpy, the new keys and values written into the caches
    (edgekit.targets.lm_cache). `threads` is XNNPACK's, set for the process."""
    import torch
    from executorch.runtime import Runtime

    torch.set_num_threads(threads)
    program = Runtime.get().load_program(path)
    calls = {}
    for name in sorted(program.method_names):
        method = program.load_method(name)

        def call(*args, method=method):
            outs = method.execute([torch.from_numpy(np.require(a, requirements=("C", "W"))) for a in args])
            return tuple(o.numpy() for o in outs)

        calls[name] = writing(call)
    return calls
