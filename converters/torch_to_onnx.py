"""torch → onnx with the dynamo-based `torch.onnx.export`; external data stays beside the model."""

from __future__ import annotations

from pathlib import Path

from edgekit.artifact import ModelArtifact
from edgekit.registry import Converter


class TorchToOnnx(Converter):
    name = "torch_to_onnx"
    source = "torch"
    target = "onnx"
    precisions = ("fp32",)
    extra = "onnx"
    cost = 1.0
    tools = ("torch", "onnx", "onnxscript")

    def convert(self, src: ModelArtifact, out_path: Path, precision: str, ctx) -> ModelArtifact:
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


def onnx_files(path: Path) -> tuple[str, ...]:
    """The model file and every external-data file it references."""
    import onnx
    from onnx.external_data_helper import uses_external_data

    model = onnx.load(str(path), load_external_data=False)
    sidecars = set()
    for tensor in model.graph.initializer:
        if uses_external_data(tensor):
            for entry in tensor.external_data:
                if entry.key == "location":
                    sidecars.add(str(path.parent / entry.value))
    return (str(path), *sorted(sidecars))
