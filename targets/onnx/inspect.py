"""Inspect an .onnx file: constant bytes by dtype and the kernel mode of every compute op.

QDQ models: an op runs int8 when every activation input comes from DequantizeLinear of an int8
tensor (the pattern ONNX Runtime fuses into QLinearConv/QGemm). A DequantizeLinear of an int32
initializer is a quantized bias, not a float activation. External weight data is never read:
sizes come from dims × itemsize, so a missing or relocated .onnx.data does not matter.
"""

from __future__ import annotations

import collections
import functools
import math
import os
import tempfile

import numpy as np

from edgekit.core.formats import onnx_dims
from edgekit.core.inspection import Inspection, OpInfo
from edgekit.targets.inspection import HEAVY_OPS, build, executed_view, heavy_macs, io_entry

DATA_OPS = frozenset({
    "Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Concat", "Slice", "Split",
    "Gather", "Shape", "Constant", "ConstantOfShape", "Cast", "Expand", "Tile", "Pad", "Range",
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "DepthToSpace", "SpaceToDepth",
})
# Integer kernels by definition: QOperator format and dynamic quantization.
DYNAMIC_OPS = frozenset({"MatMulInteger", "ConvInteger", "MatMulIntegerToFloat", "DynamicQuantizeMatMul",
                         "DynamicQuantizeLSTM"})
QUANT_OPS = DYNAMIC_OPS | {
    "QLinearConv", "QLinearMatMul", "QLinearAdd", "QLinearMul", "QLinearAveragePool", "QLinearGlobalAveragePool",
    "QLinearSigmoid", "QLinearLeakyRelu", "QLinearConcat", "QLinearSoftmax", "QLinearReduceMean", "QLinearWhere",
    "QLinearConvTranspose", "QGemm", "QAttention", "QEmbedLayerNormalization", "QOrderedMatMul",
}


def inspect(path: str) -> Inspection:
    import onnx

    model = onnx.load(path, load_external_data=False)
    g = model.graph
    notes = []
    external = sorted({e.value for t in g.initializer for e in t.external_data if e.key == "location"})
    if external:
        notes.append(f"weights stored in external data: {', '.join(external)}")
    consts, elem, qparams = _tables(model, notes)
    weights, tensors = collections.Counter(), []
    for name, t in consts.items():
        if name not in qparams:
            weights[_dtype(t.data_type)] += _nbytes(t)
            tensors.append({"name": name, "dtype": _dtype(t.data_type), "shape": list(t.dims), "bytes": _nbytes(t)})

    ops, op_counts, rule_notes = op_modes(g.node, consts, elem, qparams)
    notes += rule_notes
    ran = None
    if any(o.mode in ("int8", "int16", "dynamic") for o in ops):  # a float model runs float
        ran = executed(path, notes)
    io = {"inputs": [_dtype(i.type.tensor_type.elem_type) for i in g.input if i.name not in consts],
          "outputs": [_dtype(o.type.tensor_type.elem_type) for o in g.output]}
    shapes = {"inputs": [_io_shape(i) for i in g.input if i.name not in consts], "outputs": [_io_shape(o) for o in g.output]}
    if any(e["shape"] is None for side in shapes.values() for e in side):
        notes.append("some inputs or outputs have no shape in the file")
    return build("onnx", weights=weights, ops=ops, op_counts=op_counts, tensors=tensors, io_dtypes=io, notes=notes,
                 io_shapes=shapes, executed=ran,
                 weight_uses=weight_uses(g.node, {k: (t.data_type, list(t.dims)) for k, t in consts.items()},
                                         lambda n: {a.name: a.i for a in n.attribute}))


LOOKUP_OPS = frozenset({"Gather", "GatherBlockQuantized"})


