"""The first stage: what a request asks for, and the plan of it — each target's route, checked before
anything heavy runs (a backend that lacks the calibration method, the passes or the layer overrides
asked for is an error, or with `--target all` a target left out with the reason)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from edgekit.calibration.methods import AUTO, METHODS
from edgekit.calibration.sources import CalibrationSpec
from edgekit.converters.base import converters, node_of
from edgekit.core.errors import BadInput
from edgekit.core.formats import detect
from edgekit.core.quant import PASSES, LayerOverride, QuantSpec, check_expressible
from edgekit.core.verify import KINDS, THRESHOLDS
from edgekit.engine.build import stem_of
from edgekit.engine.graph import Graph, Route
from edgekit.sources.loading import SourceOptions
from edgekit.targets import TARGETS, resolve


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
    bias_correction: bool | None = None  # None: wherever the route's int8 backend has it (the default recipe)
    smooth_quant: bool = False
    overrides: tuple[LayerOverride, ...] = ()  # layers kept back from int8 (edgekit.core.quant)
    budgets: tuple = ()  # edgekit.core.budgets.Budget: search for the fewest layers to keep back until they hold
    min_int8_share: float = 0.8
    max_steps: int = 8
    output_kinds: dict = field(default_factory=dict)  # output name → edgekit.core.verify.KINDS key (--output-kind)

    def spec(self, method: str, converter=None) -> QuantSpec:
        """The quantization spec of this request with the calibration method `method`, for the int8
        `converter` of a route: bias correction, unless the request says otherwise, where it has it."""
        bias = self.bias_correction if self.bias_correction is not None else bool(getattr(converter, "bias_correction", False))
        return QuantSpec(self.precision, method, granularity=self.granularity, int8_io=self.int8_io,
                         bias_correction=bias, smooth_quant=self.smooth_quant, overrides=self.overrides)

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
        unknown = {k: v for k, v in self.output_kinds.items() if v not in KINDS}
        if unknown:
            raise BadInput(f"unknown output kind {unknown}", fix=f"use one of {', '.join(KINDS)}")
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
    thresholds = {**THRESHOLDS.get(req.precision, {}), **req.thresholds, **{b.metric: b.limit for b in req.budgets}}
    source_format = detect(req.source)  # fail fast on a bad path, before loading anything heavy
    graph = Graph()
    targets = resolve_targets(req.targets, source_format, req.precision, graph)
    if not targets:
        raise BadInput(f"no target is reachable from {source_format} at {req.precision}",
                       fix="edgekit graph lists the converters and the precisions they produce")
    rewrite = bool(req.source_options.input_shapes)  # an ONNX source at fp32 is written with those shapes
    routes = [(t, graph.route(source_format, t.format, req.precision, rewrite=rewrite)) for t in targets]
    for t, r in routes:
        written = Path(req.out_dir) / f"{stem_of(req.source)}{t.extension}"
        if r.precision == "fp32" and r.target_format == node_of(source_format) and written.resolve() == Path(req.source).resolve():
            raise BadInput(f"writing the {t.name} model with fixed input shapes to {written} would replace the source",
                           fix="give --out another folder")
    warnings: list[str] = []
    if any(n.strip().lower() == "all" for n in req.targets):
        # `all` keeps the targets that can do what was asked, and says which it left out.
        routes, left_out = split_supported(routes, req.calib_method, req.spec(req.calib_method))
        warnings += [f"--target all: skipped {name}: {why}" for name, why in left_out]
        if not routes:
            raise BadInput("no target can do what was asked: " + "; ".join(f"{n}: {w}" for n, w in left_out))
    calibrated = any(r.quantizing_step for _, r in routes)
    if calibrated:
        check_supported(routes, req.calib_method, req.spec(req.calib_method))
        if req.calibration is None:
            raise BadInput(f"{req.precision} needs calibration data",
                           fix="pass --calib data.npz (a folder of .npy or images, or module:function); "
                               "--calib random works but is not representative")
    return Plan(req, source_format, tuple(routes), calibrated, thresholds, tuple(warnings))


def _targets_where(has) -> list[str]:
    """Names of the targets whose int8 converter satisfies `has` (a predicate on the class)."""
    formats = {c.target for c in converters().values() if "int8" in c.precisions and has(c)}
    return [t.name for t in TARGETS.values() if t.format in formats]


def _lacks(conv, method: str, spec) -> str | None:
    """What the int8 converter `conv` lacks of what was asked ("method", "int8_io", a whole-model pass
    of edgekit.core.quant.PASSES or "overrides"), else None."""
    if method != AUTO and method not in conv.methods:
        return "method"
    if spec.int8_io and not conv.int8_io:
        return "int8_io"
    for name in PASSES:
        if getattr(spec, name) and not getattr(conv, name):
            return name
    if any(o.precision not in conv.fallbacks for o in spec.overrides):
        return "overrides"
    return None


def split_supported(plans, method: str, spec) -> tuple[list, list[tuple[str, str]]]:
    """(the plans whose int8 step has the method, integer I/O and layer overrides asked for (`spec`, a
    QuantSpec), [(target, why not)])."""
    kept, left_out = [], []
    for target, plan in plans:
        step = plan.quantizing_step
        lack = _lacks(step.converter, method, spec) if step is not None else None
        if lack == "method":
            left_out.append((target.name, f"no '{method}' calibration (it has {', '.join(step.converter.methods)})"))
        elif lack == "int8_io":
            left_out.append((target.name, "no integer inputs and outputs"))
        elif lack in PASSES:
            left_out.append((target.name, f"no {PASSES[lack]}"))
        elif lack == "overrides":
            left_out.append((target.name, "cannot keep layers at " + ", ".join(sorted({o.precision for o in spec.overrides}
                                                                                       - set(step.converter.fallbacks)))))
        else:
            kept.append((target, plan))
    return kept, left_out


def check_supported(plans, method: str, spec) -> None:
    """Before any work: every int8 route must have the method (or auto), integer I/O if asked, and
    what the quantization spec asks for (bit widths, granularity, layer overrides)."""
    for target, plan in plans:
        step = plan.quantizing_step
        lack = _lacks(step.converter, method, spec) if step is not None else None
        if lack == "method":
            having = _targets_where(lambda c: method in c.methods)
            raise BadInput(
                f"the {target.name} backend has no '{method}' calibration (it has {', '.join(step.converter.methods)})",
                fix=f"use --calib-method {' or '.join(step.converter.methods)} or auto"
                    + (f"; '{method}' is available for: {', '.join(having)}" if having else ""),
            )
        if lack == "int8_io":
            having = _targets_where(lambda c: c.int8_io)
            raise BadInput(
                f"the {target.name} backend cannot give a model integer inputs and outputs",
                fix="drop --int8-io for this target" + (f"; targets that can: {', '.join(having)}" if having else ""),
            )
        if step is not None:
            check_expressible(spec, step.converter, target.name)
