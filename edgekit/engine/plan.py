"""The first stage: what a request asks for, and the plan of it — each target's route, checked before
anything heavy runs (a backend that lacks the calibration method, the passes or the layer overrides
asked for is an error, or with `--target all` a target left out with the reason)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edgekit.converters.base import converters, node_of
from edgekit.core.errors import BadInput
from edgekit.core.formats import FORMATS, detect
from edgekit.core.quant import Lack, Precision
from edgekit.core.verify import JUDGED_AT
from edgekit.engine.build import stem_of
from edgekit.engine.graph import Graph, Route
from edgekit.engine.request import ConvertRequest
from edgekit.targets import TARGETS, resolve


@dataclass(frozen=True)
class Plan:
    """What a request will do: the targets and the route to each, checked before anything runs."""

    request: ConvertRequest
    source_format: str
    routes: tuple[tuple[object, Route], ...]  # (edgekit.targets.Target, its route)
    calibrated: bool  # some route calibrates: calibration data is loaded
    warnings: tuple[str, ...] = ()


def resolve_targets(names: tuple[str, ...], source_format: str, precision: str, graph: Graph) -> list:
    """The targets asked for; `all` is every target reachable from the source at `precision`."""
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
    source_format = detect(req.source)  # fail fast on a bad path, before loading anything heavy
    graph = Graph()
    converts_at = JUDGED_AT[FORMATS[source_format].judged_by]
    if req.precision not in converts_at:
        raise BadInput(f"a {source_format} source is converted at {', '.join(converts_at[:-1])} or {converts_at[-1]}, "
                       f"not {req.precision}", fix="give -p with one of those")
    targets = resolve_targets(req.targets, source_format, req.precision, graph)
    if not targets:
        raise BadInput(f"no target is reachable from {source_format} at {req.precision}",
                       fix="edgekit graph lists the converters and the precisions they produce")
    rewrite = bool(req.source_options.input_shapes)  # an ONNX source at fp32 is written with those shapes
    routes = [(t, graph.route(source_format, t.format, req.precision, rewrite=rewrite)) for t in targets]
    for t, r in routes:
        written = Path(req.out_dir) / f"{stem_of(req.source)}{t.extension}"
        if r.precision == Precision.FP32 and r.target_format == node_of(source_format) and written.resolve() == Path(req.source).resolve():
            raise BadInput(f"writing the {t.name} model with fixed input shapes to {written} would replace the source",
                           fix="give --out another folder")
    warnings: list[str] = []
    if any(n.strip().lower() == "all" for n in req.targets):
        # `all` keeps the targets that can do what was asked, and says which it left out.
        routes, left_out = split_supported(routes, req)
        warnings += [f"--target all: skipped {name}: {why}" for name, why in left_out]
        if not routes:
            raise BadInput("no target can do what was asked: " + "; ".join(f"{n}: {w}" for n, w in left_out))
    calibrated = any(r.quantizing_step for _, r in routes)
    if calibrated:
        check_supported(routes, req)
        if req.calibration is None:
            raise BadInput(f"{req.precision} needs calibration data",
                           fix="pass --calib data.npz (a folder of .npy or images, or module:function); "
                               "--calib random works but is not representative")
    return Plan(req, source_format, tuple(routes), calibrated, tuple(warnings))


def lack(route: Route, req: ConvertRequest) -> Lack | None:
    """What the int8 step of `route` cannot express of the request (None: nothing, or no int8 step)."""
    step = route.quantizing_step
    return step.converter.capabilities.lacks(req.spec_for(step.converter, req.quant.method)) if step else None


def split_supported(routes, req: ConvertRequest) -> tuple[list, list[tuple[str, str]]]:
    """(the (target, route) pairs whose int8 step can do what `req` asks, [(target, why not)])."""
    kept, left_out = [], []
    for target, route in routes:
        missing = lack(route, req)
        if missing is None:
            kept.append((target, route))
        else:
            left_out.append((target.name, missing.short))
    return kept, left_out


def check_supported(routes, req: ConvertRequest) -> None:
    """Before any work: every int8 route can do what `req` asks, else BadInput naming the targets that can."""
    for target, route in routes:
        missing = lack(route, req)
        if missing is None:
            continue
        int8_formats = {c.target for c in converters().values() if Precision.INT8 in c.precisions and missing.has(c.capabilities)}
        having = [t.name for t in TARGETS.values() if t.format in int8_formats and t.name != target.name]
        raise BadInput(f"the {target.name} backend {missing.reason}",
                       fix=missing.fix + (f"; targets that can: {', '.join(having)}" if having else ""))
