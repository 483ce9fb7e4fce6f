"""decoder LM → onnx: the static-cache decoder as one ONNX graph whose token count is dynamic (1 for
`decode`, up to `max_seq_len` for `prefill`), inputs tokens, input_pos, k_cache, v_cache and outputs logits,
k_new, v_new (the new keys and values; the app writes them into its cache).

int8-weights and int4-weights are ONNX Runtime's `MatMulNBitsQuantizer`: every MatMul with constant
weights becomes `MatMulNBits` (int8 in blocks of 32: it writes no per-channel form; int4 in groups of
`--group-size`). Accuracy level 4 lets ONNX Runtime's CPU kernels quantize the activations to int8 at run
time. At both precisions the LM head is 8 bits in blocks of 32 and the embedding table int8: a tied model's
embedding looks its rows up in the head's weights (one tensor for both, `_table_from_head`), an untied one
gathers int8 rows scaled by their per-row scales (`_int8_tables`). A 4-bit table (the quantizer's
`GatherBlockQuantized`) has about 200× the int8 table's squared error on the sample LM, and no data-aware
rounding reaches a lookup: at int4 with an int4 table and head the sample agreed on 0.871 of the tokens
rounding to nearest, at 0.168× of fp32; with the head's int8 weights as the table, 0.914 at 0.166×.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

from edgekit.core.artifact import ArtifactMeta, ModelArtifact
from edgekit.core.quant import LM_PRECISIONS, Precision
from edgekit.core.formats import onnx_files
from edgekit.converters import lm_common
from edgekit.converters.base import ConvertContext, Converter

INT8_BLOCK = 32  # measured on the sample LM: blocks of 128 lost 1.5 points of token agreement



class LmToOnnx(Converter):
    """The decoder LM → onnx edge (torch.onnx dynamo export; MatMulNBits for the weight precisions)."""

    name = "lm_to_onnx"
    source = "lm"
    target = "onnx"
    precisions = (Precision.FP32, *LM_PRECISIONS)
    extra = "onnx"
    cost = 1.0
    tools = ("torch", "onnx", "onnxscript", "onnxruntime")

    def convert(self, src: ModelArtifact, out_path: Path, precision: str, ctx: ConvertContext) -> ModelArtifact:
        """Exported once with a dynamic token count; quantized by MatMulNBitsQuantizer for the weight precisions."""
        import torch

        source, spec = ctx.source, ctx.spec
        module = source.decoder(norm="divide")  # ONNX Runtime fuses each norm into one op
        group = spec.group_size if precision == Precision.INT4_WEIGHTS else None
        keep = lm_common.kept(spec, module) if precision != Precision.FP32 else ()
        shared = source.config.tied and not lm_common.keeps_tied_table(source.config, keep)  # one table for both
        block = group or INT8_BLOCK  # the linears'
        rounding = lm_common.data_aware(module, ctx, "onnx", precision, block, keep, shared_head=shared,
                                        head_group=INT8_BLOCK)
        tokens = torch.export.Dim("tokens", min=1, max=source.max_seq_len)
        names = [t.name for t in src.signature.inputs]
        fp32_path = ctx.work_dir / "decoder.exported.onnx"
        torch.onnx.export(module, source.example_inputs(source.prefill_len), str(fp32_path), dynamo=True,
                          input_names=names, output_names=[t.name for t in src.signature.outputs],
                          dynamic_shapes=({1: tokens}, {0: tokens}, None, None), external_data=False, verbose=False)
        _write(fp32_path, out_path, 4 if group else 8 if precision != Precision.FP32 else None, block, keep, shared)
        weights = lm_common.weights_text(precision, group, int8=f"int8 in blocks of {INT8_BLOCK}")
        activations = "float32" if precision == Precision.FP32 else "float32, quantized to int8 inside MatMulNBits (accuracy level 4)"
        embedding = ("float32" if precision == Precision.FP32 or lm_common.is_kept("model.embed_tokens", keep)
                     else f"int8 in blocks of {INT8_BLOCK}, the LM head's" if shared else "int8 per row")
        head = "float32" if precision == Precision.FP32 or lm_common.is_kept("lm_head", keep) else f"int8 in blocks of {INT8_BLOCK}"
        lm = lm_common.record(source, precision, weights=weights, activations=activations, embedding=embedding,
                              head=head, keep=keep, group_size=group, rounding=rounding)
        return ModelArtifact("onnx", str(out_path), src.signature, precision, files=onnx_files(out_path),
                             meta=ArtifactMeta(lm=lm))


def _write(fp32_path: Path, out_path: Path, bits: int | None, block: int, keep: tuple[str, ...],
           shared: bool) -> None:
    """The exported model at `bits` (None: float) written to `out_path` without the exporter's per-node
    debugging metadata (a tenth of an int8 file), once the module scopes in it have named the kept layers."""
    import onnx

    model = onnx.load(str(fp32_path))
    if bits is not None:
        model = _quantize(model, bits, block, keep, shared)
    for node in model.graph.node:
        del node.metadata_props[:]
    onnx.save(model, str(out_path))


def _quantize(model, bits: int, block: int, keep: tuple[str, ...], shared: bool):
    """The linears at `bits` in blocks of `block`, the LM head at 8 bits in blocks of INT8_BLOCK; the embedding
    read from the head's weights where `shared`, else int8 per row (`_int8_tables`)."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    def quantized(model, bits, block, excluded):
        quantizer = MatMulNBitsQuantizer(model, bits=bits, block_size=block, is_symmetric=True, accuracy_level=4,
                                         nodes_to_exclude=excluded, op_types_to_quantize=("MatMul",))
        quantizer.process()
        return quantizer.model.model

    matmuls = [n for n in model.graph.node if n.op_type == "MatMul"]
    kept = [n.name for n in matmuls if lm_common.is_kept(_module(n), keep)]
    head = [n.name for n in matmuls if _module(n) == "lm_head" and n.name not in kept]
    heads = {n.output[0] for n in matmuls if n.name in head}  # the quantizer keeps a node's outputs
    lookup = next((n.name for n in model.graph.node if n.op_type == "Gather" and _module(n) == "model.embed_tokens"), None)
    model = quantized(model, bits, block, kept + head)
    if head:
        model = quantized(model, 8, INT8_BLOCK, [n.name for n in matmuls if n.name not in head])
    if shared:
        _table_from_head(model, lookup, heads)
    else:
        _int8_tables(model, keep)
    return model