def weight_uses(nodes, consts: dict, ints) -> list[dict]:
    """The constants a lookup (its table) or a matmul (its weight) reads, for the LM view (`lm_view`): role,
    dtype, logical dims, bytes and the scheme the op's attributes give (MatMulNBits' and GatherBlockQuantized's
    bits and block size). `consts`: name → (element type, dims); `ints(node)`: its integer attributes."""
    nbits = {n.input[1]: n for n in nodes if n.op_type == "MatMulNBits" and len(n.input) > 2}
    scales = {n.input[2] for n in nbits.values()}
    uses, seen = [], {}  # constant → its first use
    for n in nodes:
        role = "lookup" if n.op_type in LOOKUP_OPS else "matmul" if HEAVY_OPS.search(n.op_type) else None
        x = n.input[0 if role == "lookup" else 1] if role and len(n.input) > 1 else None
        if x not in consts or (role == "lookup" and x in scales):  # a MatMulNBits' scales: part of its weight
            continue
        if x in seen:  # a tied LM head reading the embedding's table (or the reverse): stored once
            first = seen[x]
            if first["role"] != role:
                other = "embedding" if first["role"] == "lookup" else "LM head"
                uses.append({**first, "role": role, "bytes": 0, "scheme": f"shared with the {other}"})
            continue
        packed = nbits.get(x)  # a MatMulNBits weight, packed (a lookup of the tied table reads it so too)
        (code, dims), attrs = consts[x], ints(packed if packed is not None else n)
        use = {"role": role, "dtype": _dtype(code), "dims": list(dims), "bytes": tensor_bytes(code, dims), "scheme": ""}
        if packed is not None or n.op_type == "GatherBlockQuantized":  # packed: the bits and logical dims are attributes
            use.update(dtype=f"int{attrs.get('bits', 4)}", scheme=f"blocks of {attrs.get('block_size')}")
            use.update(dims=[attrs["N"], attrs["K"]] if packed is not None else use["dims"])
        seen[x] = use
        uses.append(use)
    return uses


def _tables(model, notes: list) -> tuple[dict, dict, set]:
    """(constant tensors by name, every tensor's TensorProto element type by name, the quantization parameters)."""
    import onnx

    g = model.graph
    consts = {t.name: t for t in g.initializer}
    for n in g.node:  # Constant nodes carry weights too (torch exporters emit them)
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value":
                    consts[n.output[0]] = a.t
    elem = {}  # tensor name -> TensorProto element type
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False).graph
    except Exception as e:  # noqa: BLE001 - contrib ops or odd models: fall back to what the file says
        notes.append(f"shape inference failed ({type(e).__name__}); op modes may be incomplete")
        inferred = g
    for vi in [*inferred.input, *inferred.output, *inferred.value_info]:
        if vi.type.tensor_type.elem_type:
            elem[vi.name] = vi.type.tensor_type.elem_type
    elem.update({k: t.data_type for k, t in consts.items()})
    type_quantize_outputs(g.node, elem)
    return consts, elem, quantization_params(g.node, consts)


# What ONNX Runtime adds to a graph to run it that moves data only (its NCHWc layout for float convolutions).
RUNTIME_DATA_OPS = frozenset({"ReorderInput", "ReorderOutput"})
# Ops whose output has their first input's element type.
KEEPS_TYPE = frozenset({"Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Concat", "Slice",
                        "Split", "Gather", "Expand", "Tile", "Pad", "DepthToSpace", "SpaceToDepth"}) | RUNTIME_DATA_OPS


def _type_runtime_outputs(nodes, elem: dict) -> None:
    """Type what shape inference cannot in a runtime's graph: an integer kernel's output has its output
    zero point's type, and data movement keeps its input's, in graph (topological) order."""
    for n in nodes:
        if n.op_type in QUANT_OPS and n.op_type not in DYNAMIC_OPS:
            zp = [x for x, role in zip(n.input, _input_names(n.op_type, n.domain)) if role.lower() == "y_zero_point" and x]
            if zp and zp[0] in elem:
                elem.setdefault(n.output[0], elem[zp[0]])
        elif n.op_type in KEEPS_TYPE and n.input and n.input[0] in elem:
            for out in n.output:
                elem.setdefault(out, elem[n.input[0]])


