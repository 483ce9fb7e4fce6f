"""Inspect a .tflite file: constant bytes by dtype and the kernel mode of every compute op."""

from __future__ import annotations

import collections
import hashlib

import numpy as np

from edgekit.core.inspection import INT8_FAMILY, Inspection, OpInfo
from edgekit.targets.inspection import build, executed_view, heavy_macs, io_entry, lm_entry

# Data movement and (de)quantization: not counted as compute ops.
DATA_OPS = frozenset({
    "RESHAPE", "TRANSPOSE", "SQUEEZE", "EXPAND_DIMS", "QUANTIZE", "DEQUANTIZE", "CONCATENATION",
    "PACK", "UNPACK", "SLICE", "STRIDED_SLICE", "SPLIT", "SPLIT_V", "GATHER", "GATHER_ND", "PAD",
    "PADV2", "SHAPE", "CAST", "TILE", "BROADCAST_TO", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH",
    "REVERSE_V2", "MIRROR_PAD", "ZEROS_LIKE", "ONES_LIKE", "FILL",
})
FLOATS = frozenset({"float32", "float16", "bfloat16", "float64"})
MAC_OPS = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "BATCH_MATMUL", "CONV_3D"})
LOOKUP_TABLE = {"EMBEDDING_LOOKUP": 1, "GATHER": 0}  # the input slot of the table looked up
DUPLICATE_MIN_BYTES = 1024  # smaller equal constants (zero biases, scalars) are not worth a note


def inspect(path: str) -> Inspection:
    """The file at `path` as LiteRT reads it: its constants by dtype (`_constants`), every compute op with the
    kernel mode its operand types select (`_ops`), its inputs, outputs and signatures, and what the interpreter
    with its default XNNPACK delegate runs of a quantized file (`executed`)."""
    from ai_edge_litert.tools import flatbuffer_utils as fbu

    # read_model also loads buffers stored after the flatbuffer (offset/size, as in >2 GB models).
    # It may renumber buffers, so tensor.buffer is only meaningful against this object.
    model = _Model(fbu.read_model(path))
    weights, tensors, duplicates = _constants(model)
    ops, op_counts, uses, notes = _ops(model)
    main = model.model.subgraphs[0]
    io = {"inputs": [model.dtype(main.tensors[i]) for i in main.inputs],
          "outputs": [model.dtype(main.tensors[i]) for i in main.outputs]}
    shapes = {k: [_io_shape(main.tensors[i]) for i in idx] for k, idx in (("inputs", main.inputs), ("outputs", main.outputs))}
    if any(o.mode == "dynamic" for o in ops):
        notes.append("dynamic-range (hybrid) ops: int8/int4 weights, activations quantized on the fly, float outputs")
    if any(o.mode == "weight_only" for o in ops):
        notes.append("weight-only ops: int8 weights are dequantized and the kernel runs in float")
    if any(d in ("int8", "uint8") for d in io["inputs"]):
        notes.append("integer model inputs: callers must quantize with the input tensor's scale and zero point")
    ran = executed(path, ops, notes) if any(o.mode in ("int8", "int16") for o in ops) else None
    return build("tflite", weights=weights, ops=ops, op_counts=op_counts, tensors=tensors,
                 io_dtypes=io, notes=notes, io_shapes=shapes, duplicates=duplicates, executed=ran,
                 entry_points=_entry_points(model) or None, weight_uses=uses)


class _Model:
    """A .tflite as the flatbuffer object API reads it, with the names inspection reads off it."""

    def __init__(self, model):
        from ai_edge_litert import schema_py_generated as fb

        self.model = model
        self._custom = fb.BuiltinOperator.CUSTOM
        self._dtypes = {v: k.lower() for k, v in vars(fb.TensorType).items() if not k.startswith("_")}
        self._ops = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}

    def op_type(self, op) -> str:
        """The op's builtin name, or CUSTOM:<its code>."""
        oc = self.model.operatorCodes[op.opcodeIndex]
        code = max(oc.builtinCode, oc.deprecatedBuiltinCode)  # codes < 127 may sit in the deprecated field
        if code == self._custom:
            return "CUSTOM:" + (oc.customCode.decode() if oc.customCode else "?")
        return self._ops.get(code, str(code))

    def const_bytes(self, t) -> int:
        """The bytes of the constant tensor `t` holds (0: not a constant)."""
        b = self.model.buffers[t.buffer] if t.buffer < len(self.model.buffers) else None
        if b is None:
            return 0
        return len(b.data) if b.data is not None else int(b.size or 0)

    def dtype(self, t) -> str:
        """The tensor's element type, lower case ("int8", "float32")."""
        return self._dtypes.get(t.type, str(t.type))

    def dequantized_int8_const(self, p, tensors) -> bool:
        """Whether `p` (the op producing an input, or None) is a DEQUANTIZE of an int8-family constant."""
        if p is None or self.op_type(p) != "DEQUANTIZE":
            return False
        src = tensors[p.inputs[0]]
        return bool(self.const_bytes(src)) and self.dtype(src) in INT8_FAMILY


