"""The main job as stages: `plan(request) → Plan`, `prepare(plan) → Prepared`, `run(prepared) → results`.

`plan` resolves the targets and their routes and checks, before anything heavy runs, that every
route can do what was asked. `prepare` opens the source, loads and validates the data and runs
the source model on the verification samples, once (a `Sources` shared by several requests, as
`check` makes them, opens each model once). `run` builds every route, each shared intermediate
once (edgekit.engine.build), verifies each artifact in its own runtime and only then places it; a failed
or interrupted run leaves no partial file behind. `convert` is the three in a row, with the
artifact cache (edgekit.engine.cache) in front of `prepare`.
"""

from __future__ import annotations

import hashlib
import sys
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from edgekit.calibration.data import SampleSet, load_samples, random_samples
from edgekit.calibration.methods import HOLDOUT_FRACTION
from edgekit.calibration.sources import load_calibration
from edgekit.core.artifact import ArtifactMeta, ModelArtifact
from edgekit.core.errors import BadInput, ConversionFailed, reading
from edgekit.core.formats import FORMATS, artifact_files, detect, split_name
from edgekit.core.quiet import captured
from edgekit.core.results import ArtifactResult, ConvertResult, TargetFailure
from edgekit.engine.build import Intermediates, Progress, run_folder, stem_of
from edgekit.engine.job import TargetJob
from edgekit.engine.choice import DEFAULT_CHOICE_SAMPLES
from edgekit.engine.deadline import time_budget
from edgekit.engine.plan import Plan, plan
from edgekit.engine.reference import Reference, SampleReference, verify
from edgekit.engine.request import ConvertRequest
from edgekit.engine.isolation import start_workers
from edgekit.engine.search import SEARCH_FRACTION
from edgekit.core.source import Source
from edgekit.sources.loading import SourceOptions, open_source
from edgekit.targets import TARGETS, by_format
from edgekit.targets.inspection import inspect_artifact

RANDOM_SAMPLES = 16


class Sources:
    """Source models opened once for several requests (`check` runs one per precision, then attribution),
    each with the reference outputs it gave on the samples it was run on."""

    def __init__(self):
        self._opened: dict[tuple, Source] = {}
        self._references: dict[tuple, list[np.ndarray]] = {}

    def open(self, location: str, options: SourceOptions, say: Progress = lambda _msg: None) -> Source:
        """The source at `location` opened with `options`, once per pair; the frameworks' output is captured."""
        key = (location, options)
        if key not in self._opened:
            say(f"loading {location}")
            said: list[str] = []
            with captured():
                self._opened[key] = open_source(location, options, said.append)
            for message in said:  # after the frameworks' output is let go
                say(message)
        return self._opened[key]

    def reference(self, source: Source, samples: SampleSet, say: Progress) -> list[np.ndarray]:
        """The source's outputs on `samples`, run once per source and samples."""
        key = (id(source), len(samples), _fingerprint(samples))
        if key not in self._references:
            say(f"running the source model on {len(samples)} samples")
            self._references[key] = _run_reference(source, samples)
        return self._references[key]


@dataclass(frozen=True)
class Prepared:
    """A plan with its source opened, its data loaded and the reference its artifacts are judged against computed."""

    plan: Plan
    source: Source
    calib: SampleSet | np.ndarray | None  # the reference kind's calibration data (a decoder LM's: windows of tokens)
    reference: Reference  # what every artifact is judged against (edgekit.engine.reference)
    selection: tuple | None  # (samples, their reference outputs) for auto, the search and the default's choice
    warnings: tuple[str, ...] = ()


def prepare(plan: Plan, progress: Progress | None = None, sources: Sources | None = None, workers=None) -> Prepared:
    """Open the source, load its data and compute its reference, of the kind its format is judged by
    (edgekit.core.formats.Format.judged_by; edgekit.engine.reference): the one place the kind is chosen. The
    runtime workers of `workers` (None: the plan's targets) start first, to import their runtimes meanwhile."""
    say = progress or (lambda _msg: None)
    sources = sources or Sources()
    if FORMATS[plan.source_format].judged_by == "tokens":
        from edgekit.engine.lm_job import TokenReference, calibration_windows  # local: only a decoder LM's run needs it

        source = sources.open(plan.request.source, plan.request.source_options, say)
        calib = calibration_windows(source, plan.request, say) if plan.routes else None
        return Prepared(plan, source, calib, TokenReference(source, plan.request.eval_data, say), None)
    start_workers({t.format for t, _ in plan.routes} if workers is None else workers)
    return _prepare_samples(plan, say, sources)


