"""Exporters' elementwise spellings of one layer, rewritten as that layer before int8 quantization.

onnxruntime's static quantizer gives every op's output its own int8 rounding, so an op an exporter
spelled as several elementwise nodes is rounded several times where one would do, compounding layer
after layer. Both rewrites are exact and found by the graph's pattern, never by a model's name:

- A constant scale and shift after a convolution, folded into it (`fold_affine`). Exporters write
  them as separate Mul, Add, Sub and Div nodes with a constant operand, per channel or scalar —
  PP-LCNet's learnable affine blocks, a BatchNorm written out by hand, Paddle2ONNX's `Mul(constant, x)`
  — and onnxruntime's own fusions take only a Mul whose constant is its second input shaped [] or per
  channel, and no scalar Add. Folded (y·s + t = conv(x; W·s, b·s + t)), the convolution writes the
  affine's output itself.
- A PReLU written out as relu(x) + c·relu(−x) (TensorFlow's Keras PReLU through tf2onnx: five nodes,
  four more roundings), as one PRelu node (`fuse_prelu`).

One more exact rewrite is for speed: a global average pool written as ReduceMean over the two spatial axes
(`adaptive_avg_pool2d(1)` and `x.mean((2, 3), keepdim=True)` through torch's exporter: every squeeze-and-excite
block), as GlobalAveragePool (`global_pool`), which ONNX Runtime runs as an int8 kernel between
quantize/dequantize pairs; it has none for ReduceMean, which then runs in float between a dequantize and a
quantize.

And one for onnxruntime's quantizer itself: a Gemm whose bias is a constant of shape [1, N] (a MatMul and an
Add of a [1, N] constant, fused by its pre-processing: magika's dense layers through jax2tf) stops
`quantize_static`'s int32 bias check, which reads a bias as one value per channel ("The truth value of an array
with more than one element is ambiguous"); the same values as [N] (`flat_biases`), which Gemm broadcasts alike.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

_AFFINE = ("Mul", "Add", "Sub", "Div")  # for Sub and Div, only the convolution's output minus / over a constant


def simplify(path: Path, out: Path | None = None) -> int:
    """The rewrites on the model at `path`, written to `out` (default: `path`) when anything was rewritten.
    The number of rewrites. The names they give are the same on every run, so a model simplified for int8
    and its float source simplified for comparison (`edgekit layers`) match by name."""
    import onnx

    model = onnx.load(str(path))
    constants = _constants(model.graph)
    count = (fold_affine(model.graph, constants) + fuse_prelu(model.graph, constants) + global_pool(model.graph, constants)
             + flat_biases(model.graph))
    if count:
        _drop_unused(model.graph)
        onnx.save(model, str(out or path))
    return count


def flat_biases(graph) -> int:
    """Each Gemm's constant bias of shape [1, N] (an initializer no other node reads) as [N]; how many."""
    initializers = {t.name: t for t in graph.initializer}
    readers = Counter(i for n in graph.node for i in n.input)
    count = 0
    for node in graph.node:
        bias = initializers.get(node.input[2]) if node.op_type == "Gemm" and len(node.input) > 2 else None
        if bias is not None and len(bias.dims) == 2 and bias.dims[0] == 1 and readers[bias.name] == 1:
            bias.dims[:] = [bias.dims[1]]  # the same values in the same order
            count += 1
    return count


def fold_affine(graph, constants: dict) -> int:
    """Fold every constant scale or shift following a Conv of `graph` into it; the number of ops folded.
    `constants` (name → value) gains the new weights and biases."""
    outputs = {o.name for o in graph.output}
    folded = 0
    for conv in [n for n in graph.node if n.op_type == "Conv" and n.input[1] in constants]:
        while conv.output[0] not in outputs:
            readers = [n for n in graph.node if conv.output[0] in n.input]
            if len(readers) != 1 or readers[0].op_type not in _AFFINE:
                break
            op, weight = readers[0], constants[conv.input[1]]
            factor = _per_channel(op, conv.output[0], constants, weight.shape[0], weight.ndim)
            if factor is None:
                break
            has_bias = len(conv.input) > 2 and conv.input[2]
            bias = constants.get(conv.input[2]) if has_bias else np.zeros(len(weight), weight.dtype)
            if bias is None:  # a bias computed at run time
                break
            if op.op_type in ("Mul", "Div"):
                scale = factor if op.op_type == "Mul" else 1 / factor
                weight, bias = weight * scale.reshape(-1, *[1] * (weight.ndim - 1)), bias * scale
            else:
                bias = bias + factor if op.op_type == "Add" else bias - factor
            dtype = constants[conv.input[1]].dtype
            _rewire(graph, conv, op, weight.astype(dtype), bias.astype(dtype), constants)
            folded += 1
    return folded


