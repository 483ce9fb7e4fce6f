"""Verification: metrics as pure functions in a registry, thresholds as data, a verdict."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Callable

import numpy as np

from edgekit.core.errors import BadInput
from edgekit.core.inspection import Inspection
from edgekit.core.options import key_values, number
from edgekit.core.quant import LM_PRECISIONS, Precision

Metric = Callable[[np.ndarray, np.ndarray], "float | None"]
METRICS: dict[str, Metric] = {}
# For each metric, whether a larger value is better (thresholds are minimums) or worse (maximums).
HIGHER_IS_BETTER: dict[str, bool] = {}


def metric(name: str, higher_is_better: bool):
    def register(fn: Metric) -> Metric:
        METRICS[name] = fn
        HIGHER_IS_BETTER[name] = higher_is_better
        return fn
    return register


def _f64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float64).reshape(len(a), -1) if np.ndim(a) else np.asarray(a, dtype=np.float64).reshape(1, 1)


@metric("max_abs", higher_is_better=False)
def max_abs(ref: np.ndarray, out: np.ndarray) -> float:
    return float(np.max(np.abs(_f64(ref) - _f64(out))))


@metric("mean_abs", higher_is_better=False)
def mean_abs(ref: np.ndarray, out: np.ndarray) -> float:
    return float(np.mean(np.abs(_f64(ref) - _f64(out))))


@metric("rmse", higher_is_better=False)
def rmse(ref: np.ndarray, out: np.ndarray) -> float:
    return float(np.sqrt(np.mean((_f64(ref) - _f64(out)) ** 2)))


def _cosines(r: np.ndarray, o: np.ndarray) -> np.ndarray:
    """Cosine similarity of each row of r with the same row of o (1 where both are zero)."""
    nr, no = np.linalg.norm(r, axis=1), np.linalg.norm(o, axis=1)
    dot = np.sum(r * o, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        cos = np.where((nr == 0) | (no == 0), 0.0, dot / (nr * no))
    return np.where((nr == 0) & (no == 0), 1.0, cos)


QUIET = 0.5  # a sample whose reference norm is under this share of the samples' RMS norm is a quiet one


def sample_cosines(r: np.ndarray, o: np.ndarray) -> np.ndarray:
    """Each sample's (row's) cosine similarity, a quiet sample's floored: one whose reference norm is under QUIET
    × the samples' RMS norm (a silent audio frame, an empty map, a small object) is judged by its error against
    that floor, 1 − ‖ref − out‖² / (2 · floor²), where that is the higher. A near-zero output's direction is
    noise — an int8 step turns it anywhere — while an error as large as the floor (the artifact says something
    where the source said nothing, or loses what it said) still fails. At the floor the two agree: the cosine of
    a small error is 1 − ‖error ⊥ ref‖² / (2 · ‖ref‖²)."""
    cos = _cosines(r, o)
    norms = np.linalg.norm(r, axis=1)
    floor = QUIET * float(np.sqrt(np.mean(norms ** 2))) if len(norms) else 0.0
    quiet = norms < floor
    if floor > 0 and quiet.any():
        floored = np.clip(1 - np.sum((r - o) ** 2, axis=1) / (2 * floor ** 2), -1.0, 1.0)
        cos = np.where(quiet, np.maximum(cos, floored), cos)
    return cos


@metric("cosine", higher_is_better=True)
def cosine(ref: np.ndarray, out: np.ndarray) -> float:
    """Mean over samples of each sample's cosine similarity (what an embedding user compares), quiet samples
    floored (`sample_cosines`)."""
    return float(np.mean(sample_cosines(_f64(ref), _f64(out))))


@metric("cosine_min", higher_is_better=True)
def cosine_min(ref: np.ndarray, out: np.ndarray) -> float:
    """The worst sample's cosine similarity, quiet samples floored (`sample_cosines`)."""
    return float(np.min(sample_cosines(_f64(ref), _f64(out))))


def _channels(a: np.ndarray) -> np.ndarray | None:
    """Rows = channels, each over all samples and positions, for outputs laid out
    [batch, channels, positions...] (a detector's [1, 4 + classes, anchors], a feature map);
    None for outputs without positions (class scores, embeddings)."""
    shape = a.shape[1:]  # one sample's output
    if len(shape) >= 3 and shape[0] == 1:
        shape = shape[1:]  # a batch of one
    if len(shape) < 2 or shape[0] == 1:
        return None
    x = np.asarray(a, dtype=np.float64).reshape(len(a), shape[0], -1)
    return np.moveaxis(x, 1, 0).reshape(shape[0], -1)


