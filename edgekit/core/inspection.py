"""What a reader found in an artifact file (edgekit.targets.inspection reads the files): its weights by dtype,
its compute ops and the kernel mode each asks for, its inputs and outputs, and what it needs from its runtime.
Data only, so that a verdict, a result and the cache carry it typed; JSON at process boundaries and in output.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

MODES = ("int8", "int16", "dynamic", "weight_only", "qdq_float", "float")
INT8_MODES = frozenset({"int8", "dynamic"})
INT8_FAMILY = frozenset({"int8", "uint8", "int4", "uint4"})
TOP_TENSORS = 5
JSON_OPS_LIMIT = 64  # to_json lists every op only up to this many
# a convolution or a linear; a linear as torch names it (aten::linear), not ONNX Runtime's QLinear* elementwise
# kernels (QLinearAdd, QLinearMul)
HEAVY_OPS = re.compile(r"conv|matmul|gemm|fully_?connected|batch_?mat_?mul|batch_?matrix_?multiply|addmm|\bmm\b|"
                       r"(?<![a-z])linear", re.I)


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



def duplicate_text(duplicate: dict) -> str:
    """One line for a user: a constant stored more than once (up to sign), and what that costs."""
    names = ", ".join(duplicate["tensors"][:3]) + (", …" if len(duplicate["tensors"]) > 3 else "")
    copies = len(duplicate["tensors"])
    return (f"the same {duplicate['bytes']:,}-byte constant (up to sign) is stored {copies} times ({names}): "
            f"{duplicate['bytes'] * (copies - 1):,} bytes the converter could have shared")


def executed_text(ran: dict, delegate: bool = True) -> str:
    """One line for a user: the int8 shares as the runtime runs the artifact (`Inspection.executed`), its float
    ops and, where the runtime delegates (unless `delegate` is False), what it leaves outside."""
    macs = f" ({ran['int8_mac_share']:.1%} of their MACs)" if ran.get("int8_mac_share") is not None else ""
    text = (f"{ran['int8_compute_share']:.1%} int8 of {ran['compute_ops']} compute ops; "
            f"{ran['int8_heavy_op_share']:.1%} of conv/matmul ops{macs}; float: {', '.join(ran['float_ops']) or 'none'} "
            f"({ran['runtime']})")
    if delegate and "outside_delegate" in ran:
        parts = ran["delegate_partitions"]
        text += (f"; outside the delegate: {', '.join(ran['outside_delegate']) or 'none'}, the delegated graph in "
                 f"{parts} part{'s' if parts != 1 else ''}")
    return text


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
    ops: tuple[OpInfo, ...]  # compute ops only; empty when read back from a document that did not list them
    compute_ops: int  # how many compute ops the file has (len(ops) when they are all listed)
    ops_by_mode: dict[str, int]  # compute ops by the kernel mode they ask for (MODES)
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
    # what the runtime runs after its own graph optimizations, where the reader can ask it (onnx): runtime,
    # compute_ops, ops_by_mode, int8_compute_share, int8_heavy_op_share, float_ops
    executed: dict | None = None
    # a decoder LM's entry points, cache and weight groups, read from the file (edgekit.targets.inspection.lm_view);
    # None when the file's inputs and outputs are not a decoder LM's
    lm: dict | None = None

    @property
    def duplicated_bytes(self) -> int:
        """Bytes the file would save by storing each duplicated constant once."""
        return sum(d["bytes"] * (len(d["tensors"]) - 1) for d in self.duplicates)

    @property
    def a16w8(self) -> bool:
        """Whether no compute op asks for int8 kernels and some ask for int16 activations: int16 activations
        everywhere by design (`--int16-activations`), held to its int8 weights, not to int8 compute."""
        return self.ops_by_mode.get("int16", 0) > 0 and not self.ops_by_mode.get("int8", 0)

    def weight_only_by_design(self, declared: bool = False) -> bool:
        """Whether every conv and matmul op that does not run int8 runs float arithmetic on int8 weights (or at
        int16 activations), and some do, in a file that keeps them so on purpose: an ONNX or ORT file (onnxruntime's
        static quantizer never writes a weight-only op), or one whose converter `declared` the layers it kept float
        (`ArtifactMeta.kept_float`: a level path from a loud-and-quiet input, edgekit.calibration.methods.spread_db).
        Such layers are held to their int8 weights, not to int8 compute. Otherwise a weight-only conv can be a
        quantizer's miss (a .tflite conv left to a float kernel), which the compute gate keeps catching. Read from
        `float_ops` ("Conv ×4 (weight_only)"), which every inspection keeps."""
        if self.format not in ("onnx", "ort") and not declared:
            return False
        heavy = [entry.rsplit(" (", 1) for entry in self.float_ops if HEAVY_OPS.search(entry.split(" ×")[0])]
        modes = {parts[1].rstrip(")") if len(parts) == 2 else "float" for parts in heavy}
        return "weight_only" in modes and modes <= {"weight_only", "int16"}

    @property
    def precision(self) -> str:
        """The precision the weights show: int8, fp16 or fp32 (int8-dynamic looks int8)."""
        if self.int8_weight_share >= 0.5:
            return "int8"
        total = sum(self.weight_bytes_by_dtype.values())
        half = sum(n for d, n in self.weight_bytes_by_dtype.items() if d.lower() in ("float16", "half", "bfloat16"))
        return "fp16" if total and half / total >= 0.5 else "fp32"

    @property
    def float_weight_bytes(self) -> int:
        """Bytes of float constants (float32, float16, bfloat16): what int8 did not reach."""
        return sum(n for d, n in self.weight_bytes_by_dtype.items() if d.startswith(("float", "bfloat")))

    def to_json(self, everything: bool = False) -> dict:
        """The form verdicts, results and `edgekit inspect` keep: counts by mode instead of the ops, which are
        listed only up to JSON_OPS_LIMIT (`everything`: always, for a process boundary); `needs` as
        "runtime_needs", `duplicates` as "duplicated_constants"."""
        out = {
            "format": self.format,
            "weight_bytes_by_dtype": dict(self.weight_bytes_by_dtype),
            "int8_weight_share": self.int8_weight_share,
            "int8_compute_share": self.int8_compute_share,
            "int8_heavy_op_share": self.int8_heavy_op_share,
            "compute_ops": self.compute_ops,
            "ops_by_mode": dict(self.ops_by_mode),
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
        if self.executed is not None:
            out["executed"] = dict(self.executed)
        if self.lm is not None:
            out["lm"] = self.lm
        if everything or self.compute_ops <= JSON_OPS_LIMIT:
            out["ops"] = [asdict(o) for o in self.ops]
        return out

    @classmethod
    def from_json(cls, d: dict) -> "Inspection":
        """Inverse of `to_json`: from a child process, the cache or a result document. A document that did not
        list its ops keeps their counts (`compute_ops`, `ops_by_mode`) and no OpInfo."""
        return cls(
            format=d["format"], weight_bytes_by_dtype=dict(d["weight_bytes_by_dtype"]),
            int8_weight_share=d["int8_weight_share"], ops=tuple(OpInfo(**o) for o in d.get("ops", ())),
            compute_ops=d["compute_ops"], ops_by_mode=dict(d["ops_by_mode"]),
            int8_compute_share=d["int8_compute_share"], int8_heavy_op_share=d["int8_heavy_op_share"],
            float_ops=tuple(d["float_ops"]), op_counts=dict(d["op_counts"]),
            largest_tensors=tuple({**t, "shape": tuple(t["shape"])} for t in d["largest_tensors"]),
            io_dtypes={k: list(v) for k, v in d["io_dtypes"].items()}, delegated=d["delegated"],
            notes=tuple(d["notes"]), io_shapes={k: [dict(e) for e in v] for k, v in d["io_shapes"].items()},
            needs=tuple(RuntimeNeed(n["id"], n["what"], tuple(n["modules"]), tuple(n["ops"]))
                        for n in d["runtime_needs"]),
            duplicates=tuple({"bytes": x["bytes"], "tensors": list(x["tensors"])} for x in d["duplicated_constants"]),
            executed=d.get("executed"), lm=d.get("lm"),
        )


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
