"""Targets are data, one record per format and the only table of what each format has: its file extension,
the extra it needs, the runtime a user reads about and the modules its runtime worker imports. What each format
does lives in its package, edgekit.targets.<name>, which is its TargetBackend: the CPU runner, the inspector,
the latency opener and the per-layer tracer. Importing a package imports no framework; each tool imports its
runtime when it is called, in the process that calls it."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol

from edgekit.core.deps import require
from edgekit.core.errors import BadInput

if TYPE_CHECKING:
    import numpy as np

    from edgekit.core.inspection import Inspection
    from edgekit.core.signature import Signature


class ArtifactRunner(Protocol):
    """An artifact loaded in its runtime: what the verifier and the runtime worker call."""

    def run(self, feeds: dict[str, "np.ndarray"]) -> list["np.ndarray"]:
        """The outputs of one sample, in the signature's order."""
        ...


class TargetBackend(Protocol):
    """What a format's package (edgekit.targets.<name>) provides; the package module itself is the backend.
    `trace_layers` is None where the format has no per-layer tracer of its own (a .pte's layers are traced by
    its converter, which quantizes the source again: edgekit.converters.base.Converter.trace_layers)."""

    Runner: Callable[[str, "Signature"], ArtifactRunner]  # the CPU runner class of an artifact file
    inspect_file: Callable[[str], "Inspection"]  # what the file holds (edgekit.targets.inspection)
    open_timed: Callable[..., tuple]  # (call, input specs) for timing (edgekit.targets.latency)
    trace_layers: Callable[..., tuple] | None  # per-layer drift against the fp32 artifact (edgekit.targets.layers);
    # its keyword `gains` asks for what keeping each layer float gains, where the tracer can measure it
    runtime_only: Callable[[], None] | None  # what a process that only runs artifacts does first, or None
    # a decoder LM artifact's entry points by name, each (tokens, input_pos, k_cache, v_cache) → (logits, k, v),
    # the artifact's new keys and values written into the caches given (edgekit.targets.lm_cache)
    lm_entry_points: Callable[..., dict] | None


@dataclass(frozen=True)
class Target:
    """One target format's record (see the module's docstring): reading the table imports nothing."""

    name: str
    format: str
    extension: str
    extra: str
    runtime: str  # what a user reads in the report
    aliases: tuple[str, ...] = ()
    legacy: bool = False
    modules: tuple[str, ...] = ()  # the runtime the runner imports: a runtime worker imports it as it starts

    @property
    def backend(self) -> TargetBackend:
        """The format's package, edgekit.targets.<name> (imported now: no framework comes with it)."""
        return importlib.import_module(f"edgekit.targets.{self.name}")


TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target("tflite", "tflite", ".tflite", "tflite", "LiteRT interpreter (ai_edge_litert)",
               modules=("ai_edge_litert.interpreter",)),
        Target("executorch", "pte", ".pte", "executorch", "ExecuTorch runtime (executorch.runtime)", aliases=("pte",),
               modules=("torch", "executorch.runtime")),
        Target("ptl", "ptl", ".ptl", "torch", "PyTorch Mobile lite interpreter", legacy=True,
               modules=("torch.jit.mobile",)),
        Target("onnx", "onnx", ".onnx", "onnx", "ONNX Runtime (CPU)", modules=("onnxruntime",)),
        Target("ort", "ort", ".ort", "onnx", "ONNX Runtime (CPU), ORT format", modules=("onnxruntime",)),
    )
}


def by_format(fmt: str) -> Target:
    """The target whose artifacts are of format `fmt` (KeyError for none)."""
    for t in TARGETS.values():
        if t.format == fmt:
            return t
    raise KeyError(fmt)


def runtime_only(fmt: str) -> None:
    """Prepare a process that only runs artifacts of format `fmt` (a runtime worker, a timing child) to import
    the runtime alone: call before the runtime is imported. A process that converts must not call it."""
    prepare = by_format(fmt).backend.runtime_only
    if prepare is not None:
        prepare()


def load_runner(fmt: str, path: str, signature):
    """The CPU runner of format `fmt` for the artifact at `path`, in this process."""
    target = by_format(fmt)
    require(target.extra, f"running a .{fmt} artifact")
    return target.backend.Runner(path, signature)


def resolve(name: str) -> Target:
    """The target called `name` (or one of its aliases); an unknown name lists the known ones."""
    key = name.strip().lower()
    for t in TARGETS.values():
        if key == t.name or key in t.aliases:
            return t
    known = ", ".join(f"{t.name}" + (f" (alias {', '.join(t.aliases)})" if t.aliases else "") for t in TARGETS.values())
    raise BadInput(f"unknown target {name!r}", fix=f"use one of: {known}, or all")
