"""decoder LM → pte: the static-cache decoder exported per entry point and lowered to XNNPACK as one
program with two methods, `prefill` and `decode`.

int8-weights is weight-only: each linear's weight int8 per channel (scale max|w| / 127, levels ±127) behind
`quantized_decomposed.dequantize_per_channel`, applied to float activations, which XNNPACK runs as its
f32-qc8w fully connected kernel (the partitioner's linear config is extended to take that pattern,
edgekit.converters.torch_to_pte). int4-weights is torchao's `Int8DynamicActivationIntxWeightConfig` in groups
of `--group-size`, its activations quantized per token at run time (8da4w; the weight-only pattern is taken for
per-channel int8 only, groupwise int4 on float activations is not tried); the LM head stays int8 weight-only
at int4 (its error goes straight into the logits: at int4 the sample's agreement was 0.880 rounding to
nearest, 0.905 with the head at int8, at 0.166× and 0.175× of fp32). torchao's weight-only form (`IntxWeightOnlyConfig`) is not used: its scales
reach the delegate as run-time inputs and the lowered program's logits are wrong. The embedding table is int8
per row, looked up by ExecuTorch's `quantized_decomposed::embedding_byte` (as its own LLM export does): the
program then needs the quantized kernel library, which its inspection declares.
"""

from __future__ import annotations

from pathlib import Path

from edgekit.core.artifact import ArtifactMeta, ModelArtifact
from edgekit.core.quant import LM_PRECISIONS, Precision
from edgekit.converters import lm_common
from edgekit.converters.base import ConvertContext, Converter
from edgekit.converters.torch_to_pte import lower


class LmToPte(Converter):
    """The decoder LM → pte edge (ExecuTorch, XNNPACK delegate, a method per entry point)."""

    name = "lm_to_pte"
    source = "lm"
    target = "pte"
    precisions = (Precision.FP32, *LM_PRECISIONS)
    extra = "executorch"
    cost = 1.0
    tools = ("torch", "executorch", "torchao")

    def convert(self, src: ModelArtifact, out_path: Path, precision: str, ctx: ConvertContext) -> ModelArtifact:
        """Each entry point exported with torch.export from the (quantized) decoder, lowered together."""
        import torch

        source, spec = ctx.source, ctx.spec
        module = source.decoder()
        keep = lm_common.kept(spec, module)
        group = spec.group_size if precision == Precision.INT4_WEIGHTS else None
        rounding = lm_common.data_aware(module, ctx, "pte", precision, group, keep)
        if precision != Precision.FP32:
            _quantize(module, precision, group, keep)
            if not lm_common.is_kept("model.embed_tokens", keep):
                module.model.embed_tokens = _int8_embedding(module.model.embed_tokens)
        programs = {name: torch.export.export(module, args) for name, args in lm_common.entry_points(source).items()}
        lowered, left_out = lower(programs)
        out_path.write_bytes(lowered.to_executorch().buffer)
        weights = lm_common.weights_text(precision, group)
        activations = ("int8, quantized per token at run time (XNNPACK's kernel)" if precision == Precision.INT4_WEIGHTS
                       else "float32")
        embedding = "int8 per row (embedding_byte)" if precision != Precision.FP32 and not lm_common.is_kept("model.embed_tokens", keep) else "float32"
        head = "float32" if precision == Precision.FP32 or lm_common.is_kept("lm_head", keep) else "int8 per channel (weight-only)"
        lm = lm_common.record(source, precision, weights=weights, activations=activations, embedding=embedding,
                              head=head, keep=keep, group_size=group, rounding=rounding)
        return ModelArtifact("pte", str(out_path), src.signature, precision,
                             meta=ArtifactMeta(outside_delegate=tuple(left_out), lm=lm))


def _quantize(module, precision: str, group: int | None, keep: tuple[str, ...]) -> None:
    import torch
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerGroup

    def chosen(m, fqn):
        return isinstance(m, torch.nn.Linear) and not lm_common.is_kept(fqn, keep)

    for fqn, linear in [(n, m) for n, m in module.named_modules() if chosen(m, n)]:
        if precision == Precision.INT8_WEIGHTS or fqn == "lm_head":  # the head int8 at int4 too: it writes the logits
            parent, _, name = fqn.rpartition(".")
            setattr(module.get_submodule(parent), name, _int8_weight_only(linear))
    if precision == Precision.INT4_WEIGHTS:  # what is still an nn.Linear
        config = Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(group))
        quantize_(module, config, filter_fn=chosen)


def _int8_rows(weight):
    """`weight` (rows × columns) as int8 levels ±127 and a float scale per row, max|row| / 127."""
    import torch

    table = weight.detach().float()
    scales = table.abs().amax(dim=1).clamp(min=1e-12) / 127
    return torch.clamp(torch.round(table / scales[:, None]), -127, 127).to(torch.int8), scales


def _int8_weight_only(linear):
    """`linear` with its weight int8 per output channel, dequantized in the graph where XNNPACK folds it into
    its f32-qc8w kernel (float activations)."""
    import torch
    from torch.ao.quantization.fx._decomposed import quantized_decomposed_lib  # noqa: F401 - defines the op

    levels, scales = _int8_rows(linear.weight)
    bias = linear.bias

    class Int8WeightOnlyLinear(torch.nn.Module):
        """A linear whose weight is int8 with a scale per output channel."""

        def __init__(self):
            super().__init__()
            self.register_buffer("weight", levels)
            self.register_buffer("scales", scales)
            self.register_buffer("zero_points", torch.zeros(len(scales), dtype=torch.int64))
            self.bias = bias

        def forward(self, x):
            """x @ dequantized weightᵀ (+ bias, added apart: ExecuTorch's XNNPACK serializer takes a linear's
            own bias only with quantized activations)."""
            weight = torch.ops.quantized_decomposed.dequantize_per_channel.default(
                self.weight, self.scales, self.zero_points, 0, -127, 127, torch.int8)
            out = torch.nn.functional.linear(x, weight)
            return out if self.bias is None else out + self.bias

    return Int8WeightOnlyLinear()


def _int8_embedding(embedding):
    """`embedding` as int8 rows with a float scale each, looked up by ExecuTorch's embedding_byte kernel."""
    import torch
    import executorch.exir.passes._quant_patterns_and_replacements  # noqa: F401 - defines quantized_decomposed::embedding_byte

    levels, scales = _int8_rows(embedding.weight)

    class Int8Embedding(torch.nn.Module):
        """An int8 table with a scale per row."""

        def __init__(self):
            super().__init__()
            self.register_buffer("weight", levels)
            self.register_buffer("scales", scales)

        def forward(self, indices):
            """The float rows of `indices`."""
            return torch.ops.quantized_decomposed.embedding_byte.default(self.weight, self.scales, None, -128, 127, indices)

    return Int8Embedding()
