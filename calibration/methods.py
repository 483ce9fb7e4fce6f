"""Calibration methods and the checks that a backend really has the one asked for."""

from __future__ import annotations

from edgekit.errors import BadInput

METHODS = ("minmax", "percentile", "entropy", "mse")
AUTO = "auto"
HOLDOUT_FRACTION = 0.2


def quantizing_step(plan):
    """The step of a plan that turns a float model into a calibrated int8 one (or None)."""
    return next((s for s in plan.steps if s.precision == "int8"), None)


def _targets_where(has) -> list[str]:
    """Names of the targets whose int8 converter satisfies `has` (a predicate on the class)."""
    from edgekit.registry import converters
    from edgekit.targets import TARGETS

    formats = {c.target for c in converters().values() if "int8" in c.precisions and has(c)}
    return [t.name for t in TARGETS.values() if t.format in formats]


def split_supported(plans, method: str, int8_io: bool) -> tuple[list, list[tuple[str, str]]]:
    """(the plans whose int8 step has the method and integer I/O asked for, [(target, why not)])."""
    kept, left_out = [], []
    for target, plan in plans:
        step = quantizing_step(plan)
        conv = step.converter if step is not None else None
        if conv is not None and method != AUTO and method not in conv.methods:
            left_out.append((target.name, f"no '{method}' calibration (it has {', '.join(conv.methods)})"))
        elif conv is not None and int8_io and not conv.int8_io:
            left_out.append((target.name, "no integer inputs and outputs"))
        else:
            kept.append((target, plan))
    return kept, left_out


def check_supported(plans, method: str, int8_io: bool) -> None:
    """Before any work: every int8 route must have the method (or auto) and, if asked, integer I/O."""
    by_target = {}
    for target, plan in plans:
        step = quantizing_step(plan)
        if step is not None:
            by_target[target.name] = step.converter
    for name, conv in by_target.items():
        if method != AUTO and method not in conv.methods:
            having = _targets_where(lambda c: method in c.methods)
            raise BadInput(
                f"the {name} backend has no '{method}' calibration (it has {', '.join(conv.methods)})",
                fix=f"use --calib-method {' or '.join(conv.methods)} or auto"
                    + (f"; '{method}' is available for: {', '.join(having)}" if having else ""),
            )
        if int8_io and not conv.int8_io:
            having = _targets_where(lambda c: c.int8_io)
            raise BadInput(
                f"the {name} backend cannot give a model integer inputs and outputs",
                fix="drop --int8-io for this target" + (f"; targets that can: {', '.join(having)}" if having else ""),
            )
