"""Fold the constant affine ops a convolution's output goes through into its weights and bias.

Exporters write a per-channel or scalar scale and shift after a convolution as separate Mul, Add,
Sub and Div nodes with a constant operand — PP-LCNet's learnable affine blocks, a BatchNorm written
out by hand, Paddle2ONNX's `Mul(constant, x)` — and onnxruntime's own fusions take only a Mul whose
constant is its second input and a scalar or per-channel shape, and no scalar Add. Left in the
graph, each of them gets its own int8 quantization of its output: one more rounding of the same
values per op, compounding layer after layer. Folded (y·s + t = conv(x; W·s, b·s + t), exact), the
convolution writes the affine's output itself.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

_AFFINE = ("Mul", "Add", "Sub", "Div")  # for Sub and Div, only the convolution's output minus / over a constant


def fold_affine(path: Path, out: Path | None = None) -> int:
    """Fold every constant scale or shift following a Conv into it, in the model at `path`, written to `out`
    (default: `path`) when anything was folded. The number of ops folded."""
    import onnx

    model = onnx.load(str(path))
    graph = model.graph
    constants = _constants(graph)
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
            bias = constants.get(conv.input[2]) if len(conv.input) > 2 and conv.input[2] else np.zeros(len(weight), weight.dtype)
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
    if folded:
        _drop_unused(graph)
        onnx.save(model, str(out or path))
    return folded


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
