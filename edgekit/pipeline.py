"""Convert → verify → place: the main job, as a library call.

Every route is planned and checked before the first converter runs. Each artifact is written
into a private temporary folder inside the output folder, verified in its own runtime, and
only then moved into place; a failed or interrupted run leaves no partial file behind.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Callable

import numpy as np

from edgekit.artifact import ModelArtifact
from edgekit.calibration.data import SampleSet
from edgekit.calibration.methods import (AUTO, HOLDOUT_FRACTION, METHODS, check_supported, quantizing_step,
                                        split_supported)
from edgekit.calibration.sources import CalibrationSpec
from edgekit.errors import BadInput, ConversionFailed
from edgekit.graph import Graph, Plan
from edgekit.loading import Source, SourceOptions
from edgekit.quant import PASSES, LayerOverride, QuantSpec, auto_specs
from edgekit.quiet import captured, private_dir, temp_files_in
from edgekit.search import SEARCH_FRACTION
from edgekit.verify import THRESHOLDS, Verdict, compare, only_near_ties

SCHEMA = "edgekit.convert/1"
TMP_PREFIX = ".edgekit-tmp-"
RANDOM_SAMPLES = 16

Progress = Callable[[str], None]


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
class ArtifactResult:
    """One verified artifact. `bytes` and `sha256` are of the files as verified (measured before they were
    placed), so a later run into the same folder cannot change what this result reports."""

    target: str
    artifact: ModelArtifact
    verdict: Verdict
    bytes: int
    sha256: str

    @classmethod
    def measured(cls, target: str, artifact: ModelArtifact, verdict: Verdict) -> "ArtifactResult":
        return cls(target, artifact, verdict, artifact.bytes, artifact.sha256)

    def to_json(self) -> dict:
        a = self.artifact
        out = {
            "target": self.target, "precision": a.precision, "format": a.format, "path": a.path,
            "files": list(a.files), "bytes": self.bytes, "sha256": self.sha256,
            "route": list(a.meta.get("route", [])), "tool_versions": dict(a.meta.get("tool_versions", {})),
            "seconds": a.meta.get("seconds"), "calibration": a.meta.get("calibration"),
            "verification": self.verdict.to_json(),
        }
        for key in ("quantization", "search"):  # the int8 spec as made (its overrides); the accuracy-aware search
            if key in a.meta:
                out[key] = a.meta[key]
        if "mobile_package" in a.meta:  # .ort: does it fit ONNX Runtime's mobile packages (NNAPI/CoreML)
            out["mobile_package"] = a.meta["mobile_package"]
        return out


@dataclass(frozen=True)
class ConvertResult:
    source: ModelArtifact
    source_sha256: str | None
    artifacts: tuple[ArtifactResult, ...]
    warnings: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        return any(r.verdict.status == "fail" for r in self.artifacts)

    def to_json(self) -> dict:
        return {
            "schema": SCHEMA,
            "source": {"path": self.source.path, "format": self.source.format, "sha256": self.source_sha256,
                       "signature": self.source.signature.to_json()},
            "artifacts": [r.to_json() for r in self.artifacts],
            "warnings": list(self.warnings),
        }


@dataclass(frozen=True)
class ConvertContext:
    """What converters may use beyond their input artifact."""

    source: Source  # the opened source model (a TorchSource for PyTorch sources)
    work_dir: Path
    calibration: SampleSet | None = None
    spec: QuantSpec = QuantSpec()  # its method is a concrete one, never "auto"


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


def convert(req: ConvertRequest, progress: Progress | None = None) -> ConvertResult:
    """Run the main job: plan every target, convert, verify in each runtime, place the artifacts."""
    from edgekit.formats import detect

    say = progress or (lambda _msg: None)
    thresholds = {**THRESHOLDS.get(req.precision, {}), **req.thresholds, **{b.metric: b.limit for b in req.budgets}}
    source_format = detect(req.source)  # fail fast on a bad path, before loading anything heavy
    graph = Graph()
    targets = resolve_targets(req.targets, source_format, req.precision, graph)
    if not targets:
        raise BadInput(f"no target is reachable from {source_format} at {req.precision}",
                       fix="edgekit graph lists the converters and the precisions they produce")
    plans: list[tuple[object, Plan]] = [(t, graph.plan(source_format, t.format, req.precision)) for t in targets]
    warnings: list[str] = []
    if any(n.strip().lower() == "all" for n in req.targets):
        # `all` keeps the targets that can do what was asked, and says which it left out.
        plans, left_out = split_supported(plans, req.calib_method, req.spec(req.calib_method))
        warnings += [f"--target all: skipped {name}: {why}" for name, why in left_out]
        if not plans:
            raise BadInput("no target can do what was asked: " + "; ".join(f"{n}: {w}" for n, w in left_out))
    calibrated = any(quantizing_step(p) for _, p in plans)
    if calibrated:
        check_supported(plans, req.calib_method, req.spec(req.calib_method))
        if req.calibration is None:
            raise BadInput(f"{req.precision} needs calibration data",
                           fix="pass --calib data.npz (a folder of .npy or images, or module:function); "
                               "--calib random works but is not representative")

    out_dir = Path(req.out_dir)
    with run_folder(out_dir) as run_tmp:
        source_model, calib, held_out, samples, reference = _reference(req, calibrated, warnings, say)
        selection = None
        if (req.calib_method == AUTO or req.budgets) and held_out is not None:
            selection = (held_out, reference if held_out is samples else _run_reference(source_model, held_out))
        job = _Job(source_model, req, calib, selection, thresholds, out_dir, run_tmp, _stem(req.source), say)
        results = [job.run(target, plan, samples, reference) for target, plan in plans]
    source = source_model.artifact
    return ConvertResult(source, source.sha256 if source.files else None, tuple(results), tuple(warnings))


@contextmanager
def run_folder(out_dir: Path):
    """A run's private folder `.edgekit-tmp-<pid>-*` inside `out_dir` (made, with its parents, if missing).

    Every library's temporary files go there while the block runs; it is removed at the end (or, if
    this process is killed, by the next run into the same folder), and so are the folders of `out_dir`
    the run made if it left nothing in them.
    """
    created = [p for p in (out_dir, *out_dir.parents) if not p.exists()]  # the deepest first
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        run_tmp = Path(private_dir(out_dir, TMP_PREFIX))
    except OSError as e:
        raise BadInput(f"cannot write into the output folder {out_dir}: {e.strerror}",
                       fix="give --out a folder you can write to") from None
    try:
        with temp_files_in(run_tmp):
            yield run_tmp
    finally:
        shutil.rmtree(run_tmp, ignore_errors=True)
        for folder in created:
            if any(folder.iterdir()):
                break
            folder.rmdir()


def _reference(req: ConvertRequest, calibrated: bool, warnings: list[str], say: Progress):
    """Open the source, load the calibration and eval data, and run the source on the eval samples."""
    from edgekit.calibration.data import load_samples, random_samples
    from edgekit.calibration.sources import load_calibration
    from edgekit.loading import open_source

    say(f"loading {req.source}")
    with captured():
        source_model = open_source(req.source, req.source_options)
    source = source_model.artifact
    calib = held_out = None
    if calibrated:
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
    say(f"running the source model on {len(samples)} samples")
    return source_model, calib, held_out, samples, _run_reference(source_model, samples)


def verify_artifacts(req: ConvertRequest, paths: list[str], thresholds_for: Callable[[str], dict] | None = None,
                     progress: Progress | None = None) -> ConvertResult:
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
    warnings: list[str] = []
    results = []
    with run_folder(Path(req.out_dir)):  # the runtimes' temporary files too stay inside --out
        source_model, _, _, samples, reference = _reference(req, False, warnings, say)
        for p, fmt, files, inspection in given:
            results.append(_verify_given(p, fmt, files, inspection, source_model.artifact.signature, samples,
                                         reference, thresholds_for, say))
    source = source_model.artifact
    return ConvertResult(source, source.sha256 if source.files else None, tuple(results), tuple(warnings))


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


@dataclass(frozen=True)
class _Job:
    source: Source
    req: ConvertRequest
    calib: SampleSet | None
    selection: tuple | None  # (held-out samples, their reference outputs) for --calib-method auto
    thresholds: dict
    out_dir: Path
    work: Path  # the run's private folder inside out_dir: artifacts are built there, then placed
    stem: str
    say: Progress

    def run(self, target, plan: Plan, samples: SampleSet, reference: list) -> ArtifactResult:
        from edgekit.runners import run_isolated

        tmp = Path(tempfile.mkdtemp(prefix=f"{target.name}-", dir=self.work))
        try:
            step = quantizing_step(plan)
            calibration = None
            if step is None:
                artifact = self._route(target, plan, tmp, self.req.spec("minmax"))
            else:
                if self.req.calib_method == AUTO:
                    artifact, spec, calibration = self._auto(target, plan, step, tmp)
                else:
                    artifact, spec, calibration = None, self.req.spec(self.req.calib_method), {"method": self.req.calib_method}
                search = None
                if self.req.budgets:
                    artifact, spec, search = self._search(target, plan, step, tmp, spec, artifact)
                elif artifact is None:
                    artifact = self._route(target, plan, tmp, spec)
                calibration = {"source": self.calib.source, "samples": len(self.calib), **calibration}
                meta = {"calibration": calibration, "quantization": spec.to_json()}
                artifact = artifact.evolve(meta={**meta, "search": search} if search else meta)
            self.say(f"{target.name}: verifying in {target.runtime} on {len(samples)} samples")
            started = time.perf_counter()
            outputs, inspection = run_isolated(artifact, samples.inputs, inspect=True)
            verdict = compare(reference, outputs, self.thresholds, samples.labels, inspection)
            search = artifact.meta.get("search")
            if search and search["stopped"] == "met" and verdict.status == "fail":
                note = (f"the search met its budgets on {search['samples']} held-out calibration samples, not on the "
                        f"{len(samples)} verification samples: give more (and more varied) calibration samples")
                artifact = artifact.evolve(meta={"search": {**search, "note": note}})
            measured = ArtifactResult.measured(target.name, artifact, verdict)
            placed = replace(measured, artifact=_place(artifact, self.out_dir))
            self.say(f"{target.name}: {verdict.status} ({time.perf_counter() - started:.1f} s to verify)")
            return placed
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _route(self, target, plan: Plan, folder: Path, spec: QuantSpec) -> ModelArtifact:
        ctx = ConvertContext(self.source, folder, self.calib, spec)
        return build(plan, ctx, self.stem, lambda msg: self.say(f"{target.name}: {msg}"))

    def _search(self, target, plan: Plan, step, tmp: Path, spec: QuantSpec, first: ModelArtifact | None):
        """Accuracy-aware int8 (edgekit.search): (the artifact, its spec, the search's record)."""
        from edgekit.attribution import SAMPLES, float_reference, rank_layers
        from edgekit.runners import run_isolated
        from edgekit.search import Measurement, Search

        held_out, held_ref = self.selection
        say = lambda msg: self.say(f"{target.name}: {msg}")  # noqa: E731

        def measure(spec: QuantSpec, index: int) -> Measurement:
            started = time.perf_counter()
            artifact = first if index == 0 and first is not None else self._route(target, plan, tmp / f"step{index}", spec)
            outputs, inspection = run_isolated(artifact, held_out.inputs, inspect=True)
            floats = sum(n for dtype, n in inspection["weight_bytes_by_dtype"].items() if dtype.startswith(("float", "bfloat")))
            return Measurement(spec, artifact, compare(held_ref, outputs, {}).metrics, inspection["int8_weight_share"],
                               artifact.bytes, floats, time.perf_counter() - started, only_near_ties(held_ref, outputs))

        reference: list[str] = []  # the fp32 artifact the rankings compare with, converted once

        def rank(m: Measurement) -> list:
            traced = self.calib.head(min(SAMPLES, len(self.calib)))
            say(f"ranking the layers of the model by the SQNR each loses on {len(traced)} calibration samples")
            with captured():
                if not reference and target.format != "pte":
                    reference.append(float_reference(self.source, target.format, tmp / "float", say))
                return rank_layers(self.source, target.format, m.artifact.path, traced.inputs, calibration=self.calib,
                                   spec=m.spec, float_path=reference[0] if reference else None, say=say)

        say(f"searching for the fewest layers to keep back until {', '.join(b.text() for b in self.req.budgets)} "
            f"on {len(held_out)} held-out samples")
        search = Search(self.req.budgets, step.converter.fallbacks, self.req.min_int8_share, self.req.max_steps, say,
                        passes=self._passes(step.converter))
        best, record = search.run(spec, measure, rank)
        record["samples"] = len(held_out)
        say(f"search: {record['why']} ({record['conversions']} conversions, {record['seconds']:.1f} s)")
        return best.artifact, best.spec, record

    def _passes(self, converter) -> tuple[str, ...]:
        """The whole-model passes (edgekit.quant.PASSES) worth trying for this model on this backend:
        those the converter has, SmoothQuant only where the model has linears reading a normalization."""
        return tuple(p for p in PASSES if getattr(converter, p) and (p != "smooth_quant" or self._smoothable))

    @cached_property
    def _smoothable(self) -> bool:
        from edgekit.calibration import smooth_quant

        return smooth_quant.applies(self.source)

    def _auto(self, target, plan: Plan, step, tmp: Path) -> tuple[ModelArtifact, QuantSpec, dict]:
        """Try every method the backend has, each with every combination of the whole-model passes
        worth trying (bias correction where the backend has it, SmoothQuant where the model also has
        linears reading a normalization; a pass asked for is on in every candidate); keep the one with
        the least drift on held-out samples. Returns its artifact, its spec and the record of the
        candidates. A candidate the backend fails on is recorded with its error and left out."""
        from edgekit.runners import run_isolated

        held_out, held_ref = self.selection
        tried, failed = [], []
        for spec in auto_specs(self.req.spec(self.req.calib_method), step.converter.methods, self._passes(step.converter)):
            method, passes = spec.method, [p for p in PASSES if getattr(spec, p)]
            what = f"{target.name}: {method} calibration{''.join(' with ' + PASSES[p] for p in passes)}"
            record = {"method": method, "bias_correction": spec.bias_correction, "smooth_quant": spec.smooth_quant}
            try:
                artifact = self._route(target, plan, tmp / "+".join([method, *passes]), spec)
            except ConversionFailed as e:
                failed.append((e, {**record, "error": e.message}))
                self.say(f"{what}: failed ({e.message})")
                continue
            m = compare(held_ref, run_isolated(artifact, held_out.inputs)[0], {}).metrics["output_0"]
            tried.append((artifact, spec, {**record, "sqnr_db": m["sqnr_db"], "cosine": m["cosine"], "max_abs": m["max_abs"]}))
            self.say(f"{what}: cosine {m['cosine']:.6f} on {len(held_out)} held-out samples")
        if not tried:
            raise failed[0][0]
        best_artifact, best_spec, best = max(tried, key=lambda t: _drift_rank(t[2]))
        return best_artifact, best_spec, {"method": best["method"], "requested": AUTO, "held_out_samples": len(held_out),
                                          "candidates": [c for _, _, c in tried] + [c for _, c in failed]}


def build(plan: Plan, ctx: ConvertContext, stem: str, say: Progress) -> ModelArtifact:
    """Run the steps of `plan` on the source in `ctx`, writing into ctx.work_dir."""
    from edgekit.targets import by_format

    ctx.work_dir.mkdir(parents=True, exist_ok=True)
    suffix = "" if plan.precision == "fp32" else f".{plan.precision}"
    artifact = ctx.source.artifact.evolve(meta={"route": [ctx.source.artifact.format]})
    for i, step in enumerate(plan.steps):
        conv = step.converter
        ext = by_format(conv.target).extension
        last = i == len(plan.steps) - 1
        path = ctx.work_dir / (f"{stem}{suffix}{ext}" if last else f"step{i}-{stem}{ext}")
        detail = (f", {ctx.spec.method} calibration" + (" and SmoothQuant" if ctx.spec.smooth_quant else "")
                  + (" and bias correction" if ctx.spec.bias_correction else "")
                  if step is quantizing_step(plan) else "")
        say(f"converting {artifact.format} → {conv.target} at {step.precision} ({conv.name}{detail})")
        with captured(), temp_files_in(ctx.work_dir):
            artifact = conv()(artifact, path, step.precision, ctx)
    return artifact


def _drift_rank(candidate: dict) -> tuple:
    """Least drift first: highest SQNR (None means identical outputs), then highest cosine."""
    sqnr = candidate["sqnr_db"]
    return (float("inf") if sqnr is None else sqnr, candidate["cosine"])


def _run_reference(source: Source, samples) -> list[np.ndarray]:
    per_sample = []
    n = len(samples)
    for i in range(n):
        per_sample.append(source.run({k: v[i] for k, v in samples.inputs.items()}))
    return [np.stack([s[j] for s in per_sample]) for j in range(len(per_sample[0]))]


def _place(artifact: ModelArtifact, out_dir: Path) -> ModelArtifact:
    """Move the artifact's files, as a set, from the temporary folder into the output folder.

    Under a lock on the folder (two runs into one --out place one set after the other), side files an
    earlier artifact of the same name left there and this one does not have (an `.io.json`, the
    external data the earlier model names) are removed, then the side files are renamed into place
    and the model file last.
    """
    from edgekit.formats import onnx_files, side_file_names

    main = Path(artifact.path).name
    names = [Path(f).name for f in artifact.files]
    with _locked(out_dir):
        old = out_dir / main
        earlier = set(side_file_names(artifact.format, old))
        if artifact.format == "onnx" and old.is_file():
            try:
                earlier |= {Path(f).name for f in onnx_files(old)[1:]}
            except Exception:  # an unreadable earlier model: its edgekit side files still go
                pass
        for name in earlier - set(names):
            stale = out_dir / name
            if stale.parent == out_dir and stale.is_file():
                stale.unlink()
        for f in sorted(artifact.files, key=lambda f: Path(f).name == main):
            os.replace(f, out_dir / Path(f).name)
    return artifact.evolve(path=str(out_dir / main), files=tuple(str(out_dir / n) for n in names))


@contextmanager
def _locked(folder: Path):
    """An exclusive lock on `folder` among edgekit processes (flock on the directory; no lock file)."""
    import fcntl

    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _stem(source: str) -> str:
    p = Path(source)
    if p.exists():
        return p.stem if p.is_file() else p.name
    return source.rpartition(":")[2] or "model"
