"""The main job as stages: `plan(request) → Plan`, `prepare(plan) → Prepared`, `run(prepared) → ConvertResult`.

`plan` resolves the targets and their routes and checks, before anything heavy runs, that every
route can do what was asked. `prepare` opens the source, loads and validates the data and runs
the source model on the verification samples, once (a `Sources` shared by several requests, as
`check` makes them, opens each model once). `run` builds every route, each shared intermediate
once (edgekit.build), verifies each artifact in its own runtime and only then places it; a failed
or interrupted run leaves no partial file behind. `convert` is the three in a row, with the
artifact cache (edgekit.cache) in front of `prepare`.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from edgekit.artifact import ModelArtifact
from edgekit.build import Intermediates, Progress, run_folder, stem_of
from edgekit.calibration.data import SampleSet
from edgekit.calibration.methods import (AUTO, HOLDOUT_FRACTION, METHODS, check_supported, quantizing_step,
                                        split_supported)
from edgekit.calibration.sources import CalibrationSpec
from edgekit.errors import BadInput, ConversionFailed
from edgekit.graph import Graph, Route
from edgekit.loading import Source, SourceOptions
from edgekit.quant import LayerOverride, QuantSpec
from edgekit.quiet import captured
from edgekit.results import ArtifactResult, ConvertResult
from edgekit.search import SEARCH_FRACTION
from edgekit.verify import THRESHOLDS, compare

RANDOM_SAMPLES = 16


@dataclass(frozen=True)
class ConvertRequest:
    source: str
    targets: tuple[str, ...] = ("all",)
    out_dir: str = "edgekit-out"
    precision: str = "fp32"
    eval_data: str | None = None
    thresholds: dict = field(default_factory=dict)
    source_options: SourceOptions = SourceOptions()
    calibration: CalibrationSpec | None = None
    calib_method: str = "minmax"
    int8_io: bool = False
    granularity: str = "per_channel"
    bias_correction: bool = False
    smooth_quant: bool = False
    overrides: tuple[LayerOverride, ...] = ()  # layers kept back from int8 (edgekit.quant)
    budgets: tuple = ()  # edgekit.search.Budget: search for the fewest layers to keep back until they hold
    min_int8_share: float = 0.8
    max_steps: int = 8

    def spec(self, method: str) -> QuantSpec:
        """The quantization spec of this request with the calibration method `method`."""
        return QuantSpec(self.precision, method, granularity=self.granularity, int8_io=self.int8_io,
                         bias_correction=self.bias_correction, smooth_quant=self.smooth_quant,
                         overrides=self.overrides)

    def __post_init__(self):
        if not self.targets:
            raise ValueError("at least one target is needed")
        if self.calib_method not in (*METHODS, AUTO):
            raise BadInput(f"unknown calibration method {self.calib_method!r}",
                           fix=f"use one of {', '.join((*METHODS, AUTO))}")
        if self.int8_io and self.precision != "int8":
            raise BadInput("--int8-io needs --precision int8 (or --int8)")
        if self.bias_correction and self.precision != "int8":
            raise BadInput("--bias-correction needs --precision int8 (or --int8): it corrects a calibrated model")
        if self.smooth_quant and self.precision != "int8":
            raise BadInput("--smooth-quant needs --precision int8 (or --int8): it smooths the activations that "
                           "static int8 quantizes")
        if (self.overrides or self.budgets) and self.precision != "int8":
            raise BadInput(f"{'--keep' if self.overrides else '--budget'} needs --precision int8 (or --int8): "
                           "it keeps layers of a static int8 model back")
        if not 0 <= self.min_int8_share <= 1:
            raise BadInput(f"--min-int8-share {self.min_int8_share:g} is not a share", fix="give a number from 0 to 1")


@dataclass(frozen=True)
class Plan:
    """What a request will do: the targets and the route to each, checked before anything runs."""

    request: ConvertRequest
    source_format: str
    routes: tuple[tuple[object, Route], ...]  # (edgekit.targets.Target, its route)
    calibrated: bool  # some route calibrates: calibration data is loaded
    thresholds: dict
    warnings: tuple[str, ...] = ()


def resolve_targets(names: tuple[str, ...], source_format: str, precision: str, graph: Graph) -> list:
    """The targets asked for; `all` is every target reachable from the source at `precision`."""
    from edgekit.targets import TARGETS, resolve

    if any(n.strip().lower() == "all" for n in names):
        reachable = graph.reachable(source_format)
        return [t for t in TARGETS.values() if precision in reachable.get(t.format, ())]
    out = []
    for n in names:
        t = resolve(n)
        if t not in out:
            out.append(t)
    return out


def plan(req: ConvertRequest) -> Plan:
    """Every target's route, checked: the method, passes and layer overrides asked for exist on each."""
    from edgekit.formats import detect

    thresholds = {**THRESHOLDS.get(req.precision, {}), **req.thresholds, **{b.metric: b.limit for b in req.budgets}}
    source_format = detect(req.source)  # fail fast on a bad path, before loading anything heavy
    graph = Graph()
    targets = resolve_targets(req.targets, source_format, req.precision, graph)
    if not targets:
        raise BadInput(f"no target is reachable from {source_format} at {req.precision}",
                       fix="edgekit graph lists the converters and the precisions they produce")
    routes = [(t, graph.route(source_format, t.format, req.precision)) for t in targets]
    warnings: list[str] = []
    if any(n.strip().lower() == "all" for n in req.targets):
        # `all` keeps the targets that can do what was asked, and says which it left out.
        routes, left_out = split_supported(routes, req.calib_method, req.spec(req.calib_method))
        warnings += [f"--target all: skipped {name}: {why}" for name, why in left_out]
        if not routes:
            raise BadInput("no target can do what was asked: " + "; ".join(f"{n}: {w}" for n, w in left_out))
    calibrated = any(quantizing_step(r) for _, r in routes)
    if calibrated:
        check_supported(routes, req.calib_method, req.spec(req.calib_method))
        if req.calibration is None:
            raise BadInput(f"{req.precision} needs calibration data",
                           fix="pass --calib data.npz (a folder of .npy or images, or module:function); "
                               "--calib random works but is not representative")
    return Plan(req, source_format, tuple(routes), calibrated, thresholds, tuple(warnings))


