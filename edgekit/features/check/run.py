"""Running a check: its units of work, each judged against its budgets, then attribution.

A check is cut into units that run on their own: a model's given artifacts, or one model at one
precision on a group of targets whose routes start alike (onnx and ort share their torch → onnx
export and, at int8, their calibrated ONNX model). Units run one after the other in this process
(one `Sources`: each model opened once), or with `jobs` > 1 in worker processes (edgekit.features.check.workers);
either way the cases come back in the same order with the same results. Attribution of int8 cases
runs after every unit, against the fp32 artifacts the check built.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from edgekit.calibration.sources import CalibrationSpec
from edgekit.core.artifact import sha256_files
from edgekit.core.errors import ConversionFailed, EdgekitError
from edgekit.engine.cache import ArtifactCache
from edgekit.engine.pipeline import Sources, convert, plan, verify_artifacts
from edgekit.engine.request import build_request
from edgekit.features.attribution import attribute
from edgekit.features.bench import bench
from edgekit.features.check.case import Case
from edgekit.features.check.config import ModelCheck
from edgekit.core.quant import PASSES, Precision
from edgekit.core.verify import HIGHER_IS_BETTER, INSPECTION_METRICS, Status
from edgekit.features.check.config import LATENCY_BUDGETS
from edgekit.features.check.workers import pool


@dataclass(frozen=True)
class Unit:
    """A piece of a check that runs on its own (see the module doc)."""

    model: ModelCheck
    precision: str | None  # None: the model's given artifacts
    targets: tuple[str, ...] = ()
    seed: dict | None = None  # what the baseline recorded for these targets (a searching int8 unit)
    positions: tuple[int, ...] = ()  # where each target comes in the model's plan at this precision


@dataclass(frozen=True)
class Options:
    """How every unit runs: the output folder, trust from the command line, the artifact cache."""

    out_dir: str
    trust: object = None  # a SourceOptions whose trust_pickle/trust_model_code come from the command line
    cache: bool = False  # use the artifact cache (edgekit.engine.cache), in every worker


def run_checks(models: tuple[ModelCheck, ...], out_dir: str, progress=None, attribution: str = "failing",
               trust=None, seeds: dict | None = None, cache=None, jobs: int = 1, executor: str = "local",
               ray_address: str | None = None) -> list[Case]:
    """Convert (or take the given artifacts) and verify every model × target × precision; judge each case
    against its budgets.

    `attribution`: for which int8 cases to rank the layers by drift — "failing", "all" or "none".
    `trust`: a SourceOptions whose trust_pickle/trust_model_code come from the command line (never
    from the config, which a pull request may change). `seeds`: case name → the layer overrides a
    baseline recorded, and whether it used a whole-model pass (see `baseline_seeds`); a searching case
    starts from them. `cache`: an edgekit.engine.cache.ArtifactCache, or None. `jobs`: worker processes, or
    with `executor` "ray" Ray tasks at once (on a new local Ray instance, or the cluster at `ray_address`).
    """
    options = Options(out_dir, trust, cache is not None)
    todo = units(models, seeds or {}, options)
    if executor == "ray" or (jobs > 1 and len(todo) > 1):
        size = {m.name: _bytes(m.path) for m in models}
        with pool(executor, jobs, progress is not None, max(2 << 30, 8 * max(size.values())), ray_address,
                  options.out_dir) as workers:
            # calibrating units and larger models first: they take longest
            judged = workers.map(run_unit, [(u, options) for u in todo],
                                 priority=lambda args: (args[0].precision == Precision.INT8, size[args[0].model.name]))
            wanted = _attributions(models, judged, attribution)
            if executor == "ray":  # here, where the fp32 artifacts of every node were brought back
                attributed = [attribute_case(m, c, options, f, None, progress) for m, c, f in wanted]
            else:
                attributed = workers.map(attribute_case, [(m, c, options, f) for m, c, f in wanted])
    else:
        sources = Sources()  # each model is opened once, for every precision and for attribution
        judged = [run_unit(u, options, sources, progress, cache) for u in todo]
        attributed = [attribute_case(m, c, options, f, sources, progress) for m, c, f in _attributions(models, judged, attribution)]
    done = {(c.model, c.target, c.precision): c for c in attributed}
    cases = _timed(models, [done.get((c.model, c.target, c.precision), c) for cases in judged for c in cases], progress)
    # The order of a serial run of one request per model and precision: models, precisions, targets as planned.
    position = {(u.model.name, u.precision, t): i for u in todo for t, i in zip(u.targets, u.positions)}
    by_model = {m.name: i for i, m in enumerate(models)}
    return sorted(cases, key=lambda c: (by_model[c.model], _precision_index(models[by_model[c.model]], c.precision),
                                        position.get((c.model, c.precision, c.target), 0)))


def units(models: tuple[ModelCheck, ...], seeds: dict, options: Options) -> list[Unit]:
    """The check's units, in the order a serial run takes them."""
    out = []
    for m in models:
        if m.artifacts:
            out.append(Unit(m, None))
            continue
        for precision in m.precisions:
            groups: dict[str, list[tuple[str, int]]] = {}
            for i, (target, route) in enumerate(plan(request(m, precision, options)).routes):
                groups.setdefault(route.steps[0].converter.name, []).append((target.name, i))
            for group in groups.values():
                seeded = [seeds.get(f"{m.name} {t} {precision}") for t, _ in group]
                if m.search is not None and precision == Precision.INT8 and any(seeded):
                    # Each target starts from the layers its last baseline kept back: one unit per target.
                    out += [Unit(m, precision, (t,), s, (i,)) for (t, i), s in zip(group, seeded)]
                else:
                    out.append(Unit(m, precision, tuple(t for t, _ in group), None, tuple(i for _, i in group)))
    return out