def fuse_prelu(graph, constants: dict) -> int:
    """Replace each relu(x) + c·relu(−x) (or relu(x) − c·relu(−x)) of `graph`, c a constant, by PRelu(x, ∓c);
    the number replaced."""
    from onnx import helper, numpy_helper

    producer = {o: n for n in graph.node for o in n.output}
    fused = 0
    for node in list(graph.node):
        if node.op_type not in ("Add", "Sub") or len(node.input) != 2:
            continue
        first, second = (producer.get(i) for i in node.input)
        pairs = [(first, second)] + ([(second, first)] if node.op_type == "Add" else [])
        match = next((m for pos, neg in pairs if (m := _prelu_parts(pos, neg, producer, constants))), None)
        if match is None:
            continue
        x, slope, parts = match
        reads = Counter(i for n in graph.node for i in n.input) + Counter(o.name for o in graph.output)
        if any(reads[p.output[0]] != 1 for p in parts):
            continue  # a part's output is read elsewhere too (each is read once within the pattern)
        name = _unused(f"{node.name or node.output[0]}_prelu", constants)
        constants[f"{name}_slope"] = -slope if node.op_type == "Add" else slope
        graph.initializer.append(numpy_helper.from_array(constants[f"{name}_slope"], f"{name}_slope"))
        prelu = helper.make_node("PRelu", [x, f"{name}_slope"], [node.output[0]], name=name)
        graph.node.insert(list(graph.node).index(node), prelu)
        for n in [node, *parts]:
            graph.node.remove(n)
        fused += 1
    return fused


def global_pool(graph, constants: dict) -> int:
    """Replace each ReduceMean of a 4-D tensor over axes 2 and 3 that keeps its dimensions by GlobalAveragePool
    (the same name and output); the number replaced. Axes come from the attribute (opset < 18) or a constant
    input; the rank from the graph's shapes (onnxruntime's pre-processing infers them)."""
    from onnx import helper

    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in (*graph.input, *graph.value_info, *graph.output)
             if v.type.tensor_type.HasField("shape")}
    replaced = 0
    for node in [n for n in graph.node if n.op_type == "ReduceMean" and ranks.get(n.input[0]) == 4]:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        axes = attrs.get("axes")
        if axes is None and len(node.input) > 1 and node.input[1] in constants:
            axes = constants[node.input[1]].tolist()
        if axes is None or sorted(int(a) % 4 for a in axes) != [2, 3] or not attrs.get("keepdims", 1):
            continue
        pool = helper.make_node("GlobalAveragePool", [node.input[0]], list(node.output), name=node.name)
        graph.node.insert(list(graph.node).index(node), pool)
        graph.node.remove(node)
        replaced += 1
    return replaced


def _prelu_parts(pos, scaled, producer: dict, constants: dict):
    """(x, c, [the nodes]) when `pos` is Relu(x) and `scaled` is Mul(Relu(Neg(x)), c), c a float constant
    of x's channels or a scalar; else None."""
    if pos is None or scaled is None or pos.op_type != "Relu" or scaled.op_type != "Mul":
        return None
    c = [i for i in scaled.input if i in constants]
    other = [producer.get(i) for i in scaled.input if i not in constants]
    if len(c) != 1 or len(other) != 1 or other[0] is None or other[0].op_type != "Relu":
        return None
    neg = producer.get(other[0].input[0])
    if neg is None or neg.op_type != "Neg" or neg.input[0] != pos.input[0]:
        return None
    value = constants[c[0]]
    if not np.issubdtype(value.dtype, np.floating) or sum(d > 1 for d in value.shape) > 1:
        return None
    return pos.input[0], value, [pos, scaled, other[0], neg]


def _per_channel(op, operand: str, constants: dict, channels: int, rank: int) -> np.ndarray | None:
    """The op's constant as one value per output channel, or None when the op is not a constant scale or
    shift of each channel (another activation, a shape that varies along a spatial axis, a zero divisor)."""
    if len(op.input) != 2 or list(op.input).count(operand) != 1:
        return None
    other = op.input[1] if op.input[0] == operand else op.input[0]
    if other not in constants or (op.op_type in ("Sub", "Div") and op.input[0] != operand):
        return None
    value = constants[other]
    if value.ndim > rank or not np.issubdtype(value.dtype, np.floating):
        return None
    shape = (1,) * (rank - value.ndim) + value.shape
    if any(d != 1 for i, d in enumerate(shape) if i != 1) or shape[1] not in (1, channels):
        return None
    factor = np.broadcast_to(value.reshape(-1), (channels,)).astype(np.float64)
    if op.op_type == "Div" and not np.all(factor):
        return None
    return factor


def _rewire(graph, conv, op, weight: np.ndarray, bias: np.ndarray, constants: dict) -> None:
    """`conv` with the folded weight and bias (new initializers: others may read the old ones), writing
    what `op` wrote; `op` removed."""
    from onnx import numpy_helper

    w_name = _unused(f"{conv.input[1]}_folded", constants)
    b_name = _unused(f"{conv.name or conv.output[0]}_bias_folded", constants)
    constants[w_name], constants[b_name] = weight, bias
    graph.initializer.extend([numpy_helper.from_array(weight, w_name), numpy_helper.from_array(bias, b_name)])
    conv.input[1] = w_name
    if len(conv.input) > 2:
        conv.input[2] = b_name
    else:
        conv.input.append(b_name)
    conv.output[0] = op.output[0]
    graph.node.remove(op)


def _drop_unused(graph) -> None:
    """Remove the initializers and Constant nodes nothing reads any more (the weights before folding)."""
    read = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    for init in [i for i in graph.initializer if i.name not in read]:
        graph.initializer.remove(init)
    for node in [n for n in graph.node if n.op_type == "Constant" and n.output[0] not in read]:
        graph.node.remove(node)


def _unused(name: str, names) -> str:
    while name in names:
        name += "_"
    return name


def _constants(graph) -> dict[str, np.ndarray]:
    """Initializers and Constant nodes' values, by name."""
    from onnx import numpy_helper

    values = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            values[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return values
