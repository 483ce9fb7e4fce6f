"""One target of a run: build its route (choosing the calibration with `auto`, searching with budgets),
verify the artifact in its own runtime, place it."""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from edgekit.calibration import smooth_quant
from edgekit.core.artifact import CalibrationRecord, ModelArtifact
from edgekit.engine.build import Intermediates, Progress, build, place
from edgekit.engine.choice import Choosing
from edgekit.calibration.data import SampleSet
from edgekit.engine.graph import Route
from edgekit.engine.layers import SAMPLES, float_reference, rank_layers
from edgekit.core.search_record import StopReason
from edgekit.engine.search import Measurement, Search, worth_keeping
from edgekit.core.source import Source
from edgekit.core.quant import CALIBRATION_PASSES, PASSES, Precision, QuantSpec
from edgekit.core.quiet import captured
from edgekit.converters.base import ConvertContext, Reuse
from edgekit.core.results import ArtifactResult
from edgekit.core.budgets import Budget
from edgekit.core.errors import EdgekitError
from edgekit.core.verify import METRICS, Status, compare, only_near_ties
from edgekit.engine.reference import Reference, Runner, cached_runner, verify

ATTRIBUTED = 3  # layers a failed int8 verdict names

if TYPE_CHECKING:
    from edgekit.engine.plan import ConvertRequest


