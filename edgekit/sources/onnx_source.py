"""ONNX models as sources: checked, their signature read from the graph, onnxruntime as reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgekit.core.artifact import ModelArtifact
from edgekit.core.deps import require
from edgekit.core.errors import BadInput, first_line
from edgekit.core.formats import onnx_dims, onnx_files
from edgekit.core.signature import Signature, TensorSpec
from edgekit.targets.onnx.runner import OnnxRunner

_ONNX_DTYPES = {1: "float32", 10: "float16", 7: "int64", 6: "int32", 3: "int8", 2: "uint8", 9: "bool"}


class OnnxSource:
    """An ONNX source model; onnxruntime on the original file is its reference."""

    def __init__(self, artifact: ModelArtifact, runner=None):
        self.artifact = artifact
        self._runner = runner or OnnxRunner(artifact.path, artifact.signature)

    @property
    def signature(self) -> Signature:
        """The artifact's signature: inputs read from the graph (dynamic ones fixed by --input-shape)."""
        return self.artifact.signature

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """One sample (input name → array) through onnxruntime on the original file; the outputs in order."""
        return self._runner.run(feeds)


def open_onnx(location: str, declared: tuple[TensorSpec, ...] | None) -> OnnxSource:
    """Check the model with the ONNX checker, then read its inputs and outputs from the graph."""
    require("onnx", f"reading {location}")
    import onnx

    try:
        onnx.checker.check_model(location, full_check=True)
    except Exception as e:  # the checker raises ValidationError, or InferenceError with full_check
        raise BadInput(f"{location} fails the ONNX checker: {first_line(e)}",
                       fix="re-export the model, or repair it so that onnx.checker.check_model passes") from None
    model = onnx.load(location, load_external_data=False)
    graph = model.graph
    initializers = {i.name for i in graph.initializer}
    inputs = [i for i in graph.input if i.name not in initializers]
    given = {s.name: s for s in declared or ()}
    if declared and len(declared) == len(inputs) and not set(given) & {i.name for i in inputs}:
        given = {i.name: s for i, s in zip(inputs, declared)}  # positional (input_0, ...)
    specs = []
    for value in inputs:
        dims = [d if isinstance(d, int) else None for d in onnx_dims(value)]
        dtype = _ONNX_DTYPES.get(value.type.tensor_type.elem_type)
        if dtype is None:
            raise BadInput(f"{location}: input {value.name!r} has an element type edgekit does not handle")
        if value.name in given:
            shape = given[value.name].shape
            if len(shape) != len(dims) or any(d is not None and d != g for d, g in zip(dims, shape)):
                raise BadInput(f"input shape {given[value.name].describe()} does not fit the model: "
                               f"it takes {value.name}={_show(dims)}",
                               fix="give the model's own dimensions; only ? (dynamic) ones are free")
        elif None in dims or not dims:
            raise BadInput(f"{location}: input {value.name!r} has a dynamic shape {_show(dims)}",
                           fix=f"pass --input-shape {value.name}=... with the shape to convert for")
        else:
            shape = tuple(dims)
        specs.append(TensorSpec(value.name, tuple(shape), dtype))
    sig = Signature(tuple(specs))
    files = onnx_files(Path(location))
    zeros = {s.name: np.zeros(s.shape, s.dtype) for s in specs}
    try:
        probe = OnnxSource(ModelArtifact("onnx", location, sig, "fp32", files))
        outputs = probe.run(zeros)
    except Exception as e:  # onnxruntime refuses the model (a session it cannot create) or fails running it
        raise BadInput(f"{location} does not run in onnxruntime with inputs {sig.describe()}: {first_line(e)}") from None
    sig = Signature(sig.inputs, tuple(TensorSpec(f"output_{i}", tuple(o.shape) or (1,), _np_dtype(o))
                                      for i, o in enumerate(outputs)))
    return OnnxSource(ModelArtifact("onnx", location, sig, "fp32", files), probe._runner)  # the same session


def _show(dims: list) -> str:
    return "(" + ", ".join("?" if d is None else str(d) for d in dims) + ")"


def _np_dtype(a: np.ndarray) -> str:
    name = np.dtype(a.dtype).name
    return name if name in _ONNX_DTYPES.values() else "float32"