def executed(path: str, notes: list) -> dict | None:
    """What ONNX Runtime's CPU provider runs: the graph a default session makes of the file after its own
    optimizations (fusing DequantizeLinear → op → QuantizeLinear into an integer kernel where it has one),
    read by the same rules. There an op that reads an activation through DequantizeLinear and is not one of
    the runtime's integer kernels (QUANT_OPS) runs float on dequantized values (`qdq_float`), as a conv
    feeding a SiLU does; an op reading int8 tensors directly (an NHWC max pool after an int8 conv) is int8. None, with a note, when the runtime cannot make the session."""
    import onnx
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="edgekit-ort-") as folder:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.log_severity_level = 3  # not the warning that the saved graph fits this host only: it is read here
        options.optimized_model_filepath = os.path.join(folder, "optimized.onnx")
        try:
            ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
            model = onnx.load(options.optimized_model_filepath, load_external_data=False)
        except Exception as e:  # noqa: BLE001 - the file's own reading stands; say why this part is missing
            notes.append(f"what ONNX Runtime runs could not be read: {type(e).__name__}: {str(e)[:200]}")
            return None
    consts, elem, qparams = _tables(model, [])
    _type_runtime_outputs(model.graph.node, elem)
    nodes = [n for n in model.graph.node if n.op_type not in RUNTIME_DATA_OPS]
    ops, _, _ = op_modes(nodes, consts, elem, qparams)
    producer = {o: n for n in nodes for o in n.output}
    dequantized = {n.name or f"node{i}" for i, n in enumerate(nodes)  # reads an activation through DequantizeLinear
                   if any(x in producer and producer[x].op_type == "DequantizeLinear" and producer[x].input[0] not in consts
                          for x in n.input)}
    ops = [OpInfo(o.type, "qdq_float", o.where)
           if o.mode in ("int8", "int16") and o.type not in QUANT_OPS and o.where in dequantized else o for o in ops]
    return executed_view("onnx", "onnxruntime CPUExecutionProvider, default graph optimizations",  # its version: tool_versions
                         ops, macs=_macs(path, model, nodes, {o.where for o in ops if HEAVY_OPS.search(o.type)}),
                         runtime_ops=len(nodes))  # every node it runs: compute, (de)quantize and layout ops


def _macs(path: str, model, nodes: list, heavy: set[str]) -> dict[str, int]:
    """The multiply-accumulates of each conv, gemm and matmul ONNX Runtime runs (the `heavy` locations of `nodes`,
    of its optimized `model`), by location. They are counted on the file, whose shapes ONNX shape inference gives
    (the runtime renames the tensors of what it fuses, and runs int8 convs channels-last): each file conv or
    matmul by the constant it reads as its second operand (through a DequantizeLinear), which the runtime's op
    reads too, else by its output's name. {} when the file's shapes cannot be inferred."""
    import onnx

    try:
        graph = onnx.shape_inference.infer_shapes(onnx.load(path, load_external_data=False)).graph
    except Exception:  # noqa: BLE001 - the shares by op count stand without it
        return {}
    counted, shapes = _file_macs(graph)
    producer = {o: n for n in model.graph.node for o in n.output}
    out = {}
    for i, n in enumerate(nodes):
        where = n.name or f"node{i}"
        if where not in heavy or not n.output:
            continue
        at = 3 if n.op_type.startswith("QLinear") or n.op_type == "QGemm" else 1  # the second operand
        second = n.input[at] if len(n.input) > at else ""
        source = producer.get(second)
        second = source.input[0] if source is not None and source.op_type == "DequantizeLinear" else second
        macs = counted.get(second) or counted.get(n.output[0], 0)
        if not macs and "Conv" not in n.op_type:  # a matmul of two activations, fused with its (de)quantizes
            first = shapes.get(n.input[0])
            macs = heavy_macs(shapes.get(n.output[0]), inner=first[-1] if first and isinstance(first[-1], int) else None)
        out[where] = macs
    return out


