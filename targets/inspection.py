"""Did it really quantize? Read an artifact and report which weights and which kernels are int8.

A quantized file can still run float kernels: weight-only recipes dequantize before every op, and a
PT2E-quantized .pte without a delegate runs float portable kernels between quantize/dequantize.
`inspect_artifact` reads the file itself and reports two numbers:

- `int8_weight_share`: bytes of int8/uint8/int4/uint4 constants over all constant bytes
  (quantization scales and zero points are left out of both).
- `int8_compute_share`: share of compute ops (data movement and quantize/dequantize excluded) whose
  kernel takes int8 activations (`int8`) or quantizes float activations on the fly (`dynamic`).
- `int8_heavy_op_share`: the same share over the multiply-accumulate ops only (convolutions,
  matrix multiplies, fully-connected), where nearly all of the arithmetic is. Elementwise ops left
  in float (activations, squeeze-excitation gates) are common in real int8 models; float
  convolutions are not.

The rules are static: they say what the graph asks for, not which kernel a runtime finally picks.
Each reader also reads the file's input and output shapes (`io_shapes`): a dynamic dimension is None
or its symbolic name in `shape`, and its index is listed in `dynamic`; a shape the file does not
record is None (`shape` and `dynamic` both), said in the notes.
Importing this module is cheap; each format's reader imports its framework only when called.
"""

from __future__ import annotations

import collections
import re
from dataclasses import asdict, dataclass, field
from typing import Iterable

from edgekit.core.errors import BadInput
from edgekit.targets import by_format, load

MODES = ("int8", "int16", "dynamic", "weight_only", "qdq_float", "float")
INT8_MODES = frozenset({"int8", "dynamic"})
INT8_FAMILY = frozenset({"int8", "uint8", "int4", "uint4"})
TOP_TENSORS = 5
JSON_OPS_LIMIT = 64  # to_json lists every op only up to this many
HEAVY_OPS = re.compile(r"conv|matmul|gemm|fully_?connected|batch_?mat_?mul|addmm|\bmm\b|linear", re.I)


@dataclass(frozen=True)
class OpInfo:
    """One compute op as a reader classified it; its `mode` says which kernel the graph asks for, and so
    whether it counts toward the int8 shares."""

    type: str
    mode: str  # one of MODES
    where: str  # subgraph/node/delegate location, for humans

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"unknown op mode {self.mode!r}")

    @property
    def int8(self) -> bool:
        """Whether it counts as int8 compute: int8 activations, or float ones quantized on the fly (`dynamic`).
        Weight-only, int16 and float between quantize/dequantize do not."""
        return self.mode in INT8_MODES


@dataclass(frozen=True)
class RuntimeNeed:
    """Something an app must ship beside the runtime's default build for the artifact to load."""

    id: str
    what: str  # what the app must add, for a user
    modules: tuple[str, ...] = ()  # what the verifier imports to provide it; () if the runtime has it or cannot
    ops: tuple[str, ...] = ()  # the artifact's ops that need it


# ExecuTorch op namespaces whose kernels a default runtime (portable kernels + XNNPACK) registers.
PTE_DEFAULT_NAMESPACES = frozenset({"aten", "dim_order_ops", "executorch_prim", "delegate", "xnnpack"})


def runtime_needs(fmt: str, op_counts: dict[str, int]) -> tuple[RuntimeNeed, ...]:
    """What beyond the runtime a default app has the artifact's ops need (op names as the readers give them:
    .pte `namespace::op`, .tflite `CUSTOM:code`, .onnx/.ort `domain:op` outside the default domain)."""
    by_need: dict[tuple, list[str]] = {}
    for op in op_counts:
        need = None
        if fmt == "pte" and "::" in op and op.split("::")[0] not in PTE_DEFAULT_NAMESPACES:
            ns = op.split("::")[0]
            need = (("executorch-quantized-kernels", "ExecuTorch's quantized kernel library (quantized_ops_lib; "
                     "in Python, import executorch.kernels.quantized)", ("executorch.kernels.quantized",))
                    if ns == "quantized_decomposed" else
                    (f"executorch-kernels:{ns}", f"a kernel library registering the {ns}:: operators", ()))
        elif fmt == "tflite" and op.startswith("CUSTOM:"):
            code = op[len("CUSTOM:"):]
            need = (("tflite-flex", "the TensorFlow Lite Flex delegate (select TensorFlow ops)", ())
                    if code.startswith("Flex") else (f"tflite-custom:{code}", f"the custom operator {code}", ()))
        elif fmt in ("onnx", "ort") and ":" in op:
            domain = op.split(":")[0]
            need = (("onnxruntime-contrib-ops", "ONNX Runtime's contrib operators (com.microsoft; in the standard "
                     "packages, to be included in a reduced build)", ()) if domain == "com.microsoft" else
                    (f"onnx-domain:{domain}", f"a custom operator library for the ONNX domain {domain}", ()))
        if need:
            by_need.setdefault(need, []).append(op)
    return tuple(RuntimeNeed(id, what, modules, tuple(ops)) for (id, what, modules), ops in by_need.items())


