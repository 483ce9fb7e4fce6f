"""Which integer types a static int8 ONNX model is quantized to: chosen by what ONNX Runtime runs, on this host.

ONNX Runtime's CPU provider fuses DequantizeLinear → op → QuantizeLinear into an integer kernel only where the
types line up with its kernels. On x86-64 it converts int8 activations to uint8 before fusing, and a tensor
read by two ops (a conv's output feeding a SiLU, x · sigmoid(x); a residual add's output) is left int8: the
conv writing it then runs in float between a dequantize and a quantize. Written uint8 in the file, every conv
fuses. Which pair is fastest therefore depends on the model and the CPU, so each pair this CPU runs without
saturating is made and read as the runtime runs it (`edgekit.targets.onnx.inspect.executed`); pairs are kept
within ACCURACY_DB of the most accurate on the calibration samples, and ranked by the share of compute ops the
runtime runs as int8 kernels, then by how few ops it runs in all (each quantize, dequantize or layout change is
one more pass over a tensor). Pairs the runtime runs as the same graph are one: the first is kept (uint8 × int8,
what ONNX Runtime converts int8 activations to on x86-64 anyway), so the choice is the same on every run. Pairs
that rank the same with different graphs are timed, one thread, in turns, and the fastest kept (`choose`).
`--optimize accuracy` keeps the most accurate, `--optimize size` the smallest file.

Where the kept pair still runs ops with no int8 kernel (float between a dequantize and a quantize: HardSigmoid
in ONNX Runtime 1.32), the pair is timed against the float model it was quantized from, in turns; an int8 model
no faster than its float one is recorded as such (`vs_fp32`), with the ops, and `convert` says so: such a
runtime has no faster int8 form of the model, and its fp32 artifact is the one to keep for latency.

Where ONNX Runtime's int8 products saturate (x86-64 without VNNI, edgekit.core.cpu), only uint8 × uint8 is
made, the remedy its quantization guide gives.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from edgekit.core.cpu import int8_products_saturate
from edgekit.core.drift import sqnr_db
from edgekit.targets.latency import samples
from edgekit.targets.onnx.inspect import executed
from edgekit.targets.onnx.runner import session

ACCURACY_DB = 1.0  # a pair this much less accurate than the best (SQNR on the calibration samples) is dropped
SAMPLES = 8  # calibration samples the pairs are compared on
ROUNDS = 3  # timed in turns, each pair once per round


@dataclass(frozen=True)
class Pair:
    """Activation and weight types of a static int8 ONNX model."""

    activations: str  # "int8" | "uint8"
    weights: str

    @property
    def name(self) -> str:
        """'uint8 × int8': how messages name the pair."""
        return f"{self.activations} × {self.weights}"

    def quant_types(self):
        """onnxruntime's (activation_type, weight_type)."""
        from onnxruntime.quantization import QuantType

        types = {"int8": QuantType.QInt8, "uint8": QuantType.QUInt8}
        return types[self.activations], types[self.weights]


def candidates(wide_activations: bool) -> list[Pair]:
    """The pairs worth making on this CPU. With every activation int16 (`wide_activations`) the activation type
    is not used, so one pair is made."""
    if int8_products_saturate():
        return [Pair("uint8", "uint8")]
    pairs = [Pair("uint8", "int8"), Pair("int8", "int8")]
    return pairs[1:] if wide_activations else pairs


@dataclass
class Candidate:
    """One pair as made and measured: its file, size, ONNX Runtime's executed int8 compute share, SQNR against
    the float model on the calibration samples, its median latency when timed."""

    pair: Pair
    path: Path
    bytes: int = 0
    executed: dict = field(default_factory=dict)  # edgekit.targets.onnx.inspect.executed ({} when unread)
    sqnr_db: float | None = None
    latency_ms: float | None = None

    @property
    def int8_compute_share(self) -> float | None:
        """The share of compute ops ONNX Runtime runs as int8 kernels (None when not read)."""
        return self.executed.get("int8_compute_share")

    def to_json(self, chosen: bool) -> dict:
        """A row of `int8_types.candidates`."""
        return {"activations": self.pair.activations, "weights": self.pair.weights, "bytes": self.bytes,
                "int8_compute_share_as_run": self.int8_compute_share,
                "sqnr_db": None if self.sqnr_db is None else round(self.sqnr_db, 2),
                "latency_ms": None if self.latency_ms is None else round(self.latency_ms, 4), "chosen": chosen}