@metric("channel_cosine", higher_is_better=True)
def channel_cosine(ref: np.ndarray, out: np.ndarray) -> float | None:
    """Mean over the output's channels (axis 1) of each channel's cosine over all samples and
    positions, so that a small-scale part of an output (class scores beside pixel boxes) counts as
    much as a large one. None for outputs without positions."""
    r, o = _channels(ref), _channels(out)
    return None if r is None else float(np.mean(_cosines(r, o)))


@metric("channel_cosine_min", higher_is_better=True)
def channel_cosine_min(ref: np.ndarray, out: np.ndarray) -> float | None:
    """The worst channel's cosine (reported; near-empty channels make it noisy at int8)."""
    r, o = _channels(ref), _channels(out)
    return None if r is None else float(np.min(_cosines(r, o)))


def sqnr_from_sums(signal: float, noise: float, ceiling: float | None = None) -> float | None:
    """Signal-to-quantization-noise ratio in dB, 10·log10(Σref² / Σ(ref − out)²): edgekit's one definition.

    Without a `ceiling`, identical values give None (infinite), and a zero reference or an infinite error -inf
    (a float op of an int8 model giving -inf where the float model's is finite: basic-pitch's logarithm); with
    one, the result is kept within ±ceiling (per-layer drift counts an exact match as `ceiling`)."""
    if noise == 0:
        return ceiling
    if signal == 0 or signal / noise == 0:
        return -math.inf if ceiling is None else -ceiling
    value = 10 * math.log10(signal / noise)
    return float(value if ceiling is None else max(-ceiling, min(ceiling, value)))


@metric("sqnr_db", higher_is_better=True)
def sqnr_db(ref: np.ndarray, out: np.ndarray) -> float | None:
    """Signal-to-quantization-noise ratio in dB; None (infinite) when the outputs are identical."""
    r, o = _f64(ref), _f64(out)
    return sqnr_from_sums(float(np.sum(r ** 2)), float(np.sum((r - o) ** 2)))


@metric("top1_agreement", higher_is_better=True)
def top1_agreement(ref: np.ndarray, out: np.ndarray) -> float | None:
    """Share of samples whose arg-max class agrees; None when the output is not class scores."""
    r, o = _f64(ref), _f64(out)
    if r.shape[1] < 2:
        return None
    return float(np.mean(np.argmax(r, axis=1) == np.argmax(o, axis=1)))


CLEAR = 8.0  # a top-2 margin over this many times the artifact's typical error: no rounding noise flips it


