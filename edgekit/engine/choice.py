"""Choosing an int8 artifact's calibration among candidates: `--calib-method auto` (every method and
whole-model pass combination the backend has, on held-out samples) and the default recipe on a backend with
more than one default method (`Capabilities.default_methods`, on the first calibration samples). A mixin of
TargetJob (edgekit.engine.job), whose conversion and runtime it uses."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from edgekit.converters.base import ConvertContext, Reuse
from edgekit.core.artifact import BEFORE_LOWERING, IN_RUNTIME, CalibrationCandidate, CalibrationRecord, ModelArtifact
from edgekit.core.errors import ConversionFailed
from edgekit.core.quant import PASSES, Method, QuantSpec, auto_specs
from edgekit.core.quiet import captured
from edgekit.core.verify import compare
from edgekit.engine.graph import Route

# `auto` before lowering (PT2E): the torch reference graph and the runtime disagreed on one candidate's held-out
# SQNR by up to 0.8 dB (EfficientNet-Lite0, MTCNN ONet), enough to swap candidates a few tenths of a dB apart;
# those within CLOSE_DB of the best before lowering are lowered too and decided in the runtime.
CLOSE_DB = 0.5
MAX_LOWERED = 2  # one lowering more than the kept one at most: auto stays within 2x of one conversion
# The default recipe keeps the first of a backend's default methods unless another's SQNR on the selection samples
# is this much higher: on the zoo's onnx rows mean-minmax led minmax there by 2.5 dB (MTCNN P-Net) and 2.1 dB
# (PP-OCR rec), where it verified better, and by 0.2 dB on NudeNet, where it verified worse (see the README).
DEFAULT_MARGIN_DB = 1.0
DEFAULT_CHOICE_SAMPLES = 32  # the first calibration samples the default recipe measures its methods on


class Choosing:
    """TargetJob's choices among calibration candidates (see the module's docstring)."""

    def _auto(self, target, route: Route, step, tmp: Path,
              calibration: CalibrationRecord) -> tuple[ModelArtifact, QuantSpec, CalibrationRecord]:
        """Try every method the backend has, each with every combination of the whole-model passes
        worth trying (bias correction where the backend has it, SmoothQuant where the model also has
        linears reading a normalization; a pass asked for is on in every candidate); keep the one with
        the least drift on held-out samples. Returns its artifact, its spec and `calibration` with the
        candidates. A candidate the backend fails on is recorded with its error and left out. The candidates
        share their work where the backend can (ConvertContext.reuse: one calibration pass for every method on
        ONNX and PT2E, recorded as `calibration_passes`). Where the converter measures before lowering (PT2E:
        tflite from torch, executorch), the candidates are ranked by their quantized graphs' outputs, and only
        the best and those close to it are lowered and measured in the runtime, which decides (`_finalists`);
        each candidate's record says where it was measured."""
        held_out = self.selection[0]
        early = route.quantizing == 0 and step.converter.measures_before_lowering
        reuse = Reuse()
        # a pass the request insists on is on in every candidate; the others are tried off and on
        methods = step.converter.capabilities.methods
        base = replace(self.req.quant, method=methods[0], bias_correction=self.req.quant.bias_correction is True,
                       smooth_quant=self.req.quant.smooth_quant is True)
        specs = auto_specs(base, methods, self._passes(step.converter))
        if early:
            self.say(f"{target.name}: ranking {len(specs)} candidates by their quantized graphs before lowering "
                     f"(the methods share their calibration pass)")
        tried, failed = self._tried(target, route, step, tmp, specs, reuse, early)
        ranked = sorted(tried, key=lambda t: _drift_rank(t[2]), reverse=True)  # stable: the first of equals
        best, lowered = self._finalists(target, route, tmp, ranked, reuse, failed) if early else (next(iter(ranked), None), {})
        if best is None:
            raise failed[0][0]
        best_artifact, best_spec, chosen = best
        gone = {_which(c) for _, c in failed}
        return best_artifact, best_spec, replace(calibration, method=chosen.method, requested=Method.AUTO,
                                                 held_out_samples=len(held_out),
                                                 calibration_passes=reuse.calibration_passes or None,
                                                 candidates=(*(lowered.get(_which(c), c) for _, _, c in tried
                                                               if _which(c) not in gone), *(c for _, c in failed)))

    def _default(self, target, route: Route, step, tmp: Path,
                 calibration: CalibrationRecord) -> tuple[ModelArtifact, QuantSpec, CalibrationRecord]:
        """The default recipe where the backend has more than one method for it (Capabilities.default_methods):
        each method with the default passes, the conversions sharing one pass of extremes over the calibration
        samples, run in the runtime on the selection samples (the first calibration samples, or a search's
        held-out ones); the first method is kept unless another's SQNR is DEFAULT_MARGIN_DB higher. Returns its
        artifact, its spec and `calibration` with the candidates. A method that fails is recorded and left out."""
        specs = [self.req.spec_for(step.converter, m, self._smoothable) for m in self.req.default_choice(step.converter)]
        tried, failed = self._tried(target, route, step, tmp, specs, Reuse(histograms=False), early=False)
        if not tried:
            raise failed[0][0]
        kept = tried[0]
        for candidate in tried[1:]:
            if _drift_rank(candidate[2])[0] >= _drift_rank(kept[2])[0] + DEFAULT_MARGIN_DB:
                kept = candidate
        held_out = self.req.chooses_on_held_out  # a search's held-out samples, else the first calibration samples
        samples = len(self.selection[0])
        return kept[0], kept[1], replace(calibration, method=kept[1].method, held_out_samples=samples if held_out else None,
                                         chosen_on_calibration_samples=None if held_out else samples,
                                         candidates=(*(c for _, _, c in tried), *(c for _, c in failed)))

    def _tried(self, target, route: Route, step, tmp: Path, specs: list, reuse: Reuse, early: bool):
        """Each spec converted (or, `early`, quantized before lowering) and measured on the selection samples:
        ([(artifact or None, spec, its record)], [(the error, the record of a spec the backend failed on)])."""
        tried, failed = [], []
        for spec in specs:
            record = CalibrationCandidate(spec.method, spec.bias_correction, spec.smooth_quant)
            try:
                artifact, outputs = self._candidate(target, route, step, tmp, spec, reuse, early)
            except ConversionFailed as e:
                failed.append((e, replace(record, error=e.message)))
                self.say(f"{_what(target, spec)}: failed ({e.message})")
                continue
            tried.append((artifact, spec, self._measured(target, spec, record, outputs, BEFORE_LOWERING if early else IN_RUNTIME)))
        return tried, failed

    def _candidate(self, target, route: Route, step, tmp: Path, spec: QuantSpec, reuse: Reuse, early: bool):
        """(the candidate's artifact, or None when measured before lowering; its outputs on the held-out samples)."""
        held_out = self.selection[0]
        if not early:
            artifact = self._route(target, route, tmp / _folder(spec), spec, reuse)
            return artifact, self._run(artifact, held_out)[0]
        ctx = ConvertContext(self.source, tmp, self.calib, spec, reuse, ort_platform=self.req.ort_platform)
        with captured():
            return None, step.converter().measure(self.source.artifact, ctx, held_out)

    def _measured(self, target, spec: QuantSpec, record: CalibrationCandidate, outputs: list, where: str):
        """`record` with the drift of `outputs` on the selection samples, measured on `where`; said in the progress."""
        held_out, held_ref = self.selection
        m = compare(held_ref, outputs, {}).metrics["output_0"]
        shown = f"cosine {m['cosine']:.6f}" if "cosine" in m else f"max_abs {m['max_abs']:.6g}"  # a score: no cosine
        named = "held-out" if self.req.chooses_on_held_out else "calibration"
        self.say(f"{_what(target, spec)}: {shown} on {len(held_out)} {named} samples"
                 + (" (its quantized graph, before lowering)" if where == BEFORE_LOWERING else ""))
        return replace(record, sqnr_db=m["sqnr_db"], cosine=m.get("cosine"), max_abs=m["max_abs"], measured_on=where)

    def _finalists(self, target, route: Route, tmp: Path, ranked: list, reuse: Reuse, failed: list):
        """Lower the candidates ranked before lowering, the least drift first: the first, and those after it
        within CLOSE_DB of its SQNR (at most MAX_LOWERED tried), or, when none of them lowers, the next until
        one does; each lowered one runs in its runtime on the held-out samples, and the least drift there wins.
        Returns ((its artifact, spec, record) or None, {candidate: its record measured in the runtime}); each
        that does not lower goes to `failed` with its error."""
        lowered: dict = {}
        best = None
        for i, (_, spec, record) in enumerate(ranked):
            if lowered and (i >= MAX_LOWERED or _drift_rank(record)[0] < _drift_rank(ranked[0][2])[0] - CLOSE_DB):
                break
            self.say(f"{_what(target, spec)}: lowering it, to measure it in {target.runtime}")
            try:
                artifact = self._route(target, route, tmp / _folder(spec), spec, reuse)
            except ConversionFailed as e:
                failed.append((e, replace(record, error=f"lowering failed: {e.message}")))
                self.say(f"{_what(target, spec)}: lowering failed ({e.message})")
                continue
            measured = self._measured(target, spec, record, self._run(artifact, self.selection[0])[0], IN_RUNTIME)
            lowered[_which(record)] = measured
            if best is None or _drift_rank(measured) > _drift_rank(best[2]):
                best = (artifact, spec, measured)
        return best, lowered


def _what(target, spec: QuantSpec) -> str:
    return f"{target.name}: {spec.method} calibration{''.join(' with ' + PASSES[p] for p in spec.passes_on())}"


def _folder(spec: QuantSpec) -> str:
    return "+".join([spec.method, *spec.passes_on()])


def _which(candidate: CalibrationCandidate) -> tuple:
    return candidate.method, candidate.bias_correction, candidate.smooth_quant


def _drift_rank(candidate: CalibrationCandidate) -> tuple:
    """Least drift first: highest SQNR (None means identical outputs), then highest cosine."""
    sqnr = candidate.sqnr_db
    return (float("inf") if sqnr is None else sqnr, candidate.cosine if candidate.cosine is not None else -candidate.max_abs)
