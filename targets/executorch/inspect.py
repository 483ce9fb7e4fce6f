"""Inspect an ExecuTorch .pte file: portable kernels, delegates, and inside XNNPACK payloads.

Without a delegate, a PT2E-quantized program runs float portable kernels between quantize and
dequantize kernels (mode "qdq_float"): int8 weights, float compute. XNNPACK payloads are decoded
with their flatbuffer schema, which gives every node and the dtype of every value; their weights
live in the program's named data and are sized from `constant_data[i].size`.
"""

from __future__ import annotations

import collections
import importlib.resources
import json
import math
import os
import re
import tempfile
from dataclasses import dataclass, field

from edgekit.core.inspection import INT8_FAMILY, Inspection, OpInfo
from edgekit.targets.inspection import build, executed_view, heavy_macs, io_entry, lm_entry

DATA_OPS = frozenset({
    "aten::view_copy", "aten::permute_copy", "aten::clone", "aten::squeeze_copy", "aten::unsqueeze_copy",
    "aten::expand_copy", "aten::cat", "aten::slice_copy", "aten::select_copy", "aten::split_copy",
    "aten::split_with_sizes_copy", "aten::t_copy", "aten::transpose_copy", "aten::alias_copy",
    "aten::_to_copy", "aten::index_select", "aten::constant_pad_nd", "aten::full", "aten::zeros",
    "executorch_prim::et_view", "dim_order_ops::_to_dim_order_copy", "dim_order_ops::_clone_dim_order",
    "aten::pixel_shuffle", "aten::pixel_unshuffle", "aten::repeat", "aten::stack", "aten::unbind_copy",
    "aten::sym_size", "executorch_prim::add", "executorch_prim::sub", "executorch_prim::mul",
    "executorch_prim::floordiv", "aten::_unsafe_view",
})
ET_DTYPE = {"BYTE": "uint8", "CHAR": "int8", "SHORT": "int16", "INT": "int32", "LONG": "int64",
            "HALF": "float16", "FLOAT": "float32", "DOUBLE": "float64", "BOOL": "bool", "QINT8": "int8",
            "QUINT8": "uint8", "QINT32": "int32", "BFLOAT16": "bfloat16", "QUINT4x2": "uint4",
            "UINT16": "uint16", "UINT32": "uint32", "UINT64": "uint64", "BITS16": "int16"}
ITEMSIZE = {"int16": 2, "uint16": 2, "float16": 2, "bfloat16": 2, "int32": 4, "uint32": 4, "float32": 4,
            "int64": 8, "uint64": 8, "float64": 8}  # everything else: 1 byte
XNN_DTYPE = {"fp32": "float32", "pfp32": "float32", "fp16": "float16", "bf16": "bfloat16", "qint8": "int8",
             "qcint8": "int8", "qdint8": "int8", "qpint8": "int8", "quint8": "uint8", "qint32": "int32",
             "qcint32": "int32", "int32": "int32", "qcint4": "int4", "qbint4": "int4"}
XNN_SCHEME = {"qcint8": "per channel", "qcint4": "per channel", "qbint4": "blocks of {group_size}",
              "qint8": "per tensor"}  # a weight's quantization, from its datatype and quant params
XNN_INT8_ACT = frozenset({"qint8", "quint8"})
XNN_DYNAMIC_ACT = frozenset({"qdint8", "qpint8"})  # float activations quantized on the fly
XNN_DATA_NODES = frozenset({"XNNStaticReshape", "XNNStaticTranspose", "XNNConvert", "XNNCopy", "XNNConcatenate2",
                            "XNNConcatenate3", "XNNConcatenate4", "XNNConcatenate5", "XNNStaticSlice",
                            "XNNStaticConstantPad"})
LOOKUPS = ("quantized_decomposed::embedding_byte", "quantized_decomposed::embedding_4bit",
           "quantized_decomposed::embedding_2bit")