class Sources:
    """Source models opened once for several requests (`check` runs one per precision, then attribution),
    each with the reference outputs it gave on the samples it was run on."""

    def __init__(self):
        self._opened: dict[tuple, Source] = {}
        self._references: dict[tuple, list[np.ndarray]] = {}

    def open(self, location: str, options: SourceOptions, say: Progress = lambda _msg: None) -> Source:
        from edgekit.loading import open_source

        key = (location, options)
        if key not in self._opened:
            say(f"loading {location}")
            with captured():
                self._opened[key] = open_source(location, options)
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
    """A plan with its source opened, its data loaded and its reference outputs computed."""

    plan: Plan
    source: Source
    calib: SampleSet | None
    samples: SampleSet  # the verification samples
    reference: list  # the source's outputs on them
    selection: tuple | None  # (held-out samples, their reference outputs) for auto and the search
    warnings: tuple[str, ...] = ()


def prepare(plan: Plan, progress: Progress | None = None, sources: Sources | None = None) -> Prepared:
    """Open the source, load the calibration and eval data, and run the source on the eval samples."""
    from edgekit.calibration.data import load_samples, random_samples
    from edgekit.calibration.sources import load_calibration

    say = progress or (lambda _msg: None)
    req, sources = plan.request, sources or Sources()
    source_model = sources.open(req.source, req.source_options, say)
    source = source_model.artifact
    calib = held_out = None
    warnings: list[str] = []
    if plan.calibrated:
        calib, calib_warnings = load_calibration(req.calibration, source.signature)
        warnings += calib_warnings
        if req.calib_method == AUTO or req.budgets or not req.eval_data:
            # A search decides on its held-out samples: it holds out more (top-1 agreement on a dozen
            # samples cannot tell a 98% model from a 90% one).
            calib, held_out = calib.split(SEARCH_FRACTION if req.budgets else HOLDOUT_FRACTION)
    if req.eval_data:
        samples = load_samples(req.eval_data, source.signature, what="eval data")
    elif held_out is not None and req.budgets:
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
    reference = sources.reference(source_model, samples, say)
    selection = None
    if (req.calib_method == AUTO or req.budgets) and held_out is not None:
        selection = (held_out, sources.reference(source_model, held_out, say))
    return Prepared(plan, source_model, calib, samples, reference, selection, tuple(warnings))


def run(prepared: Prepared, progress: Progress | None = None, routes=None) -> list[ArtifactResult]:
    """Build, verify and place every route of the plan (or `routes`, a part of it), in order."""
    from edgekit.job import TargetJob

    say = progress or (lambda _msg: None)
    p, req = prepared.plan, prepared.plan.request
    out_dir = Path(req.out_dir)
    with run_folder(out_dir) as run_tmp:
        job = TargetJob(prepared.source, req, prepared.calib, prepared.selection, p.thresholds, out_dir, run_tmp,
                        stem_of(req.source), say, Intermediates(run_tmp / "built"))
        return [job.run(target, route, prepared.samples, prepared.reference) for target, route in (routes or p.routes)]