def request(m: ModelCheck, precision: str, options: Options, targets=None, seed=None):
    """The convert request of model `m` at `precision` (on `targets`, else the model's), started from `seed`."""
    searching = m.search is not None and precision == Precision.INT8
    return build_request(
        m.path, targets or m.targets or ("all",), Path(options.out_dir) / m.name / precision, precision=precision,
        eval_data=m.eval, thresholds=_metric_limits(m.budget(precision)), output_kinds=m.output_kinds,
        time_budget=m.time_budget, source_options=m.source_options(options.trust),
        calibration=CalibrationSpec(m.calibration, project=m.project, **m.calibration_options) if m.calibration and precision == Precision.INT8 else None,
        calib_method=m.calib_method, **m.options_for(precision),
        **{p: _whole_model_pass(on, bool(seed and seed[p]), precision) for p, on in m.pass_flags().items()},
        keep={o["layer"]: o["precision"] for o in (seed or {}).get("overrides", ())},
        **({"budgets": {k: v for k, v in m.budget(precision).items() if k in _OUTPUT_METRICS}, **m.search}
           if searching else {}),
    )


def run_unit(unit: Unit, options: Options, sources=None, progress=None, cache=None) -> list[Case]:
    """Convert and verify one unit (or verify its given artifacts); its cases, judged."""
    m = unit.model
    if cache is None and options.cache:
        cache = ArtifactCache()
    if unit.precision is None:
        result = verify_artifacts(request(m, Precision.FP32, options), list(m.artifacts), lambda p: _metric_limits(m.budget(p)),
                                  progress, sources)
        return [_judge(m, r, result, r.artifact.precision) for r in result.artifacts]
    result = convert(request(m, unit.precision, options, unit.targets, unit.seed), progress, sources=sources, cache=cache)
    for failure in result.failures:  # the gate stops on a target that made no artifact, as on a unit of one target
        raise ConversionFailed(failure.message, fix=failure.fix)
    return [_judge(m, r, result, unit.precision) for r in result.artifacts]


def _attributions(models: tuple[ModelCheck, ...], judged: list[list[Case]], attribution: str) -> list[tuple]:
    """(model, case, its fp32 artifact's path or None) for every case whose layers are to be ranked."""
    cases = [c for unit in judged for c in unit]
    floats = {(c.model, c.target): c.path for c in cases if c.precision == Precision.FP32}
    by_name = {m.name: m for m in models}
    return [(by_name[c.model], c, floats.get((c.model, c.target))) for c in cases if _wants_layers(c, attribution)]


def _bytes(path: str) -> int:
    p = Path(path)
    return p.stat().st_size if p.is_file() else sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else 0


def _precision_index(m: ModelCheck, precision: str) -> int:
    return m.precisions.index(precision) if precision in m.precisions else 0


_OUTPUT_METRICS = {k for k in HIGHER_IS_BETTER if k not in INSPECTION_METRICS}


def _whole_model_pass(asked: bool | None, seeded: bool, precision: str) -> bool | None:
    """A whole-model pass (edgekit.core.quant.PASSES) of a case: on where the baseline's search kept it, else as
    the config asks (None: the default recipe, bias correction wherever the backend has it); int8 only."""
    if precision != Precision.INT8:
        return False
    return True if seeded else asked


def _metric_limits(budget: dict) -> dict:
    return {k: v for k, v in budget.items() if k in HIGHER_IS_BETTER}


