"""The ExecuTorch runtime as the runner of .pte artifacts."""

from __future__ import annotations

import numpy as np

from edgekit.signature import Signature


class PteRunner:
    def __init__(self, path: str, signature: Signature):
        from executorch.runtime import Runtime

        self.program = Runtime.get().load_program(path)
        self.method = self.program.load_method("forward")
        self.signature = signature

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        import torch

        # A fresh copy per input: ExecuTorch rejects zero strides (see STACK.md).
        args = [torch.from_numpy(np.array(feeds[s.name], copy=True)) for s in self.signature.inputs]
        return [o.numpy() if hasattr(o, "numpy") else np.asarray(o) for o in self.method.execute(args)]
