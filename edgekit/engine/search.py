"""Accuracy-aware int8: meet drift budgets by keeping the fewest layers back from int8.

    edgekit convert model.pt2 -t tflite --int8 --calib c.npz --eval e.npz --budget cosine=0.99

The model is converted fully int8 and measured in its runtime on held-out calibration samples (never
the eval samples the final verdict uses). When a budget is missed, the whole-model passes the
backend has and the model can use are tried first, one step each: SmoothQuant for a transformer's
linears (edgekit.calibration.smooth_quant), then bias correction
(edgekit.calibration.bias_correction), then int16 activations at high resolution for an image model
(edgekit.converters.onnx_score_heads.stem_activations; the weights stay int8), then int16 activations
everywhere (a16w8, for a model whose int8 activations lose too much all through it). Each is kept like
any step, only if it helps. When a budget is still missed, the layers are ranked (edgekit.engine.layers: one trace
of the model, not one conversion per layer) by what the model's outputs gain with each layer alone kept
float, where the backend measures it in its runtime (onnx), else by the SQNR each one loses, and moved back
one at a time, the worst first, to the backend's fallback precisions in order (int16 activations where it has
them, then float): reconvert, re-measure, and keep the step only if it moves the continuous budget
metrics (all but top-1 agreement, which moves by whole samples; the output SQNR when only top-1 is
budgeted) and brings the model closer to its budgets, by at least MIN_GAIN of the remaining gap or
by a large move of those metrics, which may cost one sample of top-1 agreement (see `Search._verdict`);
otherwise undo it. After each kept layer the model is ranked again: what a layer loses depends on what
reaches it. The search stops when
every budget holds, when the step limit is reached (a step that changed nothing, a layer already at
that precision, does not count), when no ranked layer is left, or before any
layer step when only top-1 agreement is missed and every disagreeing sample is a near-tie in the
source model (its top two scores all but equal: no layer kept back can be shown to mend a coin
flip); a step whose result would leave less than the floor of weight bytes in int8 is undone. The
result is never worse than full int8 on the search samples (only improving steps are kept), and
every layer kept back comes with what it contributed.

The loop itself (`Search.run`) is pure: it takes a function that converts and measures a spec and a
function that ranks layers, so the pipeline plugs in the real converters and runtimes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable

from edgekit.core.budgets import Budget
from edgekit.core.errors import BadInput
from edgekit.core.quant import Fallback, PASSES, QuantSpec
from edgekit.core.search_record import KeptLayer, SearchRecord, SearchStep, StopReason
from edgekit.core.verify import NEAR_TIE

SEARCH_FRACTION = 0.5  # of the calibration samples held out for the search to measure on
MIN_INT8_SHARE = 0.8
MAX_STEPS = 8
MIN_LOSS_DB = 0.5  # layers losing less than this are not candidates
MIN_GAIN_DB = 0.1  # nor layers whose measured gain kept float is less than this
MIN_GAIN = 0.02  # a step must close at least this share of the remaining gap to the budgets
# A step must also move the continuous budget metrics by this much (in budget widths: 1e-4 of cosine
# for cosine=0.99; with top-1 agreement alone, the output SQNR, SQNR_DB_PER_WIDTH dB to a width), and
# by STRONG_PROGRESS to be kept without closing the gap (a met cosine budget, a missed top-1).
MIN_PROGRESS = 0.01
STRONG_PROGRESS = 0.1
SQNR_DB_PER_WIDTH = 5.0
DISCRETE = ("top1_agreement",)  # moves by whole samples


def worth_keeping(ranked: list) -> list:
    """The ranked layers (edgekit.core.drift.LayerDrift) worth keeping back, in order: not the model's inputs nor
    ops that run float already (magika's written-out layer norms: each cost a search a conversion that changed
    nothing), gaining at least MIN_GAIN_DB kept float where that was measured, else losing at least MIN_LOSS_DB."""
    return [d for d in ranked if not d.layer.startswith("input ") and d.quantized
            and (d.gain_db >= MIN_GAIN_DB if d.gain_db is not None else d.loss_db >= MIN_LOSS_DB)]


@dataclass(frozen=True)
class Measurement:
    """One conversion, measured: the artifact, its output metrics on the search samples, its inspection."""

    spec: QuantSpec
    artifact: object  # ModelArtifact
    metrics: dict  # {output: {metric: value}}
    int8_share: float
    bytes: int
    float_weight_bytes: int
    seconds: float
    near_ties: bool = False  # every sample whose top-1 class disagrees is a near-tie in the source model
    samples: int = 0  # how many samples were measured (0: not known)


@dataclass
class Search:
    """One search's terms and, as `run` goes, its steps and kept layers: use a new Search for each search."""

    budgets: tuple[Budget, ...]
    fallbacks: tuple[str, ...]  # the backend's, cheapest first
    min_int8_share: float = MIN_INT8_SHARE
    max_steps: int = MAX_STEPS
    say: Callable[[str], None] = lambda _msg: None
    passes: tuple[str, ...] = ()  # whole-model QuantSpec flags (PASSES) to try before any layer is kept back
    steps: list = field(default_factory=list)
    kept: list[KeptLayer] = field(default_factory=list)
    floor_hit: bool = False  # a step was undone because it left less than min_int8_share in int8
    unchanged: int = 0  # conversions that made the model the search already held: not counted as steps

    def values(self, m: Measurement) -> dict:
        """Each budget's metric → its worst value over `m`'s outputs (None where unmeasured)."""
        return {b.metric: b.value(m.metrics) for b in self.budgets}

    def gap(self, m: Measurement) -> float:
        """How far `m` is from all budgets together, summed in Budget.gap units; 0 when every one holds."""
        return sum(b.gap(b.value(m.metrics)) for b in self.budgets)

    def _progress(self, best: Measurement, trial: Measurement) -> tuple[float, str]:
        """How far `trial` moved past `best` on the continuous budget metrics (all but top-1 agreement,
        met or not), in budget widths; with top-1 alone, on the output SQNR (SQNR_DB_PER_WIDTH dB
        count as one width). With its description."""
        smooth = [b for b in self.budgets if b.metric not in DISCRETE]
        if not smooth:
            return ((_sqnr(trial) - _sqnr(best)) / SQNR_DB_PER_WIDTH,
                    f"the output SQNR ({_sqnr(best):.2f} → {_sqnr(trial):.2f} dB)")
        change = sum(b.progress(b.value(best.metrics), b.value(trial.metrics)) for b in smooth)
        return change, ", ".join(f"{b.metric} {_num(b.value(best.metrics))} → {_num(b.value(trial.metrics))}"
                                 for b in smooth)

    def _verdict(self, best: Measurement, trial: Measurement) -> str | None:
        """Why the step from `best` to `trial` is undone, or None to keep it. A step must move the
        continuous metrics (top-1 agreement on a few dozen samples moves by one flipped sample, which
        a step can win while the model got no better), must not widen the gap to the budgets, and
        must close it by MIN_GAIN of what is left unless it moves the continuous metrics a lot
        (STRONG_PROGRESS: progress on a met cosine budget is progress toward top-1 agreement). A step that
        moves them a lot may lose one sample on top-1 agreement: a flip either way is chance there."""
        progress, shown = self._progress(best, trial)
        if progress < MIN_PROGRESS:
            return f"no progress on {shown}"
        before, after = self.gap(best), self.gap(trial)
        if after > before and not (progress >= STRONG_PROGRESS and self._one_sample_lost(best, trial)):
            return "worse than without it"
        if before - after <= MIN_GAIN * before and progress < STRONG_PROGRESS:
            return "no better than without it"
        return None

    def _one_sample_lost(self, best: Measurement, trial: Measurement) -> bool:
        """Whether `trial` is further from the budgets than `best` only by one sample on the discrete metrics."""
        one = 1 / trial.samples + 1e-9 if trial.samples else 0.0
        for b in self.budgets:
            was, now = b.value(best.metrics), b.value(trial.metrics)
            if b.gap(now) > b.gap(was) and (b.metric not in DISCRETE or was - now > one):
                return False
        return True

    def run(self, spec: QuantSpec, convert_and_measure: Callable[[QuantSpec, int], Measurement],
            rank: Callable[[Measurement], list]) -> tuple[Measurement, SearchRecord]:
        """Search from `spec`; returns the best measurement and the record of the search."""
        started = time.perf_counter()
        self.conversions = self.unchanged = 0

        def measure(spec: QuantSpec, index: int) -> Measurement:
            done = convert_and_measure(spec, index)
            self.conversions += 1
            return done

        best = measure(spec, 0)
        self._record(0, None, None, best, True, "full int8" if not spec.overrides else "the given overrides")
        stopped, self.rankings, self.ranking_seconds = None, 0, 0.0
        contributions = {}
        for name in self.passes:
            if self.gap(best) > 0 and name not in best.spec.passes_on() and self._steps() <= self.max_steps:
                best, contributions[name] = self._try_pass(best, measure, name)
        if self.gap(best) == 0:
            stopped = StopReason.MET
        elif best.near_ties and all(b.metric in DISCRETE for b in self.budgets if b.gap(b.value(best.metrics))):
            stopped = StopReason.NEAR_TIES
        elif not self.fallbacks:
            stopped = StopReason.NO_FALLBACK
        else:
            stopped = self._greedy(best, measure, rank)
            best = self._best
        return best, SearchRecord(
            {b.metric: b.limit for b in self.budgets}, stopped, self._why(stopped, best), self.conversions,
            round(time.perf_counter() - started, 3), self.rankings, round(self.ranking_seconds, 3), self.min_int8_share,
            self.max_steps, self.values(best), round(best.int8_share, 6), best.bytes,
            best.spec.overrides, tuple(self.kept), tuple(self.steps),
            best.spec.pass_flags(), {name: contributions.get(name) for name in PASSES})

    def _try_pass(self, best: Measurement, measure, name: str) -> tuple[Measurement, dict | None]:
        """A step that turns on the whole-model pass `name` (a QuantSpec flag). Returns the better of the
        two measurements and what the pass contributed (None when it was undone)."""
        index = len(self.steps)
        trial = measure(replace(best.spec, **{name: True}), index)
        undone = self._verdict(best, trial)
        if undone:
            self._record(index, None, None, trial, False, f"undone: {undone}", change=name)
            return best, None
        self._record(index, None, None, trial, True, "kept", change=name)
        return trial, {k: _delta(v, self.values(best).get(k)) for k, v in self.values(trial).items()}

    def _ranked(self, m: Measurement, rank, tried: set) -> list[str]:
        """The layers of `m` as ranked (by the measured gain of keeping each float, where the backend measures
        it, else by the SQNR each loses): model inputs, layers already kept back and tried, and layers whose
        measured gain is below MIN_GAIN_DB (or loss below MIN_LOSS_DB) left out."""
        started = time.perf_counter()
        ranked = rank(m)
        self.ranking_seconds += time.perf_counter() - started
        self.rankings += 1
        seen = {o.layer for o in m.spec.overrides} | tried
        out = []
        for d in worth_keeping(ranked):
            if d.layer not in seen:
                seen.add(d.layer)
                out.append(d.layer)
        measured = any(d.gain_db is not None for d in ranked)
        what = f"gaining ≥ {MIN_GAIN_DB} dB kept float" if measured else f"losing ≥ {MIN_LOSS_DB} dB"
        self.say(f"ranked {len(out)} layers {what} ({time.perf_counter() - started:.1f} s)")
        return out

    def _greedy(self, best: Measurement, measure, rank) -> StopReason:
        """Keep layers back one at a time; after each kept layer the model is ranked again (what a
        layer loses depends on what reaches it), leaving out the layers already tried."""
        self._best = best
        tried: set[str] = set()
        candidates = self._ranked(best, rank, tried)
        while candidates:
            layer = candidates.pop(0)
            tried.add(layer)
            for precision in self.fallbacks:
                if precision == Fallback.INT16 and self._best.spec.int16_activations:
                    continue  # every layer has int16 activations already: the conversion would change nothing
                if self._steps() > self.max_steps:
                    return StopReason.STEPS
                trial_spec = self._best.spec.with_override(layer, precision)
                try:
                    trial = measure(trial_spec, len(self.steps))
                except BadInput as e:  # a name the backend does not know as a layer: not a candidate
                    self._record(len(self.steps), layer, precision, None, False, f"skipped: {e.message}")
                    break
                if self._unchanged(trial):  # the layer was at that precision already (in the int16 stem)
                    self.unchanged += 1
                    self._record(len(self.steps), layer, precision, trial, False,
                                 f"no change: {layer} is at {precision} already (not counted as a step)")
                    continue
                if trial.int8_share < self.min_int8_share:
                    self.floor_hit = True
                    self._record(len(self.steps), layer, precision, trial, False,
                                 f"undone: int8 share {trial.int8_share:.3f} < floor {self.min_int8_share:g}")
                    continue
                undone = self._verdict(self._best, trial)
                if undone:
                    self._record(len(self.steps), layer, precision, trial, False, f"undone: {undone}")
                    continue
                self.kept.append(KeptLayer(
                    layer, precision, len(self.steps), trial.bytes - self._best.bytes,
                    trial.float_weight_bytes - self._best.float_weight_bytes,
                    {k: _delta(v, self.values(self._best).get(k)) for k, v in self.values(trial).items()}))
                self._record(len(self.steps), layer, precision, trial, True, "kept")
                self._best = trial
                if self.gap(trial) == 0:
                    return StopReason.MET
                if self._steps() > self.max_steps:
                    return StopReason.STEPS
                candidates = self._ranked(trial, rank, tried)
                break
        return StopReason.EXHAUSTED

    def _steps(self) -> int:
        """The conversions that count against the step limit: all but those that changed nothing."""
        return self.conversions - self.unchanged

    def _unchanged(self, trial: Measurement) -> bool:
        """The trial made the model the search holds: the same bytes, int8 share and metric values."""
        best = self._best
        return (trial.bytes, trial.int8_share, self.values(trial)) == (best.bytes, best.int8_share, self.values(best))

    def _record(self, index: int, layer, precision, m: Measurement | None, accepted: bool, note: str,
                change: str | None = None) -> None:
        row = SearchStep(index, layer, precision, change or ("layer" if layer else None), accepted, note)
        if m is not None:
            row = replace(row, values=self.values(m), int8_share=round(m.int8_share, 6), bytes=m.bytes,
                          layers=tuple(o.to_json() for o in m.spec.overrides), seconds=round(m.seconds, 3))
        self.steps.append(row)
        shown = ", ".join(f"{k} {_num(v)}" for k, v in (row.values or {}).items())
        what = (PASSES[change] if change in PASSES else "full int8" if layer is None
                else f"{layer} → {precision}")
        share = f", int8 share {m.int8_share:.3f}" if m is not None else ""
        self.say(f"search step {index}: {what}: {shown}{share} — {note}")

    def _why(self, stopped: StopReason, best: Measurement) -> str:
        missed = [f"{b.text()} (got {_num(b.value(best.metrics))})" for b in self.budgets if b.gap(b.value(best.metrics)) > 0]
        if stopped == StopReason.MET:
            corrected = "".join(f" and {PASSES[name]}" for name in best.spec.passes_on())
            return (f"every budget holds on the search samples with full int8{corrected}" if not self.kept
                    else f"every budget holds on the search samples with {len(self.kept)} layer(s) kept back{corrected}")
        tail = f"{', '.join(missed)} on the search samples"
        if stopped == StopReason.NO_FALLBACK:
            return f"missed {tail}: this backend cannot keep single layers back from int8"
        if stopped == StopReason.STEPS:
            return f"missed {tail}: the step limit ({self.max_steps}) was reached"
        if stopped == StopReason.NEAR_TIES:
            return (f"missed {tail}: every sample whose top-1 class disagrees is a near-tie in the source model "
                    f"(its top two scores closer than {NEAR_TIE:.0%} of their spread), which any rounding may flip; "
                    "keeping layers back cannot be shown to mend that, so none was tried")
        return (f"missed {tail}: no ranked layer is left to keep back"
                + (f" without the int8 share falling below {self.min_int8_share:g}" if self.floor_hit else ""))


def _sqnr(m: Measurement) -> float:
    """The output SQNR of the worst output (dB; identical outputs count as infinite)."""
    values = [o.get("sqnr_db") for o in m.metrics.values()]
    return min((float("inf") if v is None else v for v in values), default=float("inf"))


def _delta(a, b):
    return None if a is None or b is None else round(a - b, 6)


def _num(v) -> str:
    return "—" if v is None else f"{v:.6g}"