def _judge(m: ModelCheck, r, result, precision: str) -> Case:
    """One artifact against its budgets: verification reasons, then accuracy and size budgets."""
    budget = m.budget(precision)
    reasons = list(r.verdict.reasons)
    acc = r.verdict.task_accuracy
    if "max_accuracy_drop" in budget or "min_accuracy" in budget:
        if acc is None:
            reasons.append("an accuracy budget needs eval data with labels")
        else:
            drop = acc["reference"] - acc["artifact"]
            if drop > budget.get("max_accuracy_drop", float("inf")):
                reasons.append(f"accuracy drop {drop * 100:.2f} points > budget "
                               f"{budget['max_accuracy_drop'] * 100:.2f} ({acc['reference']:.4f} → {acc['artifact']:.4f})")
            if acc["artifact"] < budget.get("min_accuracy", -1):
                reasons.append(f"accuracy {acc['artifact']:.4f} < budget {budget['min_accuracy']:.4f}")
    if r.bytes > budget.get("max_bytes", float("inf")):
        reasons.append(f"size {r.bytes} bytes > budget {int(budget['max_bytes'])}")
    hashes = {"artifact": r.sha256, "model": result.source_sha256,
              "calibration": _file_sha256(m.calibration) if m.calibration and precision == Precision.INT8 else None}
    meta = r.artifact.meta
    spec = meta.quantization
    return Case(m.name, r.target, precision, Status.FAIL if reasons else Status.PASS, tuple(reasons),
                r.bytes, r.verdict.metrics, acc, r.artifact.path, meta.seconds or 0.0, hashes, dict(meta.tool_versions),
                budget=budget, overrides=spec.overrides if spec else (), search=meta.search, **{p: bool(spec and spec.pass_flags()[p]) for p in PASSES})


def _timed(models: tuple[ModelCheck, ...], cases: list[Case], progress=None) -> list[Case]:
    """The cases of models with a latency budget, timed in their runtimes at 1 thread (edgekit.features.bench,
    host CPU latency; the int8 ones against the fp32 artifact of the same target) and judged."""
    wanted = {m.name: m for m in models if any(k in b for b in m.budgets.values() for k in LATENCY_BUDGETS)}
    paths = [c.path for c in cases if c.model in wanted and c.path]
    if not paths:
        return cases
    fp32 = {(c.model, c.target): c.path for c in cases if c.precision == Precision.FP32 and c.path}
    partners = {c.path: fp32[(c.model, c.target)] for c in cases
                if c.precision != Precision.FP32 and c.path and (c.model, c.target) in fp32}
    timed = bench(paths, threads=(1,), progress=progress, partners=partners).by_path()
    out = []
    for c in cases:
        a = timed.get(str(Path(c.path).resolve())) if c.model in wanted and c.path else None
        if a is None:
            out.append(c)
            continue
        budget, t = wanted[c.model].budget(c.precision), a.timings[0]
        ratio = a.ratio_to_fp32.get(1)
        latency = {"threads": 1, "median_ms": t["median_ms"], "p90_ms": t["p90_ms"], "ratio_to_fp32": ratio,
                   "warnings": list(a.warnings)}  # why int8 is not faster; an .ort laid out for another CPU
        reasons = []
        if t["median_ms"] > budget.get("max_latency_ms", float("inf")):
            reasons.append(f"latency {t['median_ms']:.3g} ms (median at 1 thread, host CPU) > budget "
                           f"{budget['max_latency_ms']:g} ms")
        if "min_int8_speedup" in budget and c.precision in (Precision.INT8, Precision.INT8_DYNAMIC, Precision.INT8_WEIGHTS):
            if ratio is None:
                reasons.append("min_int8_speedup needs the fp32 artifact of the same target: add fp32 to precisions")
            elif 1 / ratio < budget["min_int8_speedup"]:
                reasons.append(f"int8 runs {1 / ratio:.2f}× as fast as fp32 (1 thread, host CPU) < budget "
                               f"{budget['min_int8_speedup']:g}×" + (f" — {'; '.join(a.warnings)}" if a.warnings else ""))
        out.append(replace(c, latency=latency, reasons=c.reasons + tuple(reasons),
                           status=Status.FAIL if reasons else c.status))
    return out


def _wants_layers(c: Case, attribution: str) -> bool:
    return c.precision == Precision.INT8 and (attribution == "all" or (attribution == "failing" and c.status == Status.FAIL))


def attribute_case(m: ModelCheck, c: Case, options: Options, float_path: str | None, sources=None,
                   progress=None) -> Case:
    """The case with its layers ranked by the SQNR they lose, or a note saying why there are none. The source
    is the one `sources` opened for the conversion; the float reference is the case's fp32 artifact when the
    config has one."""
    trust = options.trust
    try:
        model = (sources or Sources()).open(m.path, m.source_options(trust))
        layers = attribute(c.path, m.path, source_options=m.source_options(trust), model=model, float_path=float_path,
                           eval_data=m.eval,
                           calibration=CalibrationSpec(m.calibration, project=m.project, **m.calibration_options) if m.calibration else None,
                           method=m.calib_method or "minmax",  # the PT2E backends' default recipe
                           bias_correction=c.bias_correction, smooth_quant=c.smooth_quant,
                           progress=progress)
    except EdgekitError as e:
        return replace(c, layers_note=f"no per-layer attribution: {e}")
    return replace(c, layers=tuple(layers))


def _file_sha256(path: str) -> str | None:
    return sha256_files([path]) if Path(path).is_file() else None
