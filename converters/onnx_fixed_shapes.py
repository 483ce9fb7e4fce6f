"""onnx → onnx at fp32 with the input shapes given (--input-shape): the model with its dynamic input
dimensions fixed and its shapes inferred, as one file — what a runtime that wants static shapes (a
mobile build, an accelerator delegate) loads. A route of its own only when shapes are given: without
them an ONNX source at fp32 has nothing to convert."""

from __future__ import annotations

import shutil
from pathlib import Path

from edgekit.converters.base import ConvertContext, Converter
from edgekit.converters.onnx_quantize import fixed_shapes
from edgekit.core.artifact import ModelArtifact
from edgekit.core.quant import Precision


class OnnxFixedShapes(Converter):
    """The onnx → onnx edge at fp32, planned only for an ONNX source given --input-shape (see the module)."""

    name = "onnx_fixed_shapes"
    source = "onnx"
    target = "onnx"
    precisions = (Precision.FP32,)
    extra = "onnx"
    requires = ("onnx", "onnxruntime")
    cost = 1.0
    tools = ("onnx", "onnxruntime")

    def convert(self, src: ModelArtifact, out_path: Path, precision: str, ctx: ConvertContext) -> ModelArtifact:
        """The source with its dynamic input dimensions set to the signature's and its shapes inferred again,
        external data folded into one file; the graph is otherwise unchanged (a plain copy if nothing needed it)."""
        fixed = fixed_shapes(Path(src.path), src, ctx.work_dir)
        shutil.copyfile(fixed, out_path)
        return ModelArtifact("onnx", str(out_path), src.signature, precision)