def _constants(model: _Model) -> tuple[collections.Counter, list[dict], list[dict]]:
    """(constant bytes by dtype, each constant buffer's tensor once, the constants stored more than once: the
    same values up to sign, each at least DUPLICATE_MIN_BYTES)."""
    weights: collections.Counter = collections.Counter()
    seen: set[int] = set()
    by_content: dict = collections.defaultdict(list)
    tensors = []
    for sg in model.model.subgraphs:
        for t in sg.tensors:
            n = model.const_bytes(t)
            if not n or t.buffer in seen:  # several tensors may share one buffer: count it once
                continue
            seen.add(t.buffer)
            data = model.model.buffers[t.buffer].data
            if data is not None and n >= DUPLICATE_MIN_BYTES:
                by_content[(model.dtype(t), _values_key(data, model.dtype(t)))].append((t.name.decode(), n))
            weights[model.dtype(t)] += n
            tensors.append({"name": t.name.decode(), "dtype": model.dtype(t),
                            "shape": list(t.shape if t.shape is not None else []), "bytes": n})
    duplicates = [{"bytes": copies[0][1], "tensors": [name for name, _ in copies]}
                  for copies in by_content.values() if len(copies) > 1]
    return weights, tensors, duplicates


def _ops(model: _Model) -> tuple[list[OpInfo], collections.Counter, list[dict], list[str]]:
    """(every compute op with its kernel mode, every op's count by type, the weights each matmul or lookup
    reads once with its role and scheme, notes)."""
    ops, op_counts, notes = [], collections.Counter(), []
    uses, used = [], {}  # used: the buffers of `uses` → the role they were counted in
    for si, sg in enumerate(model.model.subgraphs):
        T = sg.tensors
        producer = {o: op for op in sg.operators for o in op.outputs}
        for oi, op in enumerate(sg.operators):
            ty = model.op_type(op)
            op_counts[ty] += 1
            read = op.inputs[LOOKUP_TABLE[ty]] if ty in LOOKUP_TABLE else op.inputs[1] if ty in MAC_OPS else -1
            role = "lookup" if ty in LOOKUP_TABLE else "matmul"
            if read >= 0 and read in producer and model.op_type(producer[read]) == "DEQUANTIZE":  # weight-only: the stored one
                read = producer[read].inputs[0]
            if read >= 0 and model.const_bytes(T[read]) and T[read].buffer not in used:
                used[T[read].buffer] = role
                uses.append({"role": role, "dtype": model.dtype(T[read]),
                             "dims": list(T[read].shape), "bytes": model.const_bytes(T[read]),
                             "scheme": _scheme(T[read].quantization)})
            elif read >= 0 and used.get(T[read].buffer) == "lookup" and role == "matmul":  # a tied LM head
                used[T[read].buffer] = "both"
                uses.append({"role": "matmul", "dtype": model.dtype(T[read]), "dims": list(T[read].shape), "bytes": 0,
                             "scheme": "shared with the embedding"})
            if ty not in DATA_OPS:
                ops.append(OpInfo(ty, _mode(model, op, T, producer), f"subgraph{si}:op{oi}"))
        if any(model.op_type(op) == "STABLEHLO_COMPOSITE" for op in sg.operators):
            notes.append("STABLEHLO_COMPOSITE ops found: their decomposition subgraphs are counted as well")
    return ops, op_counts, uses, notes


def _mode(model: _Model, op, T, producer) -> str:
    """The kernel a compute op runs, from its operands' types: int8, int16, dynamic (hybrid: float activations,
    int8/int4 weights), weight_only (a DEQUANTIZE of an int8 constant feeds a float kernel) or float."""
    inputs = [i for i in op.inputs if i >= 0]  # -1: optional input left out
    acts = {model.dtype(T[i]) for i in inputs if not model.const_bytes(T[i])}
    consts = {model.dtype(T[i]) for i in inputs if model.const_bytes(T[i])}
    if acts & {"int8", "uint8"}:
        return "int8"
    if "int16" in acts:
        return "int16"
    if (acts & FLOATS or not acts) and consts & INT8_FAMILY:
        return "dynamic"
    if any(model.dequantized_int8_const(producer.get(i), T) for i in inputs):
        return "weight_only"
    return "float"