@metric("clear_top1_agreement", higher_is_better=True)
def clear_top1_agreement(ref: np.ndarray, out: np.ndarray) -> float | None:
    """Share of the clear decisions whose arg-max class agrees: samples whose top two scores in the source are
    further apart than CLEAR × the artifact's typical error (the median over samples of the RMS difference of
    their scores). A near-tie flips under any perturbation; a clear decision flipped is a broken model, however
    high its cosine (two logits of a thousand moved). None without clear samples or for a single score."""
    r, o = _f64(ref), _f64(out)
    if r.shape[1] < 2:
        return None
    noise = float(np.median(np.sqrt(np.mean((r - o) ** 2, axis=1))))
    top2 = np.sort(r, axis=1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > CLEAR * noise
    if not clear.any():
        return None
    return float(np.mean(np.argmax(r[clear], axis=1) == np.argmax(o[clear], axis=1)))


@metric("decision_agreement", higher_is_better=True)
def decision_agreement(ref: np.ndarray, out: np.ndarray) -> float | None:
    """Share of values on the same side of 0.5 in source and artifact, for outputs of probabilities (every value
    in [0, 1]: a sigmoid map, a multi-label or per-bin activation, a speech probability); None for others."""
    r, o = _f64(ref), _f64(out)
    if r.min() < -1e-6 or r.max() > 1 + 1e-6:
        return None
    return float(np.mean((r > 0.5) == (o > 0.5)))


@metric("step_top1_agreement", higher_is_better=True)
def step_top1_agreement(ref: np.ndarray, out: np.ndarray) -> float | None:
    """Share of the steps of a sequence of class scores (each sample [..., steps, classes], as a CTC text
    recogniser or a token classifier writes, or [..., H, W, classes], a map of per-position probabilities)
    whose arg-max class agrees; None for other outputs."""
    shape = ref.shape[1:]
    if len(shape) < 2 or shape[-1] < 2:
        return None
    r, o = (np.asarray(a, dtype=np.float64).reshape(-1, shape[-1]) for a in (ref, out))
    return float(np.mean(np.argmax(r, axis=1) == np.argmax(o, axis=1)))


@metric("probability_max_abs", higher_is_better=False)
def probability_max_abs(ref: np.ndarray, out: np.ndarray) -> float | None:
    """The largest |Δ| of an output of probabilities (every source value in [0, 1]): a speech or detection
    probability read against a threshold, where a shift of this much moves only the decisions already within it
    of the threshold. None for other outputs."""
    r, o = _f64(ref), _f64(out)
    if r.min() < -1e-6 or r.max() > 1 + 1e-6:
        return None
    return float(np.max(np.abs(r - o)))


@metric("sequence_agreement", higher_is_better=True)
def sequence_agreement(ref: np.ndarray, out: np.ndarray) -> float | None:
    """Share of the samples of a sequence of class scores (each [steps, classes], size-1 axes aside) whose reading is the
    source's: every clear step's arg-max class agrees, a clear step being one whose top two scores in the source
    are further apart than CLEAR × the artifact's typical error per step (the median RMS difference). A near-tie
    step (a CTC blank beside its character) may flip; a sample with a clear step flipped reads differently, however
    high its cosine. None for other outputs (a map of positions among them)."""
    alike = read_alike(ref, out)
    return None if alike is None else float(np.mean(alike))


def read_alike(ref: np.ndarray, out: np.ndarray) -> np.ndarray | None:
    """Per sample of a sequence of class scores, whether it reads as the source's (see sequence_agreement);
    None for other outputs."""
    shape = [d for d in ref.shape[1:-1] if d != 1] + list(ref.shape[-1:])
    if len(shape) != 2 or shape[-1] < 2:
        return None  # not one sequence per sample: a map of positions, class scores
    r, o = (np.asarray(a, dtype=np.float64).reshape(len(ref), -1, shape[-1]) for a in (ref, out))
    noise = float(np.median(np.sqrt(np.mean((r - o) ** 2, axis=2))))
    top2 = np.sort(r, axis=2)[..., -2:]
    clear = (top2[..., 1] - top2[..., 0]) > CLEAR * noise
    same = np.argmax(r, axis=2) == np.argmax(o, axis=2)
    return np.all(same | ~clear, axis=1)


# What an output is decides the metrics that judge it. A metric that does not fit an output's kind is
# neither reported nor checked: the top-1 class of a box regression or of a probability map means nothing,
# and one sample's cosine of a 4-value box offset near zero is noise, not drift.
KINDS = {
    "scores": "class scores (logits or probabilities): top-1 agreement, of the clear decisions and of all",
    "probabilities": "independent probabilities (sigmoid outputs, as multi-label scores or a pitch tracker's per-bin "
                     "activations): cosine per sample, quiet samples floored, and decisions at 0.5",
    "embedding": "an embedding vector: cosine per sample",
    "regression": "a few values per sample (boxes, landmarks): cosine and errors over all samples",
    "score": "one value per sample (a probability, a score): errors and SQNR, a probability's largest move; a "
             "cosine of one value is its sign",
    "map": "a map over positions (segmentation, a detection grid, features): cosine per channel",
    "sequence": "class scores per step or position (a CTC text recogniser, a decoder's tokens, token classes, a "
                "channels-last map of per-position probabilities): the samples read alike (every clear step's "
                "top-1 agrees) and cosine over the samples that do; a map of positions, top-1 agreement per position",
}
_CHANNELS = {"channel_cosine", "channel_cosine_min"}
_TOP1 = {"top1_agreement", "clear_top1_agreement"}
_STEPS = {"step_top1_agreement", "sequence_agreement"}
# One probability per sample (a speech probability) is judged by how far it moves; an output of many is judged by
# its cosines and decisions, where one value's largest move is noise.
_ONE = {"probability_max_abs"}
NOT_FITTING = {
    "scores": _CHANNELS | _STEPS | _ONE | {"decision_agreement"},
    "probabilities": _CHANNELS | _STEPS | _ONE | {"clear_top1_agreement"},
    "embedding": _TOP1 | _CHANNELS | _STEPS | _ONE | {"decision_agreement"},
    "regression": _TOP1 | _CHANNELS | _STEPS | _ONE | {"cosine_min", "decision_agreement"},
    "map": _TOP1 | _STEPS | _ONE,
    "sequence": _TOP1 | _CHANNELS | _ONE | {"decision_agreement"},
    "score": _TOP1 | _CHANNELS | _STEPS | {"cosine", "cosine_min"},
}
MANY_CLASSES = 10  # a vector of this many values or more that is neither probabilities nor unit-norm: logits


@dataclass(frozen=True)
class OutputKind:
    """What an output was judged as (a KINDS key, deciding its metrics) and why, so a wrong guess can be seen."""

    kind: str  # a key of KINDS
    basis: str  # why: "given", read from its values, or guessed from its shape (said as such)

    def to_json(self) -> dict:
        """{"kind", "basis"}: a verdict's entry for the output in its "outputs"."""
        return {"kind": self.kind, "basis": self.basis}


def output_kind(ref: np.ndarray) -> OutputKind:
    """What an output is, from the source model's outputs on the verification samples (stacked): from its
    values where they say it (probabilities, unit-norm vectors), else guessed from its shape — said so, with
    the option that corrects a wrong guess."""
    shape = ref.shape[1:]
    while len(shape) > 1 and shape[0] == 1:
        shape = shape[1:]
    values = np.asarray(ref, dtype=np.float64).reshape(len(ref), *shape) if len(ref) else ref
    fix = "--output-kind NAME=KIND corrects it"
    if len(shape) >= 2 and shape[-1] >= 2 and _distributions(values.reshape(-1, shape[-1])):
        return OutputKind("sequence", "its values: the scores at every step or position sum to 1")
    if len(shape) >= 2:
        return OutputKind("map", f"guessed from its shape {'×'.join(map(str, shape))} (values over positions); {fix}")
    classes = shape[0] if shape else 1
    if classes == 1:
        return OutputKind("score", "its shape: one value per sample")
    rows = values.reshape(len(values), -1)
    if classes >= 2 and _distributions(rows):
        return OutputKind("scores", "its values: every sample's scores sum to 1")
    if classes >= 8 and np.allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-3):
        return OutputKind("embedding", "its values: every sample has unit L2 norm")
    if classes >= MANY_CLASSES and rows.min() >= 0 and rows.max() <= 1:
        return OutputKind("probabilities", "its values: every value is in [0, 1] and a sample's do not sum to 1 "
                                           f"(independent probabilities, e.g. sigmoid outputs); {fix}")
    if classes >= MANY_CLASSES:
        return OutputKind("scores", f"guessed from its shape ({classes} values per sample, taken for logits); {fix}")
    return OutputKind("regression", f"guessed from its shape ({classes} values per sample, not probabilities); {fix}")