XNN_MAC_NODES = frozenset({"XNNConv2d", "XNNDepthwiseConv2d", "XNNFullyConnected", "XNNBatchMatrixMultiply"})
XNN_NO_VALUE = 0xFFFFFFFF  # "no input" (e.g. bias_id); value id 0 is a real value


def inspect(path: str) -> Inspection:
    """The .pte at `path`: each execution plan's kernels and delegate calls (`_Plan`), the ops inside its
    XNNPACK payloads (`_xnnpack`), its constants by dtype, its entry points, and what it runs outside XNNPACK."""
    # Private module: ExecuTorch 1.5.1 has no public .pte reader.
    from executorch.exir._serialize._program import deserialize_pte_binary

    with open(path, "rb") as f:
        pte = deserialize_pte_binary(f.read())  # segments are moved back inline
    found = _Found()
    io, shapes = {"inputs": [], "outputs": []}, {"inputs": [], "outputs": []}
    for pi, plan in enumerate(pte.program.execution_plan):
        plan_io, plan_shapes = _Plan(pte.program, plan, found).read()
        if pi == 0:
            io, shapes = plan_io, plan_shapes
    ops, notes = found.ops, found.notes
    if pte.named_data is not None and pte.named_data.external_data:
        notes.append("named data lives in external .ptd files")
    if any(o.mode == "qdq_float" for o in ops):
        notes.append("quantize/dequantize run as portable kernels around float ops: int8 weights, float compute "
                     "(lower with XnnpackPartitioner to get int8 kernels)")
    ran = executed(ops, found.delegated, found.macs) if any(o.mode in ("int8", "int16", "qdq_float") for o in ops) else None
    return build("pte", weights=found.weights, ops=ops, op_counts=found.op_counts, tensors=found.tensors, io_dtypes=io,
                 delegated=found.delegated, notes=notes, io_shapes=shapes, executed=ran,
                 entry_points=found.entry_points, weight_uses=found.uses,
                 outside_delegate=executed(ops, found.delegated, found.macs)["outside_delegate"])


@dataclass
class _Found:
    """What `inspect` gathers over a program's execution plans."""

    weights: collections.Counter = field(default_factory=collections.Counter)
    tensors: list = field(default_factory=list)
    ops: list = field(default_factory=list)
    op_counts: collections.Counter = field(default_factory=collections.Counter)
    macs: dict = field(default_factory=dict)
    delegated: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    uses: list = field(default_factory=list)
    stored: set = field(default_factory=set)  # constant data counted already (methods share it)
    entry_points: dict = field(default_factory=dict)