def _entry_points(model: _Model) -> dict:
    """Each signature (a decoder LM's prefill and decode) as lm_view reads it."""
    entry_points = {}
    for sig in model.model.signatureDefs or []:
        sg = model.model.subgraphs[sig.subgraphIndex]
        sides = {k: [sg.tensors[m.tensorIndex] for m in sorted(maps or [], key=lambda m: m.name)]
                 for k, maps in (("inputs", sig.inputs), ("outputs", sig.outputs))}
        entry_points[sig.signatureKey.decode()] = lm_entry({k: [model.dtype(t) for t in ts] for k, ts in sides.items()},
                                                          {k: [_io_shape(t) for t in ts] for k, ts in sides.items()})
    return entry_points


def _scheme(q) -> str:
    """How a constant is quantized, from its quantization parameters: blocks, per channel or per tensor."""
    if q is not None and q.details is not None and hasattr(q.details, "blockSize"):  # its scales are a tensor
        return f"blocks of {q.details.blockSize}"
    if q is None or q.scale is None or not len(q.scale):
        return ""
    return "per channel" if len(q.scale) > 1 else "per tensor"


def executed(path: str, ops: list[OpInfo], notes: list) -> dict | None:
    """What LiteRT's interpreter runs of a quantized file: its ops as read above, and those its default XNNPACK
    delegate does not take (`outside_delegate`, by type and mode): each runs in the interpreter's own kernel and
    splits the delegated graph (`delegate_partitions`), as an int8 HARD_SWISH does. An op is outside when none
    of its outputs is a delegate's and one is read by a delegate or by another op outside, or is the model's
    output. None, with a note, when the interpreter cannot open the file."""
    from ai_edge_litert.interpreter import Interpreter

    try:
        interp = Interpreter(model_path=path, num_threads=1)
        interp.allocate_tensors()
        details = interp._get_ops_details()  # the only view of the delegated graph its Python API gives
        outputs = {d["index"] for d in interp.get_output_details()}
        shapes = {t["index"]: [int(d) for d in t["shape"]] for t in interp.get_tensor_details()}
    except Exception as e:  # noqa: BLE001 - the file's own reading stands; say why this part is missing
        notes.append(f"what LiteRT runs could not be read: {type(e).__name__}: {str(e)[:200]}")
        return None
    delegates = [d for d in details if d["op_name"] == "DELEGATE"]
    delegated = {t for d in delegates for t in d["outputs"]}
    read = {t for d in delegates for t in d["inputs"]} | outputs
    outside = []
    for d in reversed([d for d in details if d["op_name"] != "DELEGATE"]):  # an op's readers come after it
        if not set(d["outputs"]) & delegated and set(d["outputs"]) & read:
            outside.append(d["index"])
            read |= {t for t in d["inputs"] if t >= 0}
    by_place = {o.where: o for o in ops}
    kinds = collections.Counter((by_place[w].type, by_place[w].mode) for i in sorted(outside)
                                if (w := f"subgraph0:op{i}") in by_place)
    return executed_view("tflite", "LiteRT interpreter, default XNNPACK delegate", ops, macs=_macs(details, shapes),
                         delegate_partitions=len(delegates),
                         outside_delegate=[f"{ty} ×{n} ({mode})" for (ty, mode), n in kinds.most_common()])


def _macs(details: list[dict], shapes: dict[int, list[int]]) -> dict[str, int]:
    """The multiply-accumulates of each conv, depthwise conv, fully-connected and batch matmul, by location."""
    out = {}
    for d in details:
        name, ins, outs = d["op_name"], [int(i) for i in d["inputs"]], [int(o) for o in d["outputs"]]
        if not outs or name not in MAC_OPS or len(ins) < 2 or ins[1] < 0:
            continue
        shape = shapes.get(outs[0])
        inner = shapes.get(ins[0], [0])[-1] if name == "BATCH_MATMUL" else None
        out[f"subgraph0:op{d['index']}"] = heavy_macs(shape, shapes.get(ins[1]), inner)
    return out


def _io_shape(t) -> dict:
    """A model input or output: its shape, a -1 of its shape signature (a dynamic dimension) as None."""
    shape = list(t.shape if t.shape is not None else [])
    signature = list(t.shapeSignature) if t.shapeSignature is not None and len(t.shapeSignature) else shape
    dims = [None if s < 0 else int(s) for s in signature] if len(signature) == len(shape) else shape
    name = t.name.decode() if isinstance(t.name, bytes) else str(t.name)
    return io_entry(name, dims)



def _values_key(data, dtype: str) -> bytes:
    """A key equal for two constants holding the same values up to sign and layout: litert-torch lowers a
    PReLU after a Linear to two FULLY_CONNECTED ops, storing the weight a second time negated. The hash of
    the magnitudes, sorted."""
    raw = bytes(data)
    try:
        values = np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<"))
    except (TypeError, ValueError):  # a type numpy does not read (int4, string): its bytes
        values = np.frombuffer(raw, dtype=np.uint8)
    return hashlib.sha256(np.sort(np.abs(values)).tobytes()).digest()
