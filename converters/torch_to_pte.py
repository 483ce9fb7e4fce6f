"""torch → pte: torch.export, then ExecuTorch lowering with the XNNPACK partitioner."""

from __future__ import annotations

from pathlib import Path

from edgekit.artifact import ModelArtifact
from edgekit.registry import Converter


class TorchToPte(Converter):
    name = "torch_to_pte"
    source = "torch"
    target = "pte"
    precisions = ("fp32",)
    extra = "executorch"
    cost = 1.0
    tools = ("torch", "executorch")

    def convert(self, src: ModelArtifact, out_path: Path, precision: str, ctx) -> ModelArtifact:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        from executorch.exir import to_edge_transform_and_lower

        program = to_edge_transform_and_lower(ctx.torch_source.exported(), partitioner=[XnnpackPartitioner()])
        out_path.write_bytes(program.to_executorch().buffer)
        return ModelArtifact("pte", str(out_path), src.signature, precision)