def duplicate_text(duplicate: dict) -> str:
    """One line for a user: a constant stored more than once (up to sign), and what that costs."""
    names = ", ".join(duplicate["tensors"][:3]) + (", …" if len(duplicate["tensors"]) > 3 else "")
    copies = len(duplicate["tensors"])
    return (f"the same {duplicate['bytes']:,}-byte constant (up to sign) is stored {copies} times ({names}): "
            f"{duplicate['bytes'] * (copies - 1):,} bytes the converter could have shared")


def need_text(need: RuntimeNeed) -> str:
    """One line for a user: what the app must add, and for which ops."""
    return f"needs {need.what} beyond the default runtime, for {', '.join(need.ops)}"


@dataclass(frozen=True)
class Inspection:
    """What a reader found in an artifact file (see the module's docstring): static, from the file alone. A share
    with nothing to count (no weights, no compute ops) is 0.0."""

    format: str
    weight_bytes_by_dtype: dict[str, int]
    int8_weight_share: float
    ops: tuple[OpInfo, ...]  # compute ops only
    int8_compute_share: float
    int8_heavy_op_share: float
    float_ops: tuple[str, ...]  # e.g. "MAX_POOL_2D ×1", "CONV_2D ×2 (weight_only)"
    op_counts: dict[str, int]  # every op, data movement and (de)quantize included
    largest_tensors: tuple[dict, ...]  # constant tensors: name, dtype, shape, bytes
    io_dtypes: dict  # {"inputs": [dtype, ...], "outputs": [dtype, ...]}
    delegated: dict | None  # pte only: {backend id: {"calls": n, "ops": n or None}}
    notes: tuple[str, ...]
    # {"inputs": [{"name", "shape", "dynamic"}, ...], "outputs": [...]}: see io_entry
    io_shapes: dict = field(default_factory=lambda: {"inputs": [], "outputs": []})
    needs: tuple[RuntimeNeed, ...] = ()  # what the artifact needs beyond the runtime a default app has
    # the same constant bytes stored more than once: [{"bytes": size of one copy, "tensors": [names]}]
    duplicates: tuple[dict, ...] = ()

    @property
    def duplicated_bytes(self) -> int:
        """Bytes the file would save by storing each duplicated constant once."""
        return sum(d["bytes"] * (len(d["tensors"]) - 1) for d in self.duplicates)

    def to_json(self) -> dict:
        """The form verdicts, results and `edgekit inspect` keep: counts by mode instead of the ops, which are
        listed only up to JSON_OPS_LIMIT; `needs` as "runtime_needs", `duplicates` as "duplicated_constants"."""
        out = {
            "format": self.format,
            "weight_bytes_by_dtype": dict(self.weight_bytes_by_dtype),
            "int8_weight_share": self.int8_weight_share,
            "int8_compute_share": self.int8_compute_share,
            "int8_heavy_op_share": self.int8_heavy_op_share,
            "compute_ops": len(self.ops),
            "ops_by_mode": dict(collections.Counter(o.mode for o in self.ops)),
            "float_ops": list(self.float_ops),
            "op_counts": dict(self.op_counts),
            "largest_tensors": [{**t, "shape": list(t["shape"])} for t in self.largest_tensors],
            "io_dtypes": {k: list(v) for k, v in self.io_dtypes.items()},
            "io_shapes": {k: [dict(e) for e in v] for k, v in self.io_shapes.items()},
            "delegated": self.delegated,
            "notes": list(self.notes),
            "runtime_needs": [{**asdict(n), "modules": list(n.modules), "ops": list(n.ops)} for n in self.needs],
            "duplicated_constants": [{"bytes": d["bytes"], "tensors": list(d["tensors"])} for d in self.duplicates],
            "duplicated_bytes": self.duplicated_bytes,
        }
        if len(self.ops) <= JSON_OPS_LIMIT:
            out["ops"] = [asdict(o) for o in self.ops]
        return out


