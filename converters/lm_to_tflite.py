"""decoder LM → tflite: the static-cache decoder converted by litert-torch with a signature per entry point
(`prefill`, `decode`; token ids and positions as int32, LiteRT's integer width).

int8-weights and int4-weights are litert-torch's generative quantization recipes, applied by
ai-edge-quantizer: weight-only int8 per channel (float activations; its dynamic-range form, which
quantizes activations at run time, lost 0.8 points of token agreement on the sample LM), or int4 in
blocks of `--group-size` (LiteRT runs int4 only in its dynamic-range kernels). At int4 the embedding table
and the LM head stay int8 per channel, in the dynamic-range kernels too (a tied head is that table): a 4-bit
table has about 200× the squared error of int8 rows, and the head writes the logits; on the sample LM,
rounding to nearest, agreement went from 0.855 to 0.905 and the file from 0.167× to 0.179× of fp32
(ExecuTorch and ONNX store the table int8 too).
The recipe covers every weight but those `--keep` holds float: the recipe is translated to
ai-edge-quantizer's and each kept linear or table gets a `no_quantize` entry matching the scope litert-torch
names its ops by (the chain of modules called, `…Layer_0/…MLP_mlp/…Linear_down_proj`; the LM head's op is
named after the logits, each signature's output 0). A tied LM head reads the embedding's table: keeping either
keeps both.
"""

from __future__ import annotations

import re
from pathlib import Path

from edgekit.core.artifact import ArtifactMeta, ModelArtifact
from edgekit.core.quant import LM_PRECISIONS, Precision
from edgekit.converters import lm_common
from edgekit.converters.base import ConvertContext, Converter


class LmToTflite(Converter):
    """The decoder LM → tflite edge (litert-torch, a signature per entry point)."""

    name = "lm_to_tflite"
    source = "lm"
    target = "tflite"
    precisions = (Precision.FP32, *LM_PRECISIONS)
    extra = "tflite"
    cost = 1.0
    tools = ("torch", "litert_torch", "ai_edge_quantizer")

    def convert(self, src: ModelArtifact, out_path: Path, precision: str, ctx: ConvertContext) -> ModelArtifact:
        """Both entry points converted together, quantized by the recipe for `precision`."""
        import litert_torch

        source, spec = ctx.source, ctx.spec
        module = source.decoder()
        group = spec.group_size if precision == Precision.INT4_WEIGHTS else None
        keep = lm_common.kept(spec, module) if precision != Precision.FP32 else ()
        if lm_common.keeps_tied_table(source.config, keep):  # the file stores the two as one table: both kept
            keep += tuple(n for n in lm_common.TIED if not lm_common.is_kept(n, keep))
        rounding = lm_common.data_aware(module, ctx, "tflite", precision, group, keep, shared_head=True)
        converter = None
        for name, args in lm_common.entry_points(source).items():
            converter = (converter or litert_torch).signature(name, module, args)
        float_path = out_path if precision == Precision.FP32 else ctx.work_dir / "decoder.float.tflite"
        converter.convert().export(str(float_path))
        if precision != Precision.FP32:
            int8 = () if precision == Precision.INT8_WEIGHTS else tuple(n for n in INT8_AT_INT4 if not lm_common.is_kept(n, keep))
            out_path.write_bytes(_quantized(float_path.read_bytes(), precision, group, _scopes(module, keep),
                                            _scopes(module, int8)))
        weights = lm_common.weights_text(precision, group, int4="blocks")
        activations = {"fp32": "float32", "int8-weights": "float32 (weight-only)",
                       "int4-weights": "float32, quantized per batch row inside LiteRT's dynamic-range kernels"}[precision]

        def made(name):  # what the recipe made of the embedding or the head
            if precision == Precision.FP32 or lm_common.is_kept(name, keep):
                return "float32"
            return "int8 per channel" + (" (dynamic range)" if precision == Precision.INT4_WEIGHTS else "")

        lm = lm_common.record(source, precision, weights=weights, activations=activations,
                              embedding=made("model.embed_tokens"), head=made("lm_head"), keep=keep,
                              group_size=group, rounding=rounding)
        return ModelArtifact("tflite", str(out_path), src.signature, precision, meta=ArtifactMeta(lm=lm))


INT8_AT_INT4 = lm_common.TIED  # the embedding table and the LM head: int8 per channel at int4-weights too (see above)


def _scopes(module, names) -> list[str]:
    """A regex per linear or table under `names`, matching the scope of the op that reads it."""
    import torch

    leaves = {n for n, m in module.named_modules() if isinstance(m, (torch.nn.Linear, torch.nn.Embedding))
              and lm_common.is_kept(n, tuple(names))}
    scopes = []
    for name in sorted(leaves):
        if name == "lm_head":  # its output is the logits, which litert-torch names after each signature's output 0
            scopes += [f"^{entry}_output_0_output;" for entry in lm_common.ENTRY_POINTS]
            continue
        parts, pieces = name.split("."), []
        for i in range(1, len(parts) + 1):
            sub = module.get_submodule(".".join(parts[:i]))
            if type(sub).forward is not torch.nn.Module.forward:  # a module called in the forward names a scope
                pieces.append(r"[^/;]*\." + re.escape(f"{type(sub).__name__}_{parts[i - 1]}"))
        scopes.append(r"^[^/;]*/" + "/".join(pieces) + ";")
    return scopes


def _quantized(model: bytes, precision: str, group: int | None, kept: list[str], int8: list[str]) -> bytes:
    """The float .tflite `model` quantized by ai-edge-quantizer with litert-torch's generative recipe for
    `precision`, the ops matching an `int8` scope dynamic-range int8 per channel (at int4 that is as fast as
    int4 there; weight-only int8 decoded the sample 5% slower), those matching a `kept` scope left float (the
    last matching entry of a recipe wins)."""
    from ai_edge_quantizer import qtyping
    from ai_edge_quantizer.recipe_manager import RecipeManager
    from litert_torch.quantize import translate_recipe

    recipe = translate_recipe.translate_to_ai_edge_recipe(_recipe(precision, group))
    as_int8 = translate_recipe.translate_to_ai_edge_recipe(_recipe("int8-weights", None, dynamic=True))
    recipe += [{**entry, "regex": scope} for scope in int8 for entry in as_int8]
    manager = RecipeManager()
    manager.load_quantization_recipe(recipe)
    for scope in kept:
        manager.add_quantization_config(scope, qtyping.TFLOperationName.ALL_SUPPORTED, algorithm_key="no_quantize")
    return bytes(translate_recipe.quantize_model(model, manager.get_quantization_recipe()))


def _recipe(precision: str, group: int | None, dynamic: bool = False):
    """litert-torch's generative recipe for `precision`: every weight, int8 per channel (weight-only, or
    dynamic-range when `dynamic`) or dynamic-range int4 in blocks of `group`."""
    from litert_torch.generative.quantize import quant_attrs, quant_recipe, quant_recipe_utils

    if precision == Precision.INT8_WEIGHTS:
        make = quant_recipe_utils.create_layer_quant_dynamic if dynamic else quant_recipe_utils.create_layer_quant_weight_only
        layer = make(quant_attrs.Dtype.INT8, quant_attrs.Granularity.CHANNELWISE)
    else:
        layer = quant_recipe_utils.create_layer_quant_dynamic(quant_attrs.Dtype.INT4,
                                                              getattr(quant_attrs.Granularity, f"BLOCKWISE_{group}"))
    return quant_recipe.GenerativeQuantRecipe(default=layer)