class _Plan:
    """One execution plan read into `found`: its delegate calls, its kernels with the mode their operands select,
    its constants."""

    def __init__(self, program, plan, found: _Found):
        from executorch.exir.schema import Tensor

        self.program, self.plan, self.found, self.V = program, plan, found, plan.values
        self.consts = {i for i, v in enumerate(self.V) if isinstance(v.val, Tensor) and v.val.allocation_info is None
                       and (v.val.data_buffer_idx > 0 or v.val.extra_tensor_info is not None)}
        self.defined = set(plan.inputs) | self.consts
        self.dq_source = {}  # tensor -> (comes from a constant?, dtype) of the dequantize that made it
        self.qparams = set()  # constant scales / zero points read by (de)quantize kernels

    def dtype(self, i: int) -> str:
        st = self.V[i].val.scalar_type.name
        return ET_DTYPE.get(st, st.lower())

    def tensor_args(self, args) -> list[int]:
        from executorch.exir.schema import Tensor, TensorList

        out = []
        for a in args:
            v = self.V[a].val
            out.extend([a] if isinstance(v, Tensor) else v.items if isinstance(v, TensorList) else [])
        return out

    def read(self) -> tuple[dict, dict]:
        """Read the plan into `found`; its (inputs' and outputs' dtypes, their shapes)."""
        from executorch.exir.schema import DelegateCall, KernelCall, Tensor

        plan, V = self.plan, self.V
        plan_io = {k: [self.dtype(i) if isinstance(V[i].val, Tensor) else type(V[i].val).__name__ for i in idx]
                   for k, idx in (("inputs", plan.inputs), ("outputs", plan.outputs))}
        plan_shapes = {k: [_io_shape(V[i].val, f"{k[:-1]}_{n}", self.found.notes) for n, i in enumerate(idx)]
                       for k, idx in (("inputs", plan.inputs), ("outputs", plan.outputs))}
        self.found.entry_points[plan.name] = lm_entry(plan_io, plan_shapes)
        for ci, chain in enumerate(plan.chains):
            for ii, ins in enumerate(chain.instructions):
                call, where = ins.instr_args, f"{plan.name}:chain{ci}:instr{ii}"
                if isinstance(call, DelegateCall):
                    self._delegate(call)
                elif isinstance(call, KernelCall):
                    self._kernel(call, where)
        self._constants()
        return plan_io, plan_shapes

    def _delegate(self, call) -> None:
        found = self.found
        d = self.plan.delegates[call.delegate_index]
        found.op_counts["delegate:" + d.id] += 1
        entry = found.delegated.setdefault(d.id, {"calls": 0, "ops": 0})
        entry["calls"] += 1
        self.defined.update(self.tensor_args(call.args))
        if d.id != "XnnpackBackend":
            entry["ops"] = None
            found.notes.append(f"delegate {d.id} is opaque: its ops and weights are not inspected")
            return
        blob = bytes(self.program.backend_delegate_data[d.processed.index].data)
        entry["ops"] += _xnnpack(blob, call.delegate_index, found.weights, found.tensors, found.ops, found.op_counts,
                                 found.macs, found.uses, found.stored)

    def _kernel(self, call, where: str) -> None:
        found, consts, dq_source, dtype = self.found, self.consts, self.dq_source, self.dtype
        ty = self.plan.operators[call.op_index].name
        found.op_counts[ty] += 1
        targs = self.tensor_args(call.args)
        inputs = [t for t in targs if t in self.defined]
        outputs = [t for t in targs if t not in self.defined]  # out-variant args not seen before
        self.defined.update(outputs)
        if ty.startswith(LOOKUPS) or ty == "aten::embedding":
            table = self.V[inputs[0]].val if inputs and inputs[0] in consts else None
            if table is not None and ("use", _const_key(table)) not in found.stored:
                found.stored.add(("use", _const_key(table)))
                n = math.prod(table.sizes)
                found.uses.append({"role": "lookup", "dtype": dtype(inputs[0]), "dims": list(table.sizes),
                                   "bytes": n * ITEMSIZE.get(dtype(inputs[0]), 1),
                                   "scheme": "per row" if ty.startswith(LOOKUPS) else ""})
        if ty.startswith(LOOKUPS):  # ExecuTorch's own int8 table lookup: int8 weights, float rows out
            found.ops.append(OpInfo(ty, "weight_only", where))
            return
        if "quantize" in ty or "choose_qparams" in ty:
            self.qparams.update(t for t in inputs[1:] if t in consts)
            if "dequantize" in ty and inputs:
                dq_source.update({t: (inputs[0] in consts, dtype(inputs[0])) for t in outputs})
            return
        if ty in DATA_OPS:
            if inputs and inputs[0] in dq_source:  # carry the tag through view/permute copies
                dq_source.update({t: dq_source[inputs[0]] for t in outputs})
            return
        sources = [dq_source[t] for t in inputs if t in dq_source]
        if {dtype(t) for t in inputs if t not in consts} & {"int8", "uint8"}:
            mode = "int8"
        elif any(not from_const for from_const, _ in sources):
            mode = "qdq_float"  # activations come from a dequantize: fake-quant around a float kernel
        elif {dt for _, dt in sources} & INT8_FAMILY or {dtype(t) for t in inputs if t in consts} & INT8_FAMILY:
            mode = "weight_only"
        else:
            mode = "float"
        found.ops.append(OpInfo(ty, mode, where))

    def _constants(self) -> None:
        found, dtype = self.found, self.dtype
        for i in self.consts - self.qparams:
            t = self.V[i].val
            if _const_key(t) in found.stored:  # another method's constant too: stored once
                continue
            found.stored.add(_const_key(t))
            n = math.prod(t.sizes)
            nbytes = (n + 1) // 2 if dtype(i) == "uint4" else n * ITEMSIZE.get(dtype(i), 1)
            found.weights[dtype(i)] += nbytes
            name = (t.extra_tensor_info.fully_qualified_name if t.extra_tensor_info else None) or f"value{i}"
            found.tensors.append({"name": f"{self.plan.name}:{name}", "dtype": dtype(i), "shape": list(t.sizes),
                                  "bytes": nbytes})


