"""Inspect a PyTorch Mobile .ptl: weight bytes by dtype and whether every compute op runs int8.

A .ptl also holds the TorchScript program its lite-interpreter bytecode was compiled from, so it
is read with `torch.jit.load`, whose unpickler rebuilds TorchScript values only (never arbitrary
Python objects). The forward graph, inlined, names every op the lite interpreter runs and every
attribute it reads. Quantized convolution and linear weights are packed objects
(`Conv2dPackedParamsBase`, `LinearPackedParamsBase`): `quantized::conv2d_unpack` /
`linear_unpack` give their int8 weight and float bias back. An op runs int8 when it is a
`quantized::` kernel or an ATen op fed a quantized tensor (quantized tensors come from
`aten::quantize_per_*` and from quantized kernels; `aten::dequantize` ends them).
"""

from __future__ import annotations

import collections

from edgekit.core.inspection import Inspection, OpInfo
from edgekit.targets.inspection import build, io_entry

# Data movement and (de)quantization: not counted as compute ops.
DATA_OPS = frozenset({
    "aten::flatten", "aten::reshape", "aten::view", "aten::permute", "aten::transpose", "aten::contiguous",
    "aten::squeeze", "aten::unsqueeze", "aten::cat", "aten::slice", "aten::select", "aten::size",
    "aten::expand", "aten::to", "aten::clone", "aten::detach", "aten::chunk", "aten::split", "aten::t",
    "aten::constant_pad_nd", "aten::Int", "aten::Float", "aten::Bool", "aten::ScalarImplicit", "aten::item",
    "aten::quantize_per_tensor", "aten::quantize_per_channel", "aten::dequantize", "aten::_assert_tensor_metadata",
})
QUANTIZE = frozenset({"aten::quantize_per_tensor", "aten::quantize_per_channel"})
SCALARS = frozenset({"aten::Int", "aten::Float", "aten::ScalarImplicit", "aten::item"})
UNPACK = {"Conv2dPackedParamsBase": "conv2d_unpack", "Conv3dPackedParamsBase": "conv3d_unpack",
          "LinearPackedParamsBase": "linear_unpack"}
QDTYPES = {"qint8": "int8", "quint8": "uint8", "qint32": "int32", "quint4x2": "uint4"}


def inspect(path: str) -> Inspection:
    import torch

    if "qnnpack" in torch.backends.quantized.supported_engines:
        torch.backends.quantized.engine = "qnnpack"  # packed weights are repacked for this engine on load
    module = torch.jit.load(path, map_location="cpu")
    graph = module.inlined_graph
    args = list(graph.inputs())
    objects = {args[0]: ("", module._c)}  # graph value → (attribute path, object)
    ops, op_counts, notes = [], collections.Counter(), []
    quantized: set = set()  # graph values holding quantized tensors
    attrs = {}  # attribute path → tensor (or packed object), read once each
    qparams: set = set()  # attribute paths used as scales / zero points

    def source_attr(value):  # the attribute path a scalar argument was read from, through Int/Float/item
        node = value.node()
        while node.kind() in SCALARS:
            node = node.input().node()
        return objects.get(node.output(), (None,))[0] if node.kind() == "prim::GetAttr" else None

    for ni, node in enumerate(_walk(graph)):
        kind = node.kind()
        if kind == "prim::GetAttr":
            base, obj = objects[node.input()]
            name = f"{base}.{node.s('name')}".lstrip(".")
            objects[node.output()] = (name, obj.getattr(node.s("name")))
            attrs.setdefault(name, objects[node.output()][1])
            continue
        if kind == "prim::Constant" and node.output().type().kind() == "TensorType":
            attrs.setdefault(f"constant{ni}", node.output().toIValue())
            continue
        if kind.startswith("prim::"):
            continue
        op_counts[kind] += 1
        inputs = list(node.inputs())
        if kind in QUANTIZE or kind.startswith("quantized::"):
            qparams.update(p for p in (source_attr(v) for v in inputs[1:]) if p is not None)
        fed_int8 = any(v in quantized for v in inputs)
        if kind in QUANTIZE or (kind != "aten::dequantize" and (kind.startswith("quantized::") or fed_int8)):
            if not kind.endswith("_dynamic"):  # dynamic kernels take and give float activations
                quantized.update(node.outputs())
        if kind in DATA_OPS:
            continue
        if kind.startswith("quantized::") or fed_int8:
            mode = "dynamic" if kind.endswith("_dynamic") else "int8"
        else:
            mode = "float"
        ops.append(OpInfo(kind, mode, f"forward:node{ni}"))

    weights, tensors = _constants(attrs, qparams, notes)

    # A .ptl records no tensor dtypes: inputs are taken as float, outputs as float unless quantized.
    io = {"inputs": ["float32"] * (len(args) - 1),
          "outputs": ["uint8" if v in quantized else "float32" for v in _outputs(graph)]}
    shapes = {"inputs": [_io_shape(v, v.debugName().split(".")[0] or f"input_{k}") for k, v in enumerate(args[1:])],
              "outputs": [_io_shape(v, f"output_{k}") for k, v in enumerate(_outputs(graph))]}
    if any(e["shape"] is None for side in shapes.values() for e in side):
        notes.append("input and output shapes are unknown: a .ptl does not record them (only running it shows them)")
    if any(o.mode == "int8" for o in ops):
        notes.append("quantized kernels run on the qnnpack engine (PyTorch Mobile's int8 backend)")
    notes.append("PyTorch Mobile (.ptl) is a legacy format; its successor is ExecuTorch (.pte)")
    return build("ptl", weights=weights, ops=ops, op_counts=op_counts, tensors=tensors, io_dtypes=io, notes=notes,
                 io_shapes=shapes)