def _prepare_samples(plan: Plan, say: Progress, sources: Sources) -> Prepared:
    """Load the calibration and eval data, holding calibration samples out where a choice or the verification
    needs them, and run the source on the verification samples (and on those a choice is made on)."""
    req = plan.request
    source_model = sources.open(req.source, req.source_options, say)
    source = source_model.artifact
    calib = held_out = None
    warnings: list[str] = []
    if plan.calibrated:
        calib, calib_warnings = load_calibration(req.calibration, source.signature)
        warnings += calib_warnings
        if req.auto or req.search.budgets or not req.eval_data:
            # A search decides on its held-out samples: it holds out more (top-1 agreement on a dozen
            # samples cannot tell a 98% model from a 90% one).
            calib, held_out = calib.split(SEARCH_FRACTION if req.search.budgets else HOLDOUT_FRACTION)
    if req.eval_data:
        samples = load_samples(req.eval_data, source.signature, what="eval data")
    elif held_out is not None and req.search.budgets:
        if len(held_out) < 2:
            raise BadInput(f"--budget without --eval needs more calibration samples: {len(held_out)} held out is too few "
                           "to both search on and verify on", fix="pass --eval data.npz")
        held_out, samples = held_out.split(0.5)  # the final verdict never sees the samples the search chose on
        warnings.append(f"no --eval data: searched on {len(held_out)} and verified on {len(samples)} other "
                        "held-out calibration samples")
    elif held_out is not None:
        samples = held_out
        warnings.append(f"no --eval data: verified on {len(held_out)} held-out calibration samples")
    else:
        samples = random_samples(source.signature, RANDOM_SAMPLES)
        warnings.append(f"no --eval data: verified on {RANDOM_SAMPLES} seeded random inputs, "
                        "which says little about accuracy; pass --eval data.npz")
    reference = SampleReference(source_model, samples, sources.reference(source_model, samples, say), req.output_kinds)
    selection = None
    if req.chooses_on_held_out and held_out is not None:
        selection = (held_out, sources.reference(source_model, held_out, say))
    elif calib is not None and any(req.default_choice(r.quantizing_step.converter) for _, r in plan.routes
                                   if r.quantizing_step):
        chosen_on = calib.head(min(DEFAULT_CHOICE_SAMPLES, len(calib)))  # the default recipe chooses its method on these
        selection = (chosen_on, sources.reference(source_model, chosen_on, say))
    return Prepared(plan, source_model, calib, reference, selection, tuple(warnings))


def run(prepared: Prepared, progress: Progress | None = None, routes=None) -> tuple[list[ArtifactResult], list[TargetFailure]]:
    """Build, verify and place every route of the plan (or `routes`, a part of it), in order, each target within
    the request's time budget. (the results, the targets that made no artifact): in a request of several targets,
    one that fails to convert or runs past its budget is a TargetFailure and the others go on; one target raises."""
    say = progress or (lambda _msg: None)
    p, req = prepared.plan, prepared.plan.request
    routes = routes or p.routes
    out_dir = Path(req.out_dir)
    last = [""]  # the step a target is in, for the time budget's message

    def tracked(msg: str) -> None:
        last[0] = msg.split(": ", 1)[-1]
        say(msg)

    results, failures = [], []
    thresholds = prepared.reference.thresholds(req.precision, req.judged_at)
    with run_folder(out_dir) as run_tmp:
        job = TargetJob(prepared.source, req, prepared.calib, prepared.selection, thresholds, out_dir, run_tmp,
                        stem_of(req.source), tracked, Intermediates(run_tmp / "built"))
        for target, route in routes:
            last[0] = ""
            try:
                with time_budget(req.time_budget, target.name, last):
                    results.append(job.run(target, route, prepared.reference))
            except ConversionFailed as e:
                if len(p.routes) == 1:  # the request's one target (others placed from the cache are kept)
                    raise
                failures.append(TargetFailure.of(target.name, e))
                say(f"{target.name}: no artifact: {e.message}")
    return results, failures


