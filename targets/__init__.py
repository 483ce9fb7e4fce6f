"""Targets are data, one record per format and the only table of what each format has: its file
extension, the extra it needs, its CPU runner, inspector, per-layer tracer and latency opener (each a
"module:name" spec, imported only when used, in the process that uses it)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from edgekit.core.deps import require
from edgekit.core.errors import BadInput


@dataclass(frozen=True)
class Target:
    """One target format's record (see the module's docstring); its "module:name" specs are strings so that
    reading the table imports no framework. An empty spec: no such tool here (.pte layers are traced by
    edgekit.engine.pte_layers)."""

    name: str
    format: str
    extension: str
    runner: str  # "module:Class" of the CPU runner used to verify the artifact
    extra: str
    runtime: str  # what a user reads in the report
    inspector: str = ""  # "module:function" reading the artifact (edgekit.targets.inspection)
    latency: str = ""  # "module:function" opening the artifact for timing (edgekit.targets.latency)
    layers: str = ""  # "module:function" tracing per-layer drift against the fp32 artifact (edgekit.targets.layers)
    aliases: tuple[str, ...] = ()
    legacy: bool = False
    modules: tuple[str, ...] = ()  # the runtime the runner imports: a runtime worker imports it as it starts


TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target("tflite", "tflite", ".tflite", "edgekit.targets.tflite.runner:TfliteRunner", "tflite",
               "LiteRT interpreter (ai_edge_litert)", "edgekit.targets.tflite.inspect:inspect",
               "edgekit.targets.tflite.latency:open_tflite", "edgekit.targets.tflite.layers:trace",
               modules=("ai_edge_litert.interpreter",)),
        Target("executorch", "pte", ".pte", "edgekit.targets.executorch.runner:PteRunner", "executorch",
               "ExecuTorch runtime (executorch.runtime)", "edgekit.targets.executorch.inspect:inspect",
               "edgekit.targets.executorch.latency:open_pte", aliases=("pte",),
               modules=("torch", "executorch.runtime")),
        Target("ptl", "ptl", ".ptl", "edgekit.targets.ptl.runner:PtlRunner", "torch",
               "PyTorch Mobile lite interpreter", "edgekit.targets.ptl.inspect:inspect",
               "edgekit.targets.ptl.latency:open_ptl", legacy=True,
               modules=("torch.jit.mobile",)),
        Target("onnx", "onnx", ".onnx", "edgekit.targets.onnx.runner:OnnxRunner", "onnx",
               "ONNX Runtime (CPU)", "edgekit.targets.onnx.inspect:inspect", "edgekit.targets.onnx.latency:open_onnx",
               "edgekit.targets.onnx.layers:trace", modules=("onnxruntime",)),
        Target("ort", "ort", ".ort", "edgekit.targets.ort.runner:OrtRunner", "onnx",
               "ONNX Runtime (CPU), ORT format", "edgekit.targets.ort.inspect:inspect",
               "edgekit.targets.ort.latency:open_ort", modules=("onnxruntime",)),
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