@dataclass(frozen=True)
class TargetJob(Choosing):
    """What one run's targets share to build and verify their artifacts: made once per run, `run` once per
    target, for any source (what an artifact is judged against is the `Reference` `run` is given). `calib` is the
    reference kind's calibration data (a decoder LM's: windows of tokens for GPTQ), None for a float run;
    `selection` None unless `auto`, a search or the default recipe (on a backend with more than one default
    method) has to choose."""

    source: Source
    req: ConvertRequest
    calib: SampleSet | np.ndarray | None
    selection: tuple | None  # (samples, their reference outputs) for auto, a search or the default's choice
    thresholds: dict
    out_dir: Path
    work: Path  # the run's private folder inside out_dir: artifacts are built there, then placed
    stem: str
    say: Progress
    shared: Intermediates  # the run's built steps, reused across targets and candidates
    runner: Runner = field(default_factory=cached_runner)  # each artifact run on each set of samples once
    ranked: dict = field(default_factory=dict)  # traced artifact path → its layers ranked, each ranked once

    def _run(self, artifact: ModelArtifact, samples: SampleSet) -> tuple[list, dict]:
        """The artifact's outputs on `samples` and its inspection, from its runtime's worker; an artifact
        already run on these samples (an `auto` candidate verified on its held-out samples) is not run again."""
        return self.runner(artifact, samples)

    def run(self, target, route: Route, reference: Reference) -> ArtifactResult:
        """Build the target's artifact, verify it against the source's `reference`, place it."""
        tmp = Path(tempfile.mkdtemp(prefix=f"{target.name}-", dir=self.work))
        try:
            artifact = self._build(target, route, tmp)
            artifact, verdict = self._verify(target, artifact, reference)
            if verdict.status == Status.FAIL and self.req.attribute_failures and route.quantizing_step \
                    and artifact.meta.search is None and artifact.meta.quantization.precision == Precision.INT8:
                verdict = replace(verdict, notes=verdict.notes + (self._attributed(target, route, artifact, verdict, tmp),))
            measured = ArtifactResult.measured(target.name, artifact, verdict)
            return replace(measured, artifact=place(artifact, self.out_dir, self.work))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _build(self, target, route: Route, tmp: Path) -> ModelArtifact:
        """The route's artifact; at int8 with its calibration chosen (`auto`) and layers kept back (a search)."""
        step = route.quantizing_step
        if step is None:
            return self._route(target, route, tmp, self.req.spec_for())
        calibration = CalibrationRecord(self.calib.source, len(self.calib), self.req.quant.method)
        if self.req.auto:
            artifact, spec, calibration = self._auto(target, route, step, tmp, calibration)
        elif self.req.default_choice(step.converter):
            artifact, spec, calibration = self._default(target, route, step, tmp, calibration)
        else:
            spec = self.req.spec_for(step.converter, smoothable=self._smoothable)
            artifact, calibration = None, replace(calibration, method=spec.method)
        search = None
        if self.req.search.budgets:
            requested = spec
            artifact, spec, search = self._search(target, route, step, tmp, spec, artifact)
            if spec == requested:  # no layer moved, no pass added: what a plain conversion makes
                artifact, calibration = self._refit(target, route, tmp, spec, calibration)
        elif artifact is None:
            artifact = self._route(target, route, tmp, spec)
        return artifact.noting(calibration=calibration, quantization=spec, search=search)

    def _verify(self, target, artifact: ModelArtifact, reference: Reference):
        """(the artifact, noting where a search's choice did not hold on the verification samples, its verdict)."""
        verdict = verify(reference.run_by(self.runner), artifact, target, self.thresholds, self.req.thresholds, self.say)
        search = artifact.meta.search
        if search and search.stopped is StopReason.MET and verdict.status == Status.FAIL:
            note = (f"the search met its budgets on {search.samples} held-out calibration samples, not {reference.what} "
                    "of the verification: give more (and more varied) calibration samples")
            artifact = artifact.noting(search=replace(search, note=note))
        return artifact, verdict

    def _route(self, target, route: Route, folder: Path, spec: QuantSpec, reuse: Reuse | None = None,
               calib: SampleSet | None = None) -> ModelArtifact:
        ctx = ConvertContext(self.source, folder, self.calib if calib is None else calib, spec, reuse,
                             ort_platform=self.req.ort_platform)
        return build(route, ctx, self.stem, lambda msg: self.say(f"{target.name}: {msg}"), self.shared, target.name)

    def _refit(self, target, route: Route, tmp: Path, spec: QuantSpec, calibration: CalibrationRecord):
        """A search that changed nothing (its first conversion met the budgets, or no step helped) converts
        the requested spec again on its calibration and held-out samples together (never the verification
        samples): the artifact a plain conversion makes, where its first step was calibrated on half of them
        (Silero VAD: the speech probability's largest error 0.98 against 0.20). A search that moved layers
        keeps the artifact it measured them on. (the artifact, `calibration` with its count)."""
        samples = self.calib.joined(self.selection[0])
        self.say(f"{target.name}: the search changed nothing: converting on all {len(samples)} calibration samples")
        artifact = self._route(target, route, tmp / "refit", spec, calib=samples)
        return artifact, replace(calibration, samples=len(samples))

    def _search(self, target, route: Route, step, tmp: Path, spec: QuantSpec, first: ModelArtifact | None):
        """Accuracy-aware int8 (edgekit.engine.search): (the artifact, its spec, the search's record)."""
        held_out, held_ref = self.selection
        say = lambda msg: self.say(f"{target.name}: {msg}")  # noqa: E731

        def measure(spec: QuantSpec, index: int) -> Measurement:
            started = time.perf_counter()
            artifact = first if index == 0 and first is not None else self._route(target, route, tmp / f"step{index}", spec)
            outputs, inspection = self._run(artifact, held_out)
            return Measurement(spec, artifact, compare(held_ref, outputs, {}).metrics, inspection.int8_weight_share,
                               artifact.bytes, inspection.float_weight_bytes, time.perf_counter() - started,
                               only_near_ties(held_ref, outputs), len(held_out))

        reference: list[str] = []  # the fp32 artifact the rankings compare with, converted once
        rank = lambda m: self._rank(target, route, m.artifact, m.spec, tmp, reference, say)  # noqa: E731
        terms = self.req.search
        say(f"searching for the fewest layers to keep back until {', '.join(b.text() for b in terms.budgets)} "
            f"on {len(held_out)} held-out samples")
        search = Search(terms.budgets, step.converter.capabilities.fallbacks, terms.min_int8_share, terms.max_steps, say,
                        passes=self._passes(step.converter))
        best, record = search.run(spec, measure, rank)
        record = replace(record, samples=len(held_out))
        say(f"search: {record.why} ({record.conversions} conversions, {record.seconds:.1f} s)")
        return best.artifact, best.spec, record

    def _rank(self, target, route: Route, artifact: ModelArtifact, spec: QuantSpec, tmp: Path, reference: list,
              say) -> list:
        """The layers of the int8 `artifact` ranked (edgekit.engine.layers) on the first calibration samples against
        the float model it was made from (kept in `reference` for the next ranking). A model already ranked in
        this run (an .ort's int8 .onnx that the onnx target ranked) is not ranked again."""
        from_source = route.quantizing_step.converter.traces_from_source  # a .pte: traced by its converter
        if not from_source and target.backend.trace_layers is None:  # an .ort: trace its int8 .onnx
            artifact = self.shared.quantized(route, spec, len(self.calib)) or artifact
        if artifact.path not in self.ranked:
            self.ranked[artifact.path] = self._ranking(route, artifact, spec, tmp, reference, say)
        return self.ranked[artifact.path]

    def _ranking(self, route: Route, artifact: ModelArtifact, spec: QuantSpec, tmp: Path, reference: list,
                 say) -> list:
        traced = self.calib.head(min(SAMPLES, len(self.calib)))
        say(f"ranking the layers of the model on {len(traced)} calibration samples")
        with captured():
            if not reference and not route.quantizing_step.converter.traces_from_source:
                made = self.shared.float_input(route)  # the very model the int8 one was made from
                reference.append(made.path if made is not None and made.format == artifact.format
                                 else float_reference(self.source, artifact.format, tmp / "float", say))
            return rank_layers(self.source, artifact.format, artifact.path, traced.inputs, calibration=self.calib,
                               spec=spec, float_path=reference[0] if reference else None, gains=True, say=say)

    def _attributed(self, target, route: Route, artifact: ModelArtifact, verdict, tmp: Path) -> str:
        """A failed int8 verdict's note: the layers whose float copy gains the outputs most (or that lose the
        most, where the backend cannot measure the gain), and the options that keep them back."""
        say = lambda msg: self.say(f"{target.name}: {msg}")  # noqa: E731
        try:
            ranked = worth_keeping(self._rank(target, route, artifact, artifact.meta.quantization, tmp, [], say))[:ATTRIBUTED]
        except EdgekitError as e:
            return f"the layers could not be ranked: {e.message}"
        except Exception as e:  # noqa: BLE001 - the verdict stands; only its explanation is missing
            return f"the layers could not be ranked: {type(e).__name__}: {e}"
        if not ranked:
            return "no layer loses signal on its own: the loss is spread through the model"
        gains = all(d.gain_db is not None for d in ranked)
        shown = ", ".join(f"{d.layer} ({'+' if gains else '−'}{d.gain_db if gains else d.loss_db:.1f} dB)" for d in ranked)
        failed = [f"{b.metric}={b.limit:g}" for b in (Budget(k, v) for k, v in verdict.thresholds.items() if k in METRICS)
                  if b.gap(b.value(verdict.metrics))]  # the thresholds missed, as budgets
        budget = (f"; --budget {' --budget '.join(failed)} keeps the fewest layers back until "
                  f"{'they hold' if len(failed) > 1 else 'it holds'}") if failed else ""
        return (f"the layers {'whose float copy gains the outputs' if gains else 'that lose'} the most SQNR: {shown}"
                f" (--keep {ranked[0].layer} keeps the first back{budget})")

    def _passes(self, converter) -> tuple[str, ...]:
        """The whole-model passes (edgekit.core.quant.PASSES) worth trying for this model on this backend:
        those the converter has, SmoothQuant only where the model has linears reading a normalization, int16
        activations at high resolution only where it has an image input (4-D); int16 activations everywhere
        for any model, after them."""
        refused = {p for p, on in self.req.quant.pass_flags().items() if on is False and p in CALIBRATION_PASSES}  # --no-…
        images = any(len(i.shape) == 4 for i in self.source.artifact.signature.inputs)
        return tuple(p for p in converter.capabilities.passes() if p not in refused
                     and (p != "smooth_quant" or self._smoothable) and (p != "int16_stem" or images))

    @cached_property
    def _smoothable(self) -> bool:
        return smooth_quant.applies(self.source)
