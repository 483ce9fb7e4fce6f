"""Targets are data: a name → its format, file extension, CPU runner and the extra it needs."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from edgekit.core.deps import require
from edgekit.core.errors import BadInput


@dataclass(frozen=True)
class Target:
    name: str
    format: str
    extension: str
    runner: str  # "module:Class" of the CPU runner used to verify the artifact
    extra: str
    runtime: str  # what a user reads in the report
    inspector: str = ""  # "module:function" reading the artifact (edgekit.targets.inspection)
    aliases: tuple[str, ...] = ()
    legacy: bool = False
    modules: tuple[str, ...] = ()  # the runtime the runner imports: a runtime worker imports it as it starts


TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target("tflite", "tflite", ".tflite", "edgekit.targets.tflite:TfliteRunner", "tflite",
               "LiteRT interpreter (ai_edge_litert)", "edgekit.targets.tflite_inspect:inspect",
               modules=("ai_edge_litert.interpreter",)),
        Target("executorch", "pte", ".pte", "edgekit.targets.executorch:PteRunner", "executorch",
               "ExecuTorch runtime (executorch.runtime)", "edgekit.targets.pte_inspect:inspect", aliases=("pte",),
               modules=("torch", "executorch.runtime")),
        Target("ptl", "ptl", ".ptl", "edgekit.targets.ptl:PtlRunner", "torch",
               "PyTorch Mobile lite interpreter", "edgekit.targets.ptl_inspect:inspect", legacy=True,
               modules=("torch.jit.mobile",)),
        Target("onnx", "onnx", ".onnx", "edgekit.targets.onnx:OnnxRunner", "onnx",
               "ONNX Runtime (CPU)", "edgekit.targets.onnx_inspect:inspect", modules=("onnxruntime",)),
        Target("ort", "ort", ".ort", "edgekit.targets.ort:OrtRunner", "onnx",
               "ONNX Runtime (CPU), ORT format", "edgekit.targets.ort_inspect:inspect",
               modules=("onnxruntime",)),
    )
}


def by_format(fmt: str) -> Target:
    for t in TARGETS.values():
        if t.format == fmt:
            return t
    raise KeyError(fmt)


def load(spec: str):
    """The object a "module:name" spec of the table names (imported only now: the frameworks stay out of
    the command line's start-up)."""
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def load_runner(fmt: str, path: str, signature):
    """The CPU runner of format `fmt` for the artifact at `path`, in this process."""
    target = by_format(fmt)
    require(target.extra, f"running a .{fmt} artifact")
    return load(target.runner)(path, signature)


def resolve(name: str) -> Target:
    """The target called `name` (or one of its aliases); an unknown name lists the known ones."""
    key = name.strip().lower()
    for t in TARGETS.values():
        if key == t.name or key in t.aliases:
            return t
    known = ", ".join(f"{t.name}" + (f" (alias {', '.join(t.aliases)})" if t.aliases else "") for t in TARGETS.values())
    raise BadInput(f"unknown target {name!r}", fix=f"use one of: {known}, or all")