def executed(ops: list[OpInfo], delegated: dict, macs: dict[str, int]) -> dict:
    """What the ExecuTorch runtime runs of a quantized program: the program as saved (it rewrites nothing when
    it loads one), the XNNPACK delegate's calls (`delegate_partitions`), the compute ops left to portable
    kernels between them (`outside_delegate`, by type and mode) and the delegated conv/matmul `macs`."""
    inside = tuple(delegated) + ("xnnpack",)
    kinds = collections.Counter((o.type, o.mode) for o in ops if not o.where.startswith(inside))
    return executed_view("pte", "ExecuTorch runtime, XNNPACK delegate", ops, macs=macs,
                         delegate_partitions=delegated.get("XnnpackBackend", {}).get("calls", 0),
                         outside_delegate=[f"{ty} ×{n} ({mode})" for (ty, mode), n in kinds.most_common()])


def _const_key(t) -> tuple:
    """Which stored data a constant tensor is: the program's constant buffer or its named data (both shared
    by every method)."""
    name = t.extra_tensor_info.fully_qualified_name if t.extra_tensor_info else None
    return ("buffer", t.data_buffer_idx) if t.data_buffer_idx > 0 else ("named", name)


def _io_shape(value, name: str, notes: list) -> dict:
    """A method input or output from its tensor metadata. A tensor of dynamic shape records its upper
    bounds, not which dimensions vary: its `dynamic` is None and it is marked `bounded`."""
    from executorch.exir.schema import Tensor, TensorShapeDynamism

    if not isinstance(value, Tensor):
        return io_entry(name, None)
    entry = io_entry(name, list(value.sizes))
    if value.shape_dynamism != TensorShapeDynamism.STATIC:
        notes.append("dynamic shapes: the program records upper bounds (≤), not which dimensions vary")
        entry.update(dynamic=None, bounded=True)
    return entry


