"""torch → onnx with the dynamo-based `torch.onnx.export`; external data stays beside the model."""

from __future__ import annotations

from pathlib import Path

from edgekit.core.artifact import ModelArtifact
from edgekit.core.formats import onnx_files
from edgekit.converters.base import ConvertContext, Converter
from edgekit.core.quant import Precision


class TorchToOnnx(Converter):
    """The torch → onnx edge, fp32 only: an ONNX model at lower precision is onnx_quantize's, after it."""

    name = "torch_to_onnx"
    source = "torch"
    target = "onnx"
    precisions = (Precision.FP32,)
    extra = "onnx"
    cost = 1.0
    tools = ("torch", "onnx", "onnxscript")

    def convert(self, src: ModelArtifact, out_path: Path, precision: str, ctx: ConvertContext) -> ModelArtifact:
        """Exports the source's ExportedProgram with the dynamo exporter, inputs and outputs named as the
        signature names them, weights as external data beside the model (all its files listed)."""
        import torch

        source = ctx.source
        torch.onnx.export(
            source.exported(),
            source.example_args(),
            str(out_path),
            dynamo=True,
            input_names=list(src.signature.input_names),
            output_names=[o.name for o in src.signature.outputs] or None,
            external_data=True,
            verbose=False,
        )
        return ModelArtifact("onnx", str(out_path), src.signature, precision, files=onnx_files(out_path))
