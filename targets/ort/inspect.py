"""Inspect an .ort file (ONNX Runtime's mobile format): constant bytes by dtype and the kernel mode of every op.

The file is read with the flatbuffer schema onnxruntime ships (`onnxruntime.tools.ort_format_model`).
An .ort saved with the Fixed optimization style holds the graph as ONNX Runtime will run it: QDQ
groups are already fused (QLinearConv, QGemm, NhwcMaxPool, ...) and float convolutions may be
FusedConv. The int8 rules are edgekit.targets.onnx.inspect's; the tensor types come from the file's own NodeArgs,
which ONNX Runtime writes for every value, so no shape inference is needed; so do the input and output
shapes, read from the same NodeArgs an onnxruntime session reports them from.
"""

from __future__ import annotations

import collections
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

from edgekit.core.errors import BadInput
from edgekit.core.formats import ORT_PLATFORM_KEY
from edgekit.core.inspection import Inspection
from edgekit.targets.inspection import build, io_entry
from edgekit.targets.onnx.inspect import (_dtype, op_modes, quantization_params, tensor_bytes, type_quantize_outputs,
                                          weight_uses)


@dataclass(frozen=True)
class _Node:
    """An .ort node with the attribute names of an onnx NodeProto, for edgekit.targets.onnx.inspect's rules."""

    op_type: str
    domain: str
    name: str
    input: tuple[str, ...]
    output: tuple[str, ...]
    ints: dict  # its integer attributes by name


def _fbs():
    """onnxruntime's generated flatbuffer classes (the top-level package `ort_flatbuffers_py`).

    Importing them through `onnxruntime.tools` would import torch too (its __init__ does when torch
    is installed), so the folder is put on sys.path directly, as `onnxruntime.tools.ort_format_model` does.
    """
    if importlib.util.find_spec("ort_flatbuffers_py") is None:
        spec = importlib.util.find_spec("onnxruntime")
        if spec is None or spec.origin is None:
            raise BadInput("reading an .ort file needs onnxruntime", fix="pip install 'edgekit[onnx]'")
        sys.path.append(str(Path(spec.origin).parent / "tools" / "ort_format_model"))
    import ort_flatbuffers_py.fbs as fbs

    return fbs


def _text(b) -> str:
    return b.decode() if b else ""


def _model(path: str):
    """The .ort at `path`'s fbs.Model and the file's ORT format version."""
    fbs = _fbs()
    with open(path, "rb") as f:
        buf = bytearray(f.read())
    if not fbs.InferenceSession.InferenceSession.InferenceSessionBufferHasIdentifier(buf, 0):
        raise BadInput(f"{path} is not an ORT format model (no ORTM identifier)",
                       fix="convert it with edgekit convert ... -t ort")
    session = fbs.InferenceSession.InferenceSession.GetRootAsInferenceSession(buf, 0)
    return session.Model(), _text(session.OrtVersion())


def read(path: str):
    """The main graph of the .ort at `path` (an fbs.Graph) and the file's ORT format version."""
    model, version = _model(path)
    return model.Graph(), version


def laid_out_for(path: str) -> str | None:
    """The CPU kind ("arm" or "x86") edgekit laid the .ort at `path` out for (its model metadata, written by
    edgekit.converters.onnx_to_ort); None for an .ort that does not say."""
    model, _ = _model(path)
    for j in range(model.MetadataPropsLength()):
        entry = model.MetadataProps(j)
        if _text(entry.Key()) == ORT_PLATFORM_KEY:
            return _text(entry.Value()) or None
    return None


