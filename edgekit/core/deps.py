"""Optional dependencies: which extra brings which modules, checked without importing them."""

from __future__ import annotations

import importlib.util
from importlib import metadata

from edgekit.core.errors import MissingDependency

# extra → the top-level modules it must provide
EXTRAS: dict[str, tuple[str, ...]] = {
    "torch": ("torch",),
    "tflite": ("torch", "litert_torch", "ai_edge_litert"),
    "executorch": ("torch", "executorch"),
    "onnx": ("torch", "onnx", "onnxscript", "onnxruntime"),
    "tf": ("tensorflow", "tf2onnx"),
    "ray": ("ray",),  # check --executor ray
    "lm": ("torch", "transformers", "safetensors", "tokenizers"),  # decoder LM folders
}

# distribution names reported in tool_versions
DISTRIBUTIONS: dict[str, str] = {
    "torch": "torch",
    "litert_torch": "litert-torch",
    "ai_edge_litert": "ai-edge-litert",
    "executorch": "executorch",
    "onnx": "onnx",
    "onnxscript": "onnxscript",
    "onnxruntime": "onnxruntime",
    "torchao": "torchao",
    "ai_edge_quantizer": "ai-edge-quantizer",
    "tensorflow": "tensorflow-cpu",
    "tf2onnx": "tf2onnx",
    "ray": "ray",
}


def missing_modules(modules: tuple[str, ...]) -> tuple[str, ...]:
    """The modules of `modules` that cannot be imported here (nothing is imported to find out)."""
    out = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(name)
    return tuple(out)


def available(extra: str) -> bool:
    """Whether every module of `extra` can be imported here (nothing is imported to find out)."""
    return not missing_modules(EXTRAS[extra])


def require(extra: str, what: str) -> None:
    """Raise MissingDependency naming the pip command when `extra`'s modules are missing."""
    missing = missing_modules(EXTRAS[extra])
    if missing:
        raise MissingDependency(what, extra, missing)


def versions(modules: tuple[str, ...]) -> dict[str, str]:
    """Installed versions of the distributions behind `modules`, for the report."""
    out = {}
    for mod in modules:
        dist = DISTRIBUTIONS.get(mod, mod)
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out
