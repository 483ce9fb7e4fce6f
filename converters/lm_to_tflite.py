"""decoder LM → tflite: the static-cache decoder converted by litert-torch with a signature per entry point
(`prefill`, `decode`; token ids and positions as int32, LiteRT's integer width).

int8-weights and int4-weights are litert-torch's generative quantization recipes, applied by
ai-edge-quantizer: weight-only int8 per channel (float activations; its dynamic-range form, which
quantizes activations at run time, lost 0.8 points of token agreement on the sample LM), or int4 in
blocks of `--group-size` (LiteRT runs int4 only in its dynamic-range kernels). The recipe covers every
weight, the embedding table included.
"""

from __future__ import annotations

from pathlib import Path

from edgekit.core.artifact import ArtifactMeta, ModelArtifact
from edgekit.core.quant import LM_PRECISIONS
from edgekit.core.errors import BadInput
from edgekit.converters import lm_common
from edgekit.converters.base import ConvertContext, Converter


class LmToTflite(Converter):
    """The decoder LM → tflite edge (litert-torch, a signature per entry point)."""

    name = "lm_to_tflite"
    source = "lm"
    target = "tflite"
    precisions = ("fp32", *LM_PRECISIONS)
    extra = "tflite"
    cost = 1.0
    tools = ("torch", "litert_torch", "ai_edge_quantizer")

    def convert(self, src: ModelArtifact, out_path: Path, precision: str, ctx: ConvertContext) -> ModelArtifact:
        """Both entry points converted together, quantized by the recipe for `precision`."""
        import litert_torch

        source, spec = ctx.source, ctx.spec
        if spec.overrides:
            raise BadInput("--keep is not built for a decoder LM's .tflite yet: litert-torch's recipes name "
                           "its own layers, not this model's", fix="leave --keep out for -t tflite")
        module = source.decoder()
        group = spec.group_size if precision == "int4-weights" else None
        rounding = lm_common.data_aware(module, ctx, "tflite", precision, group, (), shared_head=True,
                                        int4_table=True)
        converter = None
        for name, args in lm_common.entry_points(source).items():
            converter = (converter or litert_torch).signature(name, module, args)
        converter.convert(quant_config=_recipe(precision, group)).export(str(out_path))
        weights = lm_common.weights_text(precision, group, int4="blocks")
        activations = {"fp32": "float32", "int8-weights": "float32 (weight-only)",
                       "int4-weights": "float32, quantized per batch row inside LiteRT's dynamic-range kernels"}[precision]
        lm = lm_common.record(source, precision, weights=weights, activations=activations,
                              embedding="float32" if precision == "fp32" else weights, group_size=group,
                              rounding=rounding)
        return ModelArtifact("tflite", str(out_path), src.signature, precision, meta=ArtifactMeta(lm=lm))


def _recipe(precision: str, group: int | None):
    if precision == "fp32":
        return None
    from litert_torch.generative.quantize import quant_attrs, quant_recipe, quant_recipe_utils
    from litert_torch.quantize.quant_config import QuantConfig

    if precision == "int8-weights":
        layer = quant_recipe_utils.create_layer_quant_weight_only(quant_attrs.Dtype.INT8, quant_attrs.Granularity.CHANNELWISE)
    else:
        layer = quant_recipe_utils.create_layer_quant_dynamic(quant_attrs.Dtype.INT4,
                                                              getattr(quant_attrs.Granularity, f"BLOCKWISE_{group}"))
    return QuantConfig(generative_recipe=quant_recipe.GenerativeQuantRecipe(default=layer))