def _constants(attrs: dict, qparams: set, notes: list) -> tuple[collections.Counter, list[dict]]:
    """(bytes by dtype, each tensor) of the module's attributes and constants `attrs`, but the scales and zero
    points in `qparams`; packed conv and linear objects unpacked to their weight and bias."""
    import torch

    weights, tensors = collections.Counter(), []

    def dtype(t) -> str:
        name = str(t.dtype).replace("torch.", "")
        return QDTYPES.get(name, name)

    def record(name: str, t) -> None:
        t = t.int_repr() if t.is_quantized else t  # per-channel scales and zero points are left out
        n = t.numel() * t.element_size()
        weights[dtype(t)] += n
        tensors.append({"name": name, "dtype": dtype(t), "shape": list(t.shape), "bytes": n})

    for name, obj in attrs.items():
        if isinstance(obj, torch.Tensor):
            if name not in qparams:
                record(name, obj)
        elif isinstance(obj, torch.ScriptObject) and not isinstance(obj, torch._C.ScriptModule):
            cls = obj._type().qualified_name().rsplit(".", 1)[-1]
            if cls not in UNPACK:
                notes.append(f"{name}: a {cls} object whose size is not counted")
                continue
            weight, bias = getattr(torch.ops.quantized, UNPACK[cls])(obj)[:2]
            record(f"{name}.weight", weight)
            if bias is not None:
                record(f"{name}.bias", bias)
    return weights, tensors


def _io_shape(value, name: str) -> dict:
    """A graph input or output as far as its TorchScript type records it (a traced graph, saved and loaded,
    keeps none: the shape is then unknown)."""
    t = value.type()
    sizes = t.varyingSizes() if t.kind() == "TensorType" else None  # None: unknown; a None in it: dynamic
    return io_entry(name, sizes)


def _walk(block):
    """Every node, including those inside the blocks of if/loop nodes (scripted control flow)."""
    for node in block.nodes():
        yield node
        for inner in node.blocks():
            yield from _walk(inner)


def _outputs(graph) -> list:
    """The graph's output values, looking through the tuple the traced forward returns."""
    out = []
    for v in graph.outputs():
        node = v.node()
        out.extend(node.inputs() if node.kind() in ("prim::TupleConstruct", "prim::ListConstruct") else [v])
    return out
