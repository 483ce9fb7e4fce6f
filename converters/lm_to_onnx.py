"""decoder LM → onnx: the static-cache decoder as one ONNX graph whose token count is dynamic (1 for
`decode`, up to `max_seq_len` for `prefill`), inputs tokens, input_pos, k_cache, v_cache and outputs logits,
k_cache_out, v_cache_out.

int8-weights and int4-weights are ONNX Runtime's `MatMulNBitsQuantizer`: every MatMul with constant
weights becomes `MatMulNBits` (int8 in blocks of 128: it writes no per-channel form; int4 in groups of
`--group-size`) and, at int4, the embedding `Gather` becomes `GatherBlockQuantized` (it writes no 8-bit
table: at int8 the table stays float). Accuracy level 4 lets ONNX Runtime's CPU kernels quantize the
activations to int8 at run time.
"""

from __future__ import annotations

from pathlib import Path

from edgekit.core.artifact import ArtifactMeta, ModelArtifact
from edgekit.core.formats import onnx_files
from edgekit.converters import lm_common
from edgekit.converters.base import ConvertContext, Converter

INT8_BLOCK = 128



class LmToOnnx(Converter):
    """The decoder LM → onnx edge (torch.onnx dynamo export; MatMulNBits for the weight precisions)."""

    name = "lm_to_onnx"
    source = "lm"
    target = "onnx"
    precisions = ("fp32", "int8-weights", "int4-weights")
    extra = "onnx"
    cost = 1.0
    tools = ("torch", "onnx", "onnxscript", "onnxruntime")

    def convert(self, src: ModelArtifact, out_path: Path, precision: str, ctx: ConvertContext) -> ModelArtifact:
        """Exported once with a dynamic token count; quantized by MatMulNBitsQuantizer for the weight precisions."""
        import torch

        source, spec = ctx.source, ctx.spec
        module = source.decoder()
        tokens = torch.export.Dim("tokens", min=1, max=source.max_seq_len)
        names = [t.name for t in src.signature.inputs]
        fp32_path = out_path if precision == "fp32" else ctx.work_dir / "decoder.fp32.onnx"
        torch.onnx.export(module, source.example_inputs(source.prefill_len), str(fp32_path), dynamo=True,
                          input_names=names, output_names=[t.name for t in src.signature.outputs],
                          dynamic_shapes=({1: tokens}, {0: tokens}, None, None), external_data=False, verbose=False)
        group = spec.group_size if precision == "int4-weights" else None
        keep = ()
        if precision != "fp32":
            keep = lm_common.kept(spec, module)
            _quantize(fp32_path, out_path, 4 if group else 8, group or INT8_BLOCK, keep)
        weights = {"fp32": "float32", "int8-weights": f"int8 in blocks of {INT8_BLOCK}",
                   "int4-weights": f"int4 in groups of {group}"}[precision]
        activations = "float32" if precision == "fp32" else "float32, quantized to int8 inside MatMulNBits (accuracy level 4)"
        embedding = "float32 (ONNX Runtime's quantizer writes 4-bit tables only)" if precision == "int8-weights" else weights
        lm = lm_common.record(source, precision, weights=weights, activations=activations, embedding=embedding,
                              keep=keep, group_size=group)
        return ModelArtifact("onnx", str(out_path), src.signature, precision, files=onnx_files(out_path),
                             meta=ArtifactMeta(lm=lm))


def _quantize(fp32_path: Path, out_path: Path, bits: int, block: int, keep: tuple[str, ...]) -> None:
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    model = onnx.load(str(fp32_path))
    excluded = [n.name for n in model.graph.node
                if any(lm_common.is_kept(_module_of(i), keep) for i in n.input if i.endswith(".weight"))]
    quantizer = MatMulNBitsQuantizer(model, bits=bits, block_size=block, is_symmetric=True, accuracy_level=4,
                                     nodes_to_exclude=excluded, op_types_to_quantize=("MatMul", "Gather"),
                                     quant_axes=(("MatMul", 0), ("Gather", 1)))
    quantizer.process()
    quantizer.model.save_model_to_file(str(out_path), use_external_data_format=False)


def _module_of(weight: str) -> str:
    return weight[: -len(".weight")]
