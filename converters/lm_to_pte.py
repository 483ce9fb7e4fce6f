"""decoder LM → pte: the static-cache decoder exported per entry point and lowered to XNNPACK as one
program with two methods, `prefill` and `decode`.

int8-weights and int4-weights are torchao's `Int8DynamicActivationIntxWeightConfig` (per-channel int8, or
int4 in groups of `--group-size`): the linear kernels ExecuTorch's XNNPACK delegate runs on quantized
weights take activations quantized per token at run time (8da8w, 8da4w). Its weight-only form
(`IntxWeightOnlyConfig`) lowers here to programs whose logits are wrong, so it is not offered. The
embedding table is int8 per row, looked up by ExecuTorch's `quantized_decomposed::embedding_byte` (as its
own LLM export does): the program then needs the quantized kernel library, which its inspection declares.
"""

from __future__ import annotations

from pathlib import Path

from edgekit.core.artifact import ArtifactMeta, ModelArtifact
from edgekit.core.quant import LM_PRECISIONS
from edgekit.converters import lm_common
from edgekit.converters.base import ConvertContext, Converter
from edgekit.converters.torch_to_pte import lower


class LmToPte(Converter):
    """The decoder LM → pte edge (ExecuTorch, XNNPACK delegate, a method per entry point)."""

    name = "lm_to_pte"
    source = "lm"
    target = "pte"
    precisions = ("fp32", *LM_PRECISIONS)
    extra = "executorch"
    cost = 1.0
    tools = ("torch", "executorch", "torchao")

    def convert(self, src: ModelArtifact, out_path: Path, precision: str, ctx: ConvertContext) -> ModelArtifact:
        """Each entry point exported with torch.export from the (quantized) decoder, lowered together."""
        import torch

        source, spec = ctx.source, ctx.spec
        module = source.decoder()
        keep = lm_common.kept(spec, module)
        group = spec.group_size if precision == "int4-weights" else None
        rounding = lm_common.data_aware(module, ctx, "pte", precision, group, keep)
        if precision != "fp32":
            _quantize(module, precision, group, keep)
            if not lm_common.is_kept("model.embed_tokens", keep):
                module.model.embed_tokens = _int8_embedding(module.model.embed_tokens)
        programs = {name: torch.export.export(module, args) for name, args in lm_common.entry_points(source).items()}
        lowered, left_out = lower(programs)
        out_path.write_bytes(lowered.to_executorch().buffer)
        weights = lm_common.weights_text(precision, group)
        activations = "float32" if precision == "fp32" else "int8, quantized per token at run time (XNNPACK's kernel)"
        embedding = "int8 per row (embedding_byte)" if precision != "fp32" and not lm_common.is_kept("model.embed_tokens", keep) else "float32"
        lm = lm_common.record(source, precision, weights=weights, activations=activations, embedding=embedding,
                              keep=keep, group_size=group, rounding=rounding)
        return ModelArtifact("pte", str(out_path), src.signature, precision,
                             meta=ArtifactMeta(outside_delegate=tuple(left_out), lm=lm))


def _quantize(module, precision: str, group: int | None, keep: tuple[str, ...]) -> None:
    import torch
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerAxis, PerGroup

    if precision == "int8-weights":
        config = Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8, weight_granularity=PerAxis(0))
    else:
        config = Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(group))
    quantize_(module, config, filter_fn=lambda m, fqn: isinstance(m, torch.nn.Linear) and not lm_common.is_kept(fqn, keep))


def _int8_embedding(embedding):
    """`embedding` as int8 rows with a float scale each, looked up by ExecuTorch's embedding_byte kernel."""
    import torch
    import executorch.exir.passes._quant_patterns_and_replacements  # noqa: F401 - defines quantized_decomposed::embedding_byte

    table = embedding.weight.detach()
    scales = table.abs().amax(dim=1).clamp(min=1e-12) / 127

    class Int8Embedding(torch.nn.Module):
        """An int8 table with a scale per row."""

        def __init__(self):
            super().__init__()
            self.register_buffer("weight", torch.clamp(torch.round(table / scales[:, None]), -127, 127).to(torch.int8))
            self.register_buffer("scales", scales)

        def forward(self, indices):
            """The float rows of `indices`."""
            return torch.ops.quantized_decomposed.embedding_byte.default(self.weight, self.scales, None, -128, 127, indices)

    return Int8Embedding()