def convert(req: ConvertRequest, progress: Progress | None = None, *, sources: Sources | None = None,
            cache=None) -> ConvertResult:
    """Run the main job: plan every target, convert, verify in each runtime, place the artifacts.

    With `cache` (an edgekit.cache.ArtifactCache), a target whose cached result matches everything this
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
        with run_folder(Path(req.out_dir)) as staging:
            for name, hit in hits.items():
                placed = cache.place(hit, Path(req.out_dir), staging)
                if placed is not None:
                    say(f"{name}: placed from the cache ({placed.verdict.status} when verified; --no-cache converts again)")
                    results[name] = placed
                    source, source_sha256 = hit.source, hit.source_sha256
                    warnings += [w for w in hit.warnings if w not in warnings]
    missing = [(t, r) for t, r in p.routes if t.name not in results]
    if missing:
        prepared = prepare(p, say, sources)
        warnings += [w for w in prepared.warnings if w not in warnings]
        source = prepared.source.artifact
        source_sha256 = source.sha256 if source.files else None
        for result in run(prepared, say, missing):
            results[result.target] = result
            if cache is not None:
                cache.store_result(p, result, source, prepared.warnings)
    return ConvertResult(source, source_sha256, tuple(results[t.name] for t, _ in p.routes), tuple(warnings))


def _fingerprint(samples: SampleSet) -> str:
    import hashlib

    h = hashlib.sha256()
    for name in sorted(samples.inputs):
        h.update(name.encode())
        h.update(np.ascontiguousarray(samples.inputs[name]).tobytes())
    return h.hexdigest()


def verify_artifacts(req: ConvertRequest, paths: list[str], thresholds_for: Callable[[str], dict] | None = None,
                     progress: Progress | None = None, sources: Sources | None = None) -> ConvertResult:
    """Verify artifacts made elsewhere against the source model, each in its own runtime.

    An artifact's precision comes from its name (model.int8.tflite) or else from its weights; its
    thresholds are edgekit's for that precision updated with `thresholds_for(precision)`.
    """
    from edgekit.errors import reading
    from edgekit.formats import artifact_files, detect
    from edgekit.targets import TARGETS
    from edgekit.targets.inspection import inspect_artifact

    say = progress or (lambda _msg: None)
    given = []  # (path, format, files, inspection): every artifact is read, as `edgekit report` reads it, first
    for p in paths:
        fmt = detect(p)
        if fmt not in {t.format for t in TARGETS.values()}:
            raise BadInput(f"{p} is a {fmt} model, not an artifact edgekit can verify",
                           fix="give .tflite, .pte, .ptl, .onnx or .ort files")
        with reading(p, f"the .{fmt} artifact"), captured():
            files = artifact_files(fmt, p)  # first: it refuses external data outside the artifact's folder
            given.append((p, fmt, files, inspect_artifact(fmt, str(p)).to_json()))
    results = []
    with run_folder(Path(req.out_dir)):  # the runtimes' temporary files too stay inside --out
        prepared = prepare(Plan(req, detect(req.source), (), False, {}), say, sources)
        for p, fmt, files, inspection in given:
            results.append(_verify_given(p, fmt, files, inspection, prepared.source.artifact.signature,
                                         prepared.samples, prepared.reference, thresholds_for, say))
    source = prepared.source.artifact
    return ConvertResult(source, source.sha256 if source.files else None, tuple(results), prepared.warnings)


def _verify_given(p, fmt: str, files, inspection: dict, signature, samples, reference, thresholds_for,
                  say: Progress) -> ArtifactResult:
    from edgekit.formats import split_name
    from edgekit.runners import run_isolated
    from edgekit.targets import by_format
    from edgekit.targets.inspection import precision_from_inspection

    target = by_format(fmt)
    artifact = ModelArtifact(fmt, str(p), signature, files=files, meta={"route": ["given"], "seconds": 0.0})
    say(f"{target.name}: verifying {Path(p).name} in {target.runtime} on {len(samples)} samples")
    try:
        outputs, _ = run_isolated(artifact, samples.inputs)
    except ConversionFailed as e:  # nothing was converted: the file given is what cannot be run
        raise BadInput(f"{p}: {e.message}", fix="the file is damaged or not a valid artifact; "
                                               "give the file as the converter wrote it") from None
    precision = split_name(Path(p))[1] or precision_from_inspection(inspection["weight_bytes_by_dtype"],
                                                                    inspection["int8_weight_share"])
    thresholds = {**THRESHOLDS.get(precision, {}), **(thresholds_for(precision) if thresholds_for else {})}
    verdict = compare(reference, outputs, thresholds, samples.labels, inspection)
    return ArtifactResult.measured(target.name, artifact.evolve(precision=precision), verdict)


def _run_reference(source: Source, samples) -> list[np.ndarray]:
    """The source's outputs on each sample, one at a time, on one thread (faster for one sample than many)."""
    per_sample = []
    with _one_thread():
        for i in range(len(samples)):
            per_sample.append(source.run({k: v[i] for k, v in samples.inputs.items()}))
    return [np.stack([s[j] for s in per_sample]) for j in range(len(per_sample[0]))]


@contextmanager
def _one_thread():
    import sys

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