def _xnnpack(blob: bytes, index: int, weights, tensors, ops, op_counts, macs, uses, stored) -> int:
    """Add one XNNPACK payload's weights, ops and conv/matmul MACs to the running totals, and its
    fully-connected weights to `uses`; returns its node count. `stored`: the named data counted already
    (another payload's, another method's)."""
    graph = _xnnpack_graph(blob)
    cdata = graph.get("constant_data", [])
    values, seen, quant = {}, set(), {}
    for v in graph.get("xvalues", []):
        u = v["xvalue_union"]
        tv = u["tensor_value"] if v["xvalue_union_type"] == "XNNQuantizedTensorValue" else u
        values[tv["id_out"]] = tv
        xdt = tv["datatype"].removeprefix("xnn_datatype_")
        buf = tv.get("constant_buffer_idx", 0)  # 0: not a constant
        key = ("named", cdata[buf].get("named_key")) if buf and buf < len(cdata) and cdata[buf].get("named_key") else None
        quant[tv["id_out"]] = (key or (index, buf), XNN_SCHEME.get(xdt, "").format(**(u.get("quant_params") or {})))
        if buf and buf not in seen and buf < len(cdata) and key not in stored:  # per-channel scales: other buffers
            seen.add(buf)
            if key:
                stored.add(key)
            size = int(cdata[buf]["size"])
            weights[XNN_DTYPE.get(xdt, xdt)] += size
            tensors.append({"name": f"xnnpack{index}:value{tv['id_out']}", "dtype": XNN_DTYPE.get(xdt, xdt),
                            "shape": tv.get("dims", []), "bytes": size})
    nodes = graph.get("xnodes", [])
    for ni, node in enumerate(nodes):
        ty = "xnnpack:" + node["xnode_union_type"]
        op_counts[ty] += 1
        if node["xnode_union_type"] in XNN_DATA_NODES:
            continue
        ids = [i for k, i in node["xnode_union"].items()
               if k.endswith("_id") and not k.startswith("output") and i != XNN_NO_VALUE and i in values]
        kinds = [(values[i]["datatype"].removeprefix("xnn_datatype_"), bool(values[i].get("constant_buffer_idx")))
                 for i in ids]
        acts = {dt for dt, const in kinds if not const}
        consts = {dt for dt, const in kinds if const}
        if acts & XNN_INT8_ACT:
            mode = "int8"
        elif acts & XNN_DYNAMIC_ACT:
            mode = "dynamic"
        elif {XNN_DTYPE.get(c) for c in consts} & INT8_FAMILY:
            mode = "weight_only"  # fp32 activations with int8/int4 weights
        else:
            mode = "float"
        ops.append(OpInfo(ty, mode, f"xnnpack{index}:node{ni}"))
        if node["xnode_union_type"] in XNN_MAC_NODES:
            u = node["xnode_union"]
            w = values.get(u.get("filter_id"))
            if w is not None and w.get("constant_buffer_idx") and ("use",) + quant[w["id_out"]][:1] not in stored:
                stored.add(("use",) + quant[w["id_out"]][:1])
                xdt = w["datatype"].removeprefix("xnn_datatype_")
                uses.append({"role": "matmul", "dtype": XNN_DTYPE.get(xdt, xdt), "dims": w.get("dims", []),
                             "bytes": int(cdata[w["constant_buffer_idx"]]["size"]), "scheme": quant[w["id_out"]][1]})
            dims = {k: values[u[k]].get("dims") for k in ("output_id", "filter_id", "input1_id") if u.get(k) in values}
            inner = (dims.get("input1_id") or [0])[-1] if "BatchMatrix" in node["xnode_union_type"] else None
            macs[f"xnnpack{index}:node{ni}"] = heavy_macs(dims.get("output_id"), dims.get("filter_id"), inner)
    return len(nodes)


def _xnnpack_graph(blob: bytes) -> dict:
    """Decode an XnnpackBackend payload to a dict with the packaged flatc and the XNNPACK schema."""
    import executorch.backends.xnnpack.serialization as xnn_serialization
    from executorch.backends.xnnpack.serialization.xnnpack_graph_serialize import XNNHeader
    # Private helper: it runs the flatc binary shipped in the executorch wheel; 1.5.1 has no public decoder.
    from executorch.exir._serialize._flatbuffer import _flatc_decompile

    if blob[4:8] == XNNHeader.EXPECTED_MAGIC:
        h = XNNHeader.from_bytes(blob[: XNNHeader.EXPECTED_LENGTH])
        blob = blob[h.flatbuffer_offset: h.flatbuffer_offset + h.flatbuffer_size]
    # else: legacy payload, the bare flatbuffer
    schema = importlib.resources.files(xnn_serialization).joinpath("schema.fbs").read_bytes()
    with tempfile.TemporaryDirectory() as d:
        paths = {name: os.path.join(d, name) for name in ("schema.fbs", "xnn.bin")}
        for name, data in (("schema.fbs", schema), ("xnn.bin", blob)):
            with open(paths[name], "wb") as f:
                f.write(data)
        _flatc_decompile(d, paths["schema.fbs"], paths["xnn.bin"])
        with open(os.path.join(d, "xnn.json")) as f:
            raw = f.read()
    # flatc writes bare inf/nan (e.g. the output_max of a ReLU clamp), which is not JSON.
    raw = re.sub(r"(:\s*)(-?)inf\b", r"\1\2Infinity", raw)
    raw = re.sub(r"(:\s*)-?nan\b", r"\1NaN", raw)
    return json.loads(raw)