def _distributions(rows: np.ndarray) -> bool:
    return bool(len(rows)) and bool(np.all(rows >= -1e-6)) and bool(np.allclose(rows.sum(axis=1), 1.0, atol=1e-3))


def parse_output_kinds(items) -> dict[str, str]:
    """`--output-kind output_1=regression` (or `1=regression`, or {"output_1": "regression"}) → {"output_1": "regression"}."""
    out = {}
    for name, kind in key_values(items):
        kind = str(kind).strip() if kind is not None else None
        if kind not in KINDS or not name:
            raise BadInput(f"cannot read --output-kind {name if kind is None else f'{name}={kind}'!r}",
                           fix=f"write OUTPUT=KIND, OUTPUT as output_0 (or 0), KIND one of {', '.join(KINDS)}")
        out[f"output_{name}" if name.isdigit() else name] = kind
    return out


NEAR_TIE = 0.01  # a top-2 margin under this share of the logits' spread: any perturbation may flip it


def top1_near_ties(ref: np.ndarray, out: np.ndarray) -> tuple[int, int]:
    """(samples whose arg-max class disagrees, how many of them are near-ties in the reference: its top
    two scores closer than NEAR_TIE of the standard deviation of its scores)."""
    r, o = _f64(ref), _f64(out)
    wrong = np.argmax(r, axis=1) != np.argmax(o, axis=1)
    top2 = np.sort(r, axis=1)[:, -2:]
    ties = (top2[:, 1] - top2[:, 0]) < NEAR_TIE * float(np.std(r))
    return int(wrong.sum()), int((wrong & ties).sum())


