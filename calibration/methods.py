"""Calibration methods and the checks that a backend really has the one asked for."""

from __future__ import annotations

from edgekit.errors import BadInput
from edgekit.quant import PASSES

METHODS = ("minmax", "percentile", "entropy", "mse")
AUTO = "auto"
HOLDOUT_FRACTION = 0.2

# A concatenation whose inputs' ranges differ by more than this keeps float, on every backend: at
# one shared int8 scale the smaller part would keep fewer than 256/16 levels (a detector's class
# scores beside pixel boxes).
MIXED_SCALE_RATIO = 16.0


def mixed_scale(peaks: list[float]) -> bool:
    """Whether inputs with these largest magnitudes are too different to share one int8 scale."""
    spans = [p for p in peaks if p > 0]
    return len(spans) > 1 and max(spans) / min(spans) > MIXED_SCALE_RATIO


def quantizing_step(plan):
    """The step of a plan that turns a float model into a calibrated int8 one (or None)."""
    return next((s for s in plan.steps if s.precision == "int8"), None)


def _targets_where(has) -> list[str]:
    """Names of the targets whose int8 converter satisfies `has` (a predicate on the class)."""
    from edgekit.registry import converters
    from edgekit.targets import TARGETS

    formats = {c.target for c in converters().values() if "int8" in c.precisions and has(c)}
    return [t.name for t in TARGETS.values() if t.format in formats]


def _lacks(conv, method: str, spec) -> str | None:
    """What the int8 converter `conv` lacks of what was asked ("method", "int8_io", a whole-model pass
    of edgekit.quant.PASSES or "overrides"), else None."""
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
        step = quantizing_step(plan)
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
    from edgekit.quant import check_expressible

    for target, plan in plans:
        step = quantizing_step(plan)
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