def choose(made: list[Candidate], float_model: Path, feeds: list[dict], optimize: str) -> tuple[Candidate, str]:
    """(the candidate to keep, why), after measuring `made` (see the module's docstring). `feeds` are
    calibration inputs by graph input name, `float_model` the model they were quantized from."""
    reference = _outputs(float_model, feeds, optimized=False)
    for c in made:
        c.bytes = c.path.stat().st_size
        c.executed = executed(str(c.path), []) or {}
        c.sqnr_db = sqnr_db(reference, _outputs(c.path, feeds))
    best = max(c.sqnr_db for c in made)
    if optimize == "accuracy":
        pick = max(made, key=lambda c: c.sqnr_db)
        return pick, f"the most accurate on {len(feeds)} calibration samples ({pick.sqnr_db:.1f} dB)"
    accurate = [c for c in made if c.sqnr_db >= best - ACCURACY_DB]
    if optimize == "size":
        pick = min(accurate, key=lambda c: (c.bytes, -c.sqnr_db))
        return pick, "the smallest file"
    rank = {id(c): (-(c.int8_compute_share or 0.0), c.executed.get("runtime_ops", 0)) for c in accurate}
    top = min(rank.values())
    finalists: list[Candidate] = []
    for c in accurate:  # in candidates' order; a pair the runtime runs as the same graph as a finalist adds nothing
        if rank[id(c)] == top and not any(_same_graph(c, f) for f in finalists):
            finalists.append(c)
    if len(finalists) == 1:
        pick = finalists[0]
        others = ", ".join(f"{c.pair.name} {c.int8_compute_share or 0:.0%} of {c.executed.get('compute_ops', '?')} in "
                           f"{c.executed.get('runtime_ops', '?')} ops" for c in made if c is not pick)
        return pick, (f"ONNX Runtime runs the most compute ops as int8 kernels, in the fewest ops, with it on this CPU "
                      f"({pick.int8_compute_share or 0:.0%} of {pick.executed.get('compute_ops', '?')} in "
                      f"{pick.executed.get('runtime_ops', '?')} ops; {others})")
    _time(finalists, feeds[0])
    pick = min(finalists, key=lambda c: c.latency_ms)
    timed = ", ".join(f"{c.pair.name} {c.latency_ms:.3f} ms" for c in finalists)
    return pick, f"the fastest on this CPU at 1 thread ({timed}), as many int8 kernels as run"


def against_float(pick: Candidate, float_model: Path, feed: dict) -> dict | None:
    """Where `pick` runs ops with no int8 kernel: its latency and the float model's, timed in turns at 1 thread
    (`vs_fp32` is int8 ÷ fp32), with those ops. None where every compute op runs as an int8 kernel."""
    islands = [f for f in pick.executed.get("float_ops") or [] if f.endswith("(qdq_float)")]
    if not islands:
        return None
    reference = Candidate(pick.pair, float_model)
    _time([pick, reference], feed)
    return {"int8_ms": round(pick.latency_ms, 4), "fp32_ms": round(reference.latency_ms, 4),
            "vs_fp32": round(pick.latency_ms / reference.latency_ms, 3), "float_ops": islands}


def _same_graph(a: Candidate, b: Candidate) -> bool:
    keys = ("runtime_ops", "compute_ops", "ops_by_mode", "float_ops")
    return all(a.executed.get(k) == b.executed.get(k) for k in keys)


def _outputs(path: Path, feeds: list[dict], optimized: bool = True) -> np.ndarray:
    """Every output on every feed, flattened into one vector."""
    run = session(str(path), optimized=optimized).run
    return np.concatenate([np.ravel(y) for f in feeds for y in run(None, f)]).astype(np.float64)


def _time(finalists: list[Candidate], feed: dict) -> None:
    """Each finalist's median latency at 1 thread, timed in turns over ROUNDS rounds (a host's load drifts)."""
    sessions = [session(str(c.path)) for c in finalists]
    medians: list[list[float]] = [[] for _ in finalists]
    for _ in range(ROUNDS):
        for i, opened in enumerate(sessions):
            seconds, _ = samples(lambda s=opened: s.run(None, feed), min_seconds=0.3, max_seconds=2.0)
            medians[i].append(statistics.median(seconds) * 1e3)
    for c, m in zip(finalists, medians):
        c.latency_ms = statistics.median(m)


def record(pick: Candidate, why: str, made: list[Candidate], optimize: str, timed: dict | None = None) -> dict:
    """The artifact's `int8_types`: the pair kept, why, every candidate measured and, where it was timed
    against the float model (`against_float`), that comparison."""
    out = asdict(pick.pair) | {"why": why, "optimize": optimize} | ({"against_fp32": timed} if timed else {})
    if len(made) > 1:
        out["candidates"] = [c.to_json(c is pick) for c in made]
    return out