def only_near_ties(ref: list, out: list) -> bool:
    """Whether some sample's top-1 class disagrees, and every one that does is a near-tie in the source
    (`ref` and `out` are the outputs, in order; outputs with fewer than two classes are left out)."""
    counts = [top1_near_ties(r, np.asarray(o).reshape(np.shape(r))) for r, o in zip(ref, out)
              if np.ndim(r) >= 2 and np.shape(r)[1] >= 2 and np.size(o) == np.size(r)]
    return any(wrong for wrong, _ in counts) and all(wrong == ties for wrong, ties in counts)


# Measured by inspecting the artifact itself (edgekit.targets.inspection), not its outputs.
INSPECTION_METRICS = {
    "int8_weight_share": "of the weight bytes are stored as int8",
    "int8_compute_share": "of the compute ops run in int8",
    "int8_heavy_op_share": "of the convolution/matmul ops run in int8",
    "int8_mac_share": "of the convolution/matmul multiply-accumulates run in int8",  # where the runtime's graph gives them
}
HIGHER_IS_BETTER.update({k: True for k in INSPECTION_METRICS})

# Default thresholds per precision (minimums for higher-is-better metrics, maximums otherwise).
# An int8 model whose weights or kernels are mostly float did not really quantize.
# A decoder LM's metrics (edgekit.core.lm_verify), each: whether larger is better; thresholds like the others'
LM_METRICS = {"token_agreement": True, "logits_cosine": True, "perplexity_ratio": False, "generated_agreement": True}
HIGHER_IS_BETTER.update(LM_METRICS)

THRESHOLDS: dict[str, dict[str, float]] = {
    "fp32": {"cosine": 0.9999, "cosine_min": 0.999, "channel_cosine": 0.999},
    "fp16": {"cosine": 0.999, "cosine_min": 0.99, "channel_cosine": 0.99},
    "int8": {"cosine": 0.99, "cosine_min": 0.95, "channel_cosine": 0.5, "clear_top1_agreement": 0.95,
             "sequence_agreement": 0.95, "probability_max_abs": 0.05, "int8_weight_share": 0.5,
             "int8_heavy_op_share": 0.5},
    "int8-dynamic": {"cosine": 0.99, "cosine_min": 0.95, "channel_cosine": 0.5, "clear_top1_agreement": 0.95,
                     "sequence_agreement": 0.95, "probability_max_abs": 0.05, "int8_weight_share": 0.5},
    "int8-weights": {"token_agreement": 0.98, "perplexity_ratio": 1.02},
    "int4-weights": {"token_agreement": 0.90, "perplexity_ratio": 1.10},
}
# The precisions each kind of reference (edgekit.engine.reference; a source format's `judged_by`) judges an
# artifact at: a model's outputs on samples, at float, int8 and int8-dynamic; a decoder LM's tokens, at float and
# its weight-only precisions.
JUDGED_AT = {"samples": (Precision.FP32, Precision.FP16, Precision.INT8, Precision.INT8_DYNAMIC),
             "tokens": (Precision.FP32, *LM_PRECISIONS)}
LM_FP32 = {"token_agreement": 0.99, "perplexity_ratio": 1.001}  # an fp32 decoder LM's (THRESHOLDS["fp32"] is per output)


def applicable_thresholds(thresholds: dict, asked: dict, inspection, declared: bool = False) -> dict:
    """`thresholds` as they apply to the artifact `inspection` read. One with int16 activations everywhere (a16w8:
    asked for, kept by a search, or built elsewhere; `Inspection.a16w8`), or whose conv and matmul ops that are
    not int8 all run float on int8 weights (`Inspection.weight_only_by_design`; `declared`: its converter named
    the layers it kept float), runs them on no int8 kernel by design: it is held to its int8 weights
    (int8_weight_share), not to int8 compute, unless the user's thresholds (`asked`) set int8_heavy_op_share.

    Where the runtime's graph gives the conv/matmul ops' multiply-accumulates (`int8_mac_share` in the executed
    view), the default int8 compute gate weighs them by those: a batch norm after its activation (conv → relu →
    bn, which no conv absorbs) runs in XNNPACK as a 1×1 depthwise conv, one op per conv at a few hundredths of its
    work (CREPE's int8 .pte: 46% of its conv ops int8, 99.6% of their MACs). A threshold the user set is kept."""
    by_design = inspection is not None and (inspection.a16w8 or inspection.weight_only_by_design(declared))
    if by_design and "int8_heavy_op_share" not in asked:
        return {k: v for k, v in thresholds.items() if k != "int8_heavy_op_share"}
    ran = (inspection.executed or {}) if inspection is not None else {}
    if "int8_heavy_op_share" in thresholds and "int8_heavy_op_share" not in asked and "int8_mac_share" in ran:
        return {("int8_mac_share" if k == "int8_heavy_op_share" else k): v for k, v in thresholds.items()}
    return thresholds