def _table_from_head(model, lookup_name: str, heads: set[str]) -> None:
    """The embedding's Gather (the node `lookup_name`) replaced by a lookup of the same rows in the tied LM head's
    8-bit MatMulNBits weights (the node writing an output in `heads`; uint8 [vocab, K / block, block], zero point
    128, and a scale per block): one table in the file for both."""
    from onnx import TensorProto, helper, numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    lookup = next(n for n in model.graph.node if n.name == lookup_name)
    head = next(n for n in model.graph.node if n.op_type == "MatMulNBits" and n.output[0] in heads)
    levels, scales = head.input[1], head.input[2]
    hidden = inits[lookup.input[0]].dims[1]
    ids, out, name = lookup.input[1], lookup.output[0], lookup.name
    model.graph.initializer.extend([numpy_helper.from_array(np.array([0, 0, hidden], np.int64), f"{name}_shape"),
                                    numpy_helper.from_array(np.array(128.0, np.float32), f"{name}_zero"),
                                    numpy_helper.from_array(np.array([-1], np.int64), f"{name}_last_axis")])
    nodes = [
        helper.make_node("Gather", [levels, ids], [f"{out}_levels"], name=f"{name}_levels", axis=0),
        helper.make_node("Gather", [scales, ids], [f"{out}_scales"], name=f"{name}_scales", axis=0),
        helper.make_node("Cast", [f"{out}_levels"], [f"{out}_float"], name=f"{name}_cast", to=TensorProto.FLOAT),
        helper.make_node("Sub", [f"{out}_float", f"{name}_zero"], [f"{out}_centred"], name=f"{name}_centre"),
        helper.make_node("Unsqueeze", [f"{out}_scales", f"{name}_last_axis"], [f"{out}_scales_col"], name=f"{name}_col"),
        helper.make_node("Mul", [f"{out}_centred", f"{out}_scales_col"], [f"{out}_blocks"], name=f"{name}_scaled"),
        # tokens [1, T] → [1, T, K / block, block] → [1, T, K]: the first two dims kept (0), the blocks joined
        helper.make_node("Reshape", [f"{out}_blocks", f"{name}_shape"], [out], name=f"{name}_rows")]
    at = list(model.graph.node).index(lookup)
    model.graph.node.remove(lookup)
    for i, node in enumerate(nodes):
        model.graph.node.insert(at + i, node)
    model.graph.initializer.remove(inits[lookup.input[0]])


def _int8_tables(model, keep: tuple[str, ...]) -> None:
    """Each float lookup table (a Gather on a 2-D float initializer: the embedding) stored int8 per row:
    the rows looked up are gathered as int8 with their scales and scaled to float, so nothing at run time
    dequantizes the whole table."""
    from onnx import TensorProto, helper, numpy_helper

    tables = {i.name: i for i in model.graph.initializer if i.data_type == TensorProto.FLOAT and len(i.dims) == 2}
    nodes = []
    for node in model.graph.node:
        if node.op_type != "Gather" or node.input[0] not in tables or lm_common.is_kept(_module(node), keep):
            nodes.append(node)
            continue
        table = numpy_helper.to_array(tables[node.input[0]])
        scale = np.maximum(np.abs(table).max(axis=1), 1e-12).astype(np.float32) / 127
        q = np.clip(np.round(table / scale[:, None]), -127, 127).astype(np.int8)
        base = node.input[0]
        model.graph.initializer.extend([numpy_helper.from_array(q, f"{base}_int8"), numpy_helper.from_array(scale, f"{base}_scale"),
                                        numpy_helper.from_array(np.array([-1], np.int64), f"{base}_last_axis")])
        ids, out, name = node.input[1], node.output[0], node.name
        nodes.extend([
            helper.make_node("Gather", [f"{base}_int8", ids], [f"{out}_int8"], name=f"{name}_int8", axis=0),
            helper.make_node("Gather", [f"{base}_scale", ids], [f"{out}_scale"], name=f"{name}_scale", axis=0),
            helper.make_node("Cast", [f"{out}_int8"], [f"{out}_float"], name=f"{name}_cast", to=TensorProto.FLOAT),
            helper.make_node("Unsqueeze", [f"{out}_scale", f"{base}_last_axis"], [f"{out}_scale_col"], name=f"{name}_col"),
            helper.make_node("Mul", [f"{out}_float", f"{out}_scale_col"], [out], name=f"{name}_scaled")])
    del model.graph.node[:]
    model.graph.node.extend(nodes)  # in the order they were: each new node where the lookup it replaces was
    used = {i for n in model.graph.node for i in n.input}
    for name in [n for n in tables if n not in used]:
        model.graph.initializer.remove(tables[name])


def _module(node) -> str:
    """The decoder module an exported node belongs to (`model.layers.0.mlp.up_proj`), from the exporter's scopes."""
    scopes = next((p.value for p in node.metadata_props if p.key == "pkg.torch.onnx.name_scopes"), "[]")
    names = ast.literal_eval(scopes)
    return names[-2] if len(names) >= 2 else ""
