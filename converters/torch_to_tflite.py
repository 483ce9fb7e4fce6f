"""torch → tflite with litert-torch (the renamed ai-edge-torch)."""

from __future__ import annotations

from pathlib import Path

from edgekit.artifact import ModelArtifact
from edgekit.registry import Converter


class TorchToTflite(Converter):
    name = "torch_to_tflite"
    source = "torch"
    target = "tflite"
    precisions = ("fp32",)
    extra = "tflite"
    cost = 1.0
    tools = ("torch", "litert_torch", "ai_edge_litert")

    def convert(self, src: ModelArtifact, out_path: Path, precision: str, ctx) -> ModelArtifact:
        import litert_torch

        torch_src = ctx.torch_source
        module = torch_src.exported().module()  # one export, shared with the other torch edges
        edge_model = litert_torch.convert(module, torch_src.example_args())
        edge_model.export(str(out_path))
        return ModelArtifact("tflite", str(out_path), src.signature, precision)