class Status(StrEnum):
    """What a verification concluded. A str, so the JSON, the tables and comparisons with "pass" keep
    the plain words; code names the members."""

    PASS = "pass"
    FAIL = "fail"


@dataclass(frozen=True)
class Verdict:
    """One artifact's verification: pass or fail, `metrics` as {output_i: {metric: value}} (only the metrics
    fitting each output's kind; a None sqnr_db is an exact match), and a reason for every failure.
    `task_accuracy` is None without labels, `inspection` None when the artifact was not inspected."""

    status: Status
    samples: int = 0
    metrics: dict = field(default_factory=dict)
    thresholds: dict = field(default_factory=dict)
    task_accuracy: dict | None = None
    reasons: tuple[str, ...] = ()
    inspection: Inspection | None = None
    # the artifact run again at a second size of its dynamic dimensions (edgekit.engine.sizes)
    second_size: dict | None = None
    notes: tuple[str, ...] = ()  # what verification could not do, e.g. no second size for a dimension
    kinds: dict = field(default_factory=dict)  # output name → OutputKind.to_json(): what judged it

    def to_json(self) -> dict:
        """status, samples, metrics, thresholds always; the rest only when set, `kinds` under "outputs"."""
        out = {"status": str(self.status), "samples": self.samples, "metrics": self.metrics,
               "thresholds": self.thresholds}
        if self.task_accuracy is not None:
            out["task_accuracy"] = self.task_accuracy
        if self.inspection is not None:
            out["inspection"] = self.inspection.to_json()
        if self.second_size is not None:
            out["second_size"] = self.second_size
        if self.reasons:
            out["reasons"] = list(self.reasons)
        if self.notes:
            out["notes"] = list(self.notes)
        if self.kinds:
            out["outputs"] = self.kinds
        return out

    @classmethod
    def from_json(cls, d: dict) -> "Verdict":
        """Inverse of `to_json`: a verdict as the artifact cache stored it."""
        inspection = d.get("inspection")
        return cls(Status(d["status"]), d["samples"], d["metrics"], d["thresholds"], d.get("task_accuracy"),
                   tuple(d.get("reasons", ())), inspection and Inspection.from_json(inspection), d.get("second_size"),
                   tuple(d.get("notes", ())), d.get("outputs", {}))