def _file_macs(graph) -> tuple[dict[str, int], dict[str, list]]:
    """(MACs of each conv, gemm and matmul of an inferred ONNX `graph` (NCHW), keyed by the constant its second
    operand is (through a DequantizeLinear) and by its output's name; every tensor's shape)."""
    shapes = {v.name: onnx_dims(v) for v in (*graph.value_info, *graph.input, *graph.output)}
    shapes.update({t.name: list(t.dims) for t in graph.initializer})
    producer = {o: n for n in graph.node for o in n.output}
    out = {}
    for n in graph.node:
        if n.op_type not in ("Conv", "ConvInteger", "Gemm", "MatMul", "MatMulInteger") or len(n.input) < 2:
            continue
        second = n.input[1]
        source = producer.get(second)
        second = source.input[0] if source is not None and source.op_type == "DequantizeLinear" else second
        output, weight = shapes.get(n.output[0]), shapes.get(second)
        if n.op_type.startswith("Conv"):
            macs = heavy_macs(output, weight, channels=1)
        else:  # the shared dimension: the second operand's first (its last where Gemm transposes it)
            trans = any(a.name == "transB" and a.i for a in n.attribute)
            inner = (weight[-1] if trans else weight[-2 if len(weight) > 1 else 0]) if weight else None
            macs = heavy_macs(output, inner=inner if isinstance(inner, int) else None)
        if macs:
            out[n.output[0]] = macs
            if second in shapes and second not in out and any(t.name == second for t in graph.initializer):
                out[second] = macs
    return out, shapes


def _io_shape(value) -> dict:
    """A graph input or output (ValueInfoProto): a dim_param, a dim without a value or below 1 is dynamic."""
    t = value.type.tensor_type
    if not t.HasField("shape"):
        return io_entry(value.name, None)
    return io_entry(value.name, onnx_dims(value))


# The rules below work on any ONNX-like graph: `nodes` have op_type, domain, name, input and output
# (onnx NodeProto, or the nodes of an .ort flatbuffer read by edgekit.targets.ort.inspect); `elem` maps a tensor
# name to its TensorProto element type; `consts` holds the names of constant tensors.

def type_quantize_outputs(nodes, elem: dict) -> None:
    """Type the outputs of (de)quantize ops that shape inference could not (contrib ops)."""
    from onnx import TensorProto

    for n in nodes:
        if n.op_type == "QuantizeLinear":
            zp = n.input[2] if len(n.input) > 2 and n.input[2] else None
            elem.setdefault(n.output[0], elem.get(zp, TensorProto.UINT8))
        elif n.op_type == "DynamicQuantizeLinear":
            elem.setdefault(n.output[0], TensorProto.UINT8)
        elif n.op_type == "DequantizeLinear":
            elem.setdefault(n.output[0], TensorProto.FLOAT)


def quantization_params(nodes, consts) -> set[str]:
    """Quantization parameters: constants read at an input slot named *scale* or *zero_point*."""
    return {x for n in nodes for x, role in zip(n.input, _input_names(n.op_type, n.domain))
            if x in consts and _is_qparam(role)}