def build(fmt: str, *, weights: dict[str, int], ops: list[OpInfo], op_counts: dict[str, int],
          tensors: Iterable[dict], io_dtypes: dict, delegated: dict | None = None,
          notes: Iterable[str] = (), io_shapes: dict | None = None, duplicates: Iterable[dict] = ()) -> Inspection:
    """The shared tail of every reader: shares, float-op summary and the largest tensors."""
    total = sum(weights.values())
    low = sum(n for dt, n in weights.items() if dt in INT8_FAMILY)
    groups = collections.Counter((o.type, o.mode) for o in ops if not o.int8)  # keeps first-seen order
    float_ops = tuple(f"{ty} ×{n}" + ("" if mode == "float" else f" ({mode})") for (ty, mode), n in groups.items())
    largest = sorted(tensors, key=lambda t: -t["bytes"])[:TOP_TENSORS]
    heavy = [o for o in ops if HEAVY_OPS.search(o.type)]
    return Inspection(
        format=fmt,
        weight_bytes_by_dtype=dict(sorted(weights.items(), key=lambda kv: -kv[1])),
        int8_weight_share=round(low / total, 4) if total else 0.0,
        ops=tuple(ops),
        int8_compute_share=round(sum(o.int8 for o in ops) / len(ops), 4) if ops else 0.0,
        int8_heavy_op_share=round(sum(o.int8 for o in heavy) / len(heavy), 4) if heavy else 0.0,
        float_ops=float_ops,
        op_counts=dict(collections.Counter(op_counts).most_common()),
        largest_tensors=tuple({**t, "shape": tuple(t["shape"])} for t in largest),
        io_dtypes={k: list(v) for k, v in io_dtypes.items()},
        delegated=delegated,
        notes=tuple(dict.fromkeys(notes)),
        io_shapes={k: list((io_shapes or {}).get(k, [])) for k in ("inputs", "outputs")},
        needs=runtime_needs(fmt, op_counts),
        duplicates=tuple(sorted(duplicates, key=lambda d: -d["bytes"])),
    )


def io_entry(name: str, dims) -> dict:
    """One input or output of `io_shapes`: `dims` are ints, with a dynamic one as None or its symbolic
    name; `dynamic` lists the indices of the dynamic ones. `dims` None: the file does not record the shape."""
    if dims is None:
        return {"name": name, "shape": None, "dynamic": None}
    shape = [d if d is None or isinstance(d, str) else int(d) for d in dims]
    return {"name": name, "shape": shape, "dynamic": [i for i, d in enumerate(shape) if not isinstance(d, int)]}


def shape_text(shape) -> str:
    """`1×3×?×?` (a dynamic dimension as ? or its symbol), `scalar`, or `?` for a shape not recorded."""
    if shape is None:
        return "?"
    return "×".join("?" if d is None else str(d) for d in shape) or "scalar"


def shapes_text(io_shapes: dict | None) -> str:
    """The compact form of `io_shapes`: `1×1×8×8 → 1×10` (inputs, then outputs, each comma-separated)."""
    if not io_shapes or not (io_shapes.get("inputs") or io_shapes.get("outputs")):
        return "—"
    side = {k: ", ".join(("≤" if e.get("bounded") else "") + shape_text(e["shape"]) for e in io_shapes.get(k, []))
            or "—" for k in ("inputs", "outputs")}
    return f"{side['inputs']} → {side['outputs']}"


def inspect_artifact(fmt: str, path: str) -> Inspection:
    """Inspect the artifact at `path` with its target's reader; `fmt` is a target format id."""
    try:
        target = by_format(fmt)
    except KeyError:
        raise BadInput(f"cannot inspect format {fmt!r}", fix="use tflite, onnx, pte, ort or ptl") from None
    return load(target.inspector)(path)


def precision_from_inspection(weight_bytes_by_dtype: dict[str, int], int8_weight_share: float) -> str:
    """The precision an artifact's weights show: int8, fp16 or fp32 (int8-dynamic looks int8)."""
    total = sum(weight_bytes_by_dtype.values())
    if int8_weight_share >= 0.5:
        return "int8"
    half = sum(n for d, n in weight_bytes_by_dtype.items() if d.lower() in ("float16", "half", "bfloat16"))
    if total and half / total >= 0.5:
        return "fp16"
    return "fp32"