def convert(req: ConvertRequest, progress: Progress | None = None, *, sources: Sources | None = None,
            cache=None) -> ConvertResult:
    """Run the main job: plan every target, convert, verify in each runtime, place the artifacts.

    With `cache` (an edgekit.engine.cache.ArtifactCache), a target whose cached result matches everything this
    request depends on is placed from the cache, as it was verified; the source is opened only when
    some target is not cached, and each target converted is stored.
    """
    say = progress or (lambda _msg: None)
    p = plan(req)
    results: dict[str, ArtifactResult] = {}
    source = source_sha256 = None
    warnings = list(p.warnings)
    if cache is not None:
        hits = cache.lookup(p)
        if cache.skipped:
            say(f"not cached: {cache.skipped}")
        with run_folder(Path(req.out_dir)) if hits else nullcontext() as staging:
            for name, hit in hits.items():
                placed = cache.place(hit, Path(req.out_dir), staging)
                if placed is not None:
                    say(f"{name}: placed from the cache ({placed.verdict.status} when verified; --no-cache converts again)")
                    results[name] = placed
                    source, source_sha256 = hit.source, hit.source_sha256
                    warnings += [w for w in hit.warnings if w not in warnings]
    missing = [(t, r) for t, r in p.routes if t.name not in results]
    failures = []
    if missing:
        source, (made, failures), made_warnings = _run_missing(p, missing, say, sources or Sources())
        warnings += [w for w in made_warnings if w not in warnings]
        source_sha256 = source.sha256 if source.files else None
        for result in made:
            results[result.target] = result
            if cache is not None:
                cache.store_result(p, result, source, made_warnings)
    return ConvertResult(source, source_sha256, tuple(results[t.name] for t, _ in p.routes if t.name in results),
                         tuple(warnings), tuple(failures))


def _run_missing(p: Plan, missing: list, say: Progress, sources: Sources):
    """(the source's artifact, the results of the `missing` routes, the run's warnings)."""
    prepared = prepare(p, say, sources, workers={t.format for t, _ in missing})
    return prepared.source.artifact, run(prepared, say, missing), prepared.warnings


def _fingerprint(samples: SampleSet) -> str:
    h = hashlib.sha256()
    for name in sorted(samples.inputs):
        h.update(name.encode())
        h.update(np.ascontiguousarray(samples.inputs[name]).tobytes())
    return h.hexdigest()


def verify_artifacts(req: ConvertRequest, paths: list[str], thresholds_for: Callable[[str], dict] | None = None,
                     progress: Progress | None = None, sources: Sources | None = None) -> ConvertResult:
    """Verify artifacts made elsewhere against the source model, each in its own runtime, against the source's
    reference of its kind (`prepare`: samples, or a decoder LM's tokens).

    Every file is read first, as `edgekit report` reads it. An artifact's precision comes from its name
    (model.int8.tflite), else from its weights (a decoder LM's: fp32); its thresholds are edgekit's for that
    precision updated with `thresholds_for(precision)`.
    """
    say = progress or (lambda _msg: None)
    given = []  # (path, format, files, inspection)
    for p in paths:
        fmt = detect(p)
        if fmt not in {t.format for t in TARGETS.values()}:
            raise BadInput(f"{p} is a {fmt} model, not an artifact edgekit can verify",
                           fix="give .tflite, .pte, .ptl, .onnx or .ort files")
        with reading(p, f"the .{fmt} artifact"), captured():
            files = artifact_files(fmt, p)  # first: it refuses external data outside the artifact's folder
            given.append((p, fmt, files, inspect_artifact(fmt, str(p))))
    results = []
    with run_folder(Path(req.out_dir)):  # the runtimes' temporary files too stay inside --out
        prepared = prepare(Plan(req, detect(req.source), (), False), say, sources, {fmt for _, fmt, _, _ in given})
        source, reference = prepared.source, prepared.reference
        for p, fmt, files, inspection in given:
            precision = split_name(Path(p))[1] or reference.unnamed_precision(inspection)
            artifact = ModelArtifact(fmt, str(p), source.artifact.signature, precision, files=files,
                                     meta=ArtifactMeta(route=("given",), seconds=0.0))
            asked = thresholds_for(precision) if thresholds_for else {}
            try:
                verdict = verify(reference, artifact, by_format(fmt), reference.thresholds(precision, asked), asked, say)
            except ConversionFailed as e:  # nothing was converted: the file given is what cannot be run
                raise BadInput(f"{p}: {e.message}", fix="the file is damaged or not a valid artifact; "
                                                       "give the file as the converter wrote it") from None
            results.append(ArtifactResult.measured(by_format(fmt).name, artifact, verdict))
    return ConvertResult(source.artifact, source.artifact.sha256 if source.artifact.files else None, tuple(results),
                         prepared.warnings)


def _run_reference(source: Source, samples) -> list[np.ndarray]:
    """The source's outputs on each sample, one at a time, on one thread (faster for one sample than many)."""
    per_sample = []
    with _one_thread():
        for i in range(len(samples)):
            per_sample.append(source.run({k: v[i] for k, v in samples.inputs.items()}))
    return [np.stack([s[j] for s in per_sample]) for j in range(len(per_sample[0]))]


@contextmanager
def _one_thread():
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
