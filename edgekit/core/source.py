"""The opened source model as the layers above see it: the `Source` protocol (the reference every artifact is
compared with) and `TorchSource`, a loaded PyTorch module with its ExportedProgram. Opening one is
edgekit.sources.loading's; converters and calibration read these types only."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from edgekit.core.artifact import ModelArtifact
from edgekit.core.errors import ConversionFailed, EdgekitError, first_line
from edgekit.core.signature import Signature


class Source(Protocol):
    """An opened source model: what it is (`artifact`, with its signature) and how to run it in its
    own framework, one sample at a time, as the reference every artifact is compared with."""

    artifact: ModelArtifact

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """One sample (input name → array in the signature's shape) → the outputs, flattened, in order."""
        ...


class TorchSource:
    """A loaded PyTorch source model: its module, its signature and, lazily, an ExportedProgram."""

    def __init__(self, artifact: ModelArtifact, module: Any, exported: Any | None = None):
        self.artifact = artifact
        self.module = module
        self._exported = exported

    @property
    def signature(self) -> Signature:
        """The artifact's signature, settled when the model was opened: what every sample must fit."""
        return self.artifact.signature

    def example_args(self) -> tuple:
        """Seeded example inputs that fit the signature (fresh, contiguous copies)."""
        import torch

        rng = np.random.default_rng(0)
        args = []
        for spec in self.signature.inputs:
            if spec.dtype.startswith("float"):
                arr = rng.standard_normal(spec.shape).astype(spec.dtype)
            else:
                arr = rng.integers(0, 2, spec.shape).astype(spec.dtype)
            args.append(torch.from_numpy(arr.copy()))
        return tuple(args)

    def exported(self):
        """The ExportedProgram: the loaded one for a .pt2, else torch.export of the module. ConversionFailed, the
        same each time it is asked for, when torch.export cannot take the module (every target starts from it)."""
        if isinstance(self._exported, ConversionFailed):
            raise self._exported
        if self._exported is None:
            import torch

            scripted = isinstance(self.module, torch.jit.ScriptModule)
            try:
                if scripted:
                    # torch.export refuses ScriptModules and names this converter as the way across.
                    from torch._export.converter import TS2EPConverter

                    self._exported = TS2EPConverter(self.module, self.example_args()).convert()
                else:
                    self._exported = torch.export.export(self.module, self.example_args())
            except EdgekitError:  # a time budget ran out meanwhile: not the model's failure
                raise
            except Exception as e:  # noqa: BLE001 - whatever torch.export raised is the message
                root = e
                while root.__cause__ is not None:
                    root = root.__cause__
                cause = f"{type(root).__name__}: {first_line(root)}"
                self._exported = ConversionFailed(
                    f"torch.export cannot take {'the TorchScript' if scripted else 'the'} model: "
                    f"{type(e).__name__}: {first_line(e)}" + (f" ({cause})" if first_line(root) != first_line(e) else ""),
                    fix=("a scripted model's control flow (prim::If, prim::Loop on values) does not convert: export the "
                         "Python model with torch.export (torch.cond for a branch on values) and convert the .pt2, or "
                         "convert its .onnx if it has one") if scripted else
                        "make the model exportable (torch.export's error above), or convert its .onnx if it has one")
                raise self._exported from e
        return self._exported

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Run the module once on one sample; outputs flattened in order."""
        import torch

        args = [torch.from_numpy(np.array(feeds[s.name], copy=True)) for s in self.signature.inputs]
        with torch.no_grad():
            out = self.module(*args)
        return [t.detach().cpu().numpy() for t in flatten(out)]


def flatten(out: Any) -> list:
    """A model's outputs (nested tuples, lists and dicts) as one flat list, in order."""
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in flatten(o)]
    if isinstance(out, dict):
        return [t for k in out for t in flatten(out[k])]
    return [out]