def inspect(path: str) -> Inspection:
    fbs = _fbs()
    graph, format_version = read(path)
    notes = [f"ORT format version {format_version}"] if format_version else []
    platform = laid_out_for(path)
    if platform:
        notes.append(f"laid out for {platform} CPUs (--ort-platform {platform}); timed on a CPU of the other kind "
                     f"it runs without its own layout")

    elem, shape_of = {}, {}  # tensor name -> element type (ORT's TensorDataType values are TensorProto's), its dims
    for j in range(graph.NodeArgsLength()):
        arg = graph.NodeArgs(j)
        info = arg.Type()
        if info is not None and info.ValueType() == fbs.TypeInfoValue.TypeInfoValue.tensor_type:
            tensor_type = fbs.TensorTypeAndShape.TensorTypeAndShape()
            tensor_type.Init(info.Value().Bytes, info.Value().Pos)
            elem[_text(arg.Name())] = tensor_type.ElemType()
            shape_of[_text(arg.Name())] = _dims(fbs, tensor_type.Shape())

    consts = {}  # name -> (element type, dims)
    for j in range(graph.InitializersLength()):
        t = graph.Initializers(j)
        consts[_text(t.Name())] = (t.DataType(), [int(t.Dims(k)) for k in range(t.DimsLength())],
                                   [t.StringData(k) for k in range(t.StringDataLength())])
    if graph.SparseInitializersLength():
        notes.append(f"{graph.SparseInitializersLength()} sparse initializer(s) not counted in the weight bytes")
    elem.update({name: code for name, (code, _, _) in consts.items()})

    nodes = []
    for j in range(graph.NodesLength()):
        n = graph.Nodes(j)
        nodes.append(_Node(_text(n.OpType()), _text(n.Domain()), _text(n.Name()),
                           tuple(_text(n.Inputs(k)) for k in range(n.InputsLength())),
                           tuple(_text(n.Outputs(k)) for k in range(n.OutputsLength())),
                           {_text(n.Attributes(k).Name()): n.Attributes(k).I() for k in range(n.AttributesLength())
                            if n.Attributes(k).Type() == fbs.AttributeType.AttributeType.INT}))
        for k in range(n.AttributesLength()):
            if n.Attributes(k).Type() in (fbs.AttributeType.AttributeType.GRAPH, fbs.AttributeType.AttributeType.GRAPHS):
                notes.append("control-flow subgraphs are not inspected")

    type_quantize_outputs(nodes, elem)
    qparams = quantization_params(nodes, consts)
    weights, tensors = collections.Counter(), []
    for name, (code, dims, strings) in consts.items():
        if name not in qparams:
            size = tensor_bytes(code, dims, strings)
            weights[_dtype(code)] += size
            tensors.append({"name": name, "dtype": _dtype(code), "shape": dims, "bytes": size})

    ops, op_counts, rule_notes = op_modes(nodes, consts, elem, qparams)
    notes += rule_notes
    inputs = [_text(graph.Inputs(j)) for j in range(graph.InputsLength())]
    outputs = [_text(graph.Outputs(j)) for j in range(graph.OutputsLength())]
    io = {"inputs": [_dtype(elem.get(x, 0)) for x in inputs if x not in consts],
          "outputs": [_dtype(elem.get(x, 0)) for x in outputs]}
    shapes = {"inputs": [io_entry(x, shape_of.get(x)) for x in inputs if x not in consts],
              "outputs": [io_entry(x, shape_of.get(x)) for x in outputs]}
    return build("ort", weights=weights, ops=ops, op_counts=op_counts, tensors=tensors, io_dtypes=io, notes=notes,
                 io_shapes=shapes, weight_uses=weight_uses(nodes, {k: (c, d) for k, (c, d, _) in consts.items()},
                                                           lambda n: n.ints))


def _dims(fbs, shape) -> list | None:
    """A NodeArg's dims as an onnxruntime session on the file reports them (it reads the same NodeArgs, but
    runs native code on the file): an int, the symbolic name of a dynamic one, or None; None for no shape."""
    if shape is None:
        return None
    kinds = fbs.DimensionValueType.DimensionValueType
    out = []
    for k in range(shape.DimLength()):
        value = shape.Dim(k).Value()
        kind = value.DimType() if value is not None else kinds.UNKNOWN
        if kind == kinds.VALUE:
            out.append(int(value.DimValue()))
        else:
            out.append((_text(value.DimParam()) or None) if kind == kinds.PARAM else None)
    return out