def compare(ref: list[np.ndarray], out: list[np.ndarray], thresholds: dict[str, float],
            labels: np.ndarray | None = None, inspection: Inspection | None = None,
            kinds: dict[str, str] | None = None) -> Verdict:
    """Compare artifact outputs with reference outputs (each stacked over samples).

    Each output is judged by the metrics that fit its kind (`kinds`: output name → a KINDS key given by the
    user; else `output_kind`; a top1_agreement threshold says class scores where the kind was only guessed).
    With an `inspection` of the artifact, thresholds on INSPECTION_METRICS are checked too: the compute shares
    as the runtime runs the artifact where the inspection read that (`Inspection.executed`) and the file asks
    for no int16 activations, else the file's.
    """
    reasons = _inspection_reasons(inspection, thresholds) if inspection is not None else []
    output_thresholds = {k: v for k, v in thresholds.items() if k in METRICS}
    if len(ref) != len(out):
        return Verdict(Status.FAIL, len(ref[0]) if ref else 0, {}, dict(thresholds),
                       reasons=(f"the artifact has {len(out)} outputs, the source {len(ref)}",))
    metrics: dict[str, dict] = {}
    judged: dict[str, dict] = {}
    for i, (r, o) in enumerate(zip(ref, out)):
        name = f"output_{i}"
        if r.size != o.size:
            reasons.append(f"{name}: shape {o.shape} differs from the source's {r.shape}")
            continue
        o = o.reshape(r.shape)
        given = (kinds or {}).get(name)
        kind = OutputKind(given, "given") if given else output_kind(r)
        if kind.basis.startswith("guessed") and "top1_agreement" in thresholds and kind.kind != "scores":
            kind = OutputKind("scores", "a top1_agreement threshold was given")
        judged[name] = kind.to_json()
        metrics[name] = {k: fn(r, o) for k, fn in METRICS.items() if k not in NOT_FITTING[kind.kind]}
        metrics[name] = {k: v for k, v in metrics[name].items() if v is not None or k == "sqnr_db"}
        alike = read_alike(r, o) if "sequence_agreement" in metrics[name] else None
        if alike is not None:
            # A sequence's samples are judged by whether they read alike; its cosines are of the samples that do.
            # One near-tie step flipped in a decoder that feeds its tokens back changes the rest of that sample's
            # scores: its cosine is not drift but another reading, which sequence_agreement counts.
            for key in ("cosine", "cosine_min"):
                if key in metrics[name]:
                    metrics[name][key] = METRICS[key](r[alike], o[alike]) if alike.any() else 0.0
        for key, limit in output_thresholds.items():
            value = metrics[name].get(key)
            if key == "sqnr_db" and value is None:
                continue  # identical outputs: infinite SQNR
            if value is None:
                continue
            ok = value >= limit if HIGHER_IS_BETTER[key] else value <= limit
            if not ok:
                sign = "<" if HIGHER_IS_BETTER[key] else ">"
                reason = f"{name} {key} {value:.6g} {sign} {limit:g}"
                if key == "top1_agreement":
                    wrong, ties = top1_near_ties(r, o)
                    reason += (f" ({wrong} of {len(r)} samples disagree; {ties} of them are near-ties in the source "
                               f"model, its top two scores closer than {NEAR_TIE:.0%} of their spread)")
                reasons.append(reason)
    task = None
    if labels is not None and ref and ref[0].ndim >= 2:
        labels = np.asarray(labels).reshape(-1)
        task = {"reference": _accuracy(ref[0], labels), "artifact": _accuracy(out[0], labels)}
    return Verdict(Status.FAIL if reasons else Status.PASS, len(ref[0]) if ref else 0, metrics, dict(thresholds), task,
                   tuple(reasons), inspection, kinds=judged)


def _inspection_reasons(inspection: Inspection, thresholds: dict[str, float]) -> list[str]:
    reasons = []
    # int16 activations (asked for) run float in ONNX Runtime, and so does an op reading one: such an artifact is
    # held to its file's shares, as one with int16 activations everywhere is held to its weights
    ran = {} if inspection.ops_by_mode.get("int16") else inspection.executed or {}
    for key, what in INSPECTION_METRICS.items():
        share, floats, where = getattr(inspection, key, None), inspection.float_ops, ""
        if key in ran:  # a compute share: what the runtime runs decides, not what the file spells
            share, floats, where = ran[key], ran["float_ops"], f" as {ran['runtime'].split(',')[0]} runs it"
        if key in thresholds and share is not None and share < thresholds[key]:
            left = ", ".join(floats[:6]) or "none listed"
            reasons.append(f"did not really quantize{where}: only {share * 100:.1f}% {what} "
                           f"({key} {share:.4g} < {thresholds[key]:g}); float ops left: {left}")
    return reasons


def _accuracy(scores: np.ndarray, labels: np.ndarray) -> float:
    pred = np.argmax(scores.reshape(len(scores), -1), axis=1)
    return round(float(np.mean(pred == labels)), 6)


def parse_thresholds(items) -> dict[str, float]:
    """`--threshold cosine=0.999` (or {"cosine": 0.999}) → {"cosine": 0.999}, checked against the metric registry."""
    out = {}
    for key, value in key_values(items):
        item = key if value is None else f"{key}={value}"
        if value is None or key not in HIGHER_IS_BETTER:
            raise BadInput(f"cannot read --threshold {item!r}" + (f": unknown metric {key!r}" if value is not None else ""),
                           fix=f"write METRIC=VALUE with a metric of {', '.join(HIGHER_IS_BETTER)}")
        try:
            out[key] = number(value)
        except ValueError:
            raise BadInput(f"--threshold {item!r}: {value!r} is not a number") from None
    return out