def op_modes(nodes, consts, elem: dict, qparams: set[str]) -> tuple[list[OpInfo], collections.Counter, list[str]]:
    """The kernel mode of every compute op, the count of every op, and notes on what the rules saw."""
    from onnx import TensorProto

    q8 = {TensorProto.INT8, TensorProto.UINT8, TensorProto.INT4, TensorProto.UINT4}
    q16 = {TensorProto.INT16, TensorProto.UINT16}
    floats = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE}
    producer = {o: n for n in nodes for o in n.output}
    consumers = collections.defaultdict(list)
    for n in nodes:
        for x in n.input:
            consumers[x].append(n)
    ops, op_counts, unrequantized, notes = [], collections.Counter(), False, []
    for i, n in enumerate(nodes):
        op_counts[n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}:{n.op_type}"] += 1
        if n.op_type in DATA_OPS:
            continue
        where = n.name or f"node{i}"
        if n.op_type in QUANT_OPS:
            dq = n.input[0] in producer and producer[n.input[0]].op_type == "DynamicQuantizeLinear"
            ops.append(OpInfo(n.op_type, "dynamic" if n.op_type in DYNAMIC_OPS or dq else "int8", where))
            continue
        act_q, act_f, act_int, weight_q, weight_f = [], [], [], False, False
        roles = _input_names(n.op_type, n.domain)
        for k, x in enumerate(n.input):
            if not x or x in qparams or (k < len(roles) and _is_qparam(roles[k])):
                continue
            p = producer.get(x)
            if p is not None and p.op_type == "DequantizeLinear":
                src_type = elem.get(p.input[0])
                if p.input[0] in consts:  # a quantized weight (int8/int4) or a quantized bias (int32)
                    weight_q = weight_q or src_type in q8 | q16
                else:
                    (act_q if src_type in q8 | q16 else act_f).append(src_type)
            elif x in consts:
                weight_q = weight_q or elem.get(x) in q8
                # a float weight (slot 1 of a conv or matmul) makes a float kernel whatever its input is
                weight_f = weight_f or (k == 1 and elem.get(x) in floats and bool(HEAVY_OPS.search(n.op_type)))
            elif elem.get(x) in q8 | q16:
                act_int.append(elem[x])
            else:
                act_f.append(elem.get(x))
        if (act_q or act_int) and not act_f and not weight_f:
            mode = "int16" if all(t in q16 for t in act_q + act_int) else "int8"
            # ORT fuses DQ -> op -> Q; without a QuantizeLinear after it the op may stay float.
            requantized = any(c.op_type == "QuantizeLinear" for o in n.output for c in consumers.get(o, []))
            unrequantized |= bool(act_q) and not requantized and n.op_type != "MatMul"
        elif act_q and not act_f and weight_f:
            mode = "qdq_float"  # its int8 input is dequantized into a float kernel with its float weight
        elif weight_q:
            mode = "weight_only"  # only the weight is dequantized: ORT runs the float kernel
        else:
            mode = "float"
        ops.append(OpInfo(n.op_type, mode, where))

    if unrequantized:
        notes.append("some int8-input ops have no QuantizeLinear on their output: ONNX Runtime may keep them float")
    if any(o.mode == "dynamic" for o in ops):
        notes.append("dynamic quantization: Mul/Add rescaling ops around each integer kernel stay float")
    return ops, op_counts, notes


def _is_qparam(role: str) -> bool:
    role = role.lower()
    return "scale" in role or "zero_point" in role


@functools.lru_cache(maxsize=None)
def _input_names(op_type: str, domain: str) -> tuple[str, ...]:
    """Input slot names from the op schema (onnx, or onnxruntime for com.microsoft ops); () if unknown."""
    import onnx.defs

    try:
        return tuple(i.name for i in onnx.defs.get_schema(op_type, domain=domain or "").inputs)
    except Exception:  # noqa: BLE001 - not an onnx-domain op
        return _ort_schemas().get((op_type, domain or ""), ())


@functools.lru_cache(maxsize=1)
def _ort_schemas() -> dict:
    try:
        from onnxruntime.capi.onnxruntime_pybind11_state import get_all_operator_schema
    except Exception:  # noqa: BLE001 - onnxruntime missing or built without schemas
        return {}
    return {(s.name, s.domain): tuple(i.name for i in s.inputs) for s in get_all_operator_schema()}


def _dtype(code: int) -> str:
    from onnx import TensorProto

    name = TensorProto.DataType.Name(code).lower()
    return {"float": "float32", "double": "float64"}.get(name, name)


def _nbytes(t) -> int:
    return tensor_bytes(t.data_type, t.dims, t.string_data)


def tensor_bytes(code: int, dims, strings=()) -> int:
    """Bytes of a tensor of TensorProto element type `code` and shape `dims` (from dims × itemsize)."""
    from onnx import TensorProto, helper

    n = math.prod(dims)
    if code in (TensorProto.INT4, TensorProto.UINT4):
        return (n + 1) // 2
    if code == TensorProto.STRING:
        return sum(len(s) for s in strings)
    try:
        return n * np.dtype(helper.tensor_dtype_to_np_dtype(code)).itemsize
    except Exception:  # noqa: BLE001 - a dtype numpy does not know: count one byte per element
        return n
