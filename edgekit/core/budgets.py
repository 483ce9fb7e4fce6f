"""Drift budgets: a limit on a verification metric that int8 must meet (`--budget cosine=0.99`, a
check's `budget`, the API's `budgets`), and how far a measurement is from it, in units that make
budgets on different metrics comparable (what the accuracy-aware search, edgekit.engine.search, closes)."""

from __future__ import annotations

from dataclasses import dataclass

from edgekit.core.errors import BadInput
from edgekit.core.options import key_values, number
from edgekit.core.verify import HIGHER_IS_BETTER, METRICS

BOUNDED = ("cosine", "cosine_min", "channel_cosine", "channel_cosine_min", "top1_agreement", "clear_top1_agreement",
           "decision_agreement", "step_top1_agreement", "sequence_agreement")


@dataclass(frozen=True)
class Budget:
    """A limit on one verification metric, met when the worst output meets it."""

    metric: str
    limit: float

    def value(self, metrics: dict) -> float | None:
        """The worst value over the outputs (`metrics` is {output: {metric: value}}); None if unmeasured."""
        values = [m[self.metric] for m in metrics.values() if m.get(self.metric) is not None]
        if not values:
            return None
        return min(values) if HIGHER_IS_BETTER[self.metric] else max(values)

    def gap(self, value: float | None) -> float:
        """How far `value` is from the limit, in units that make budgets comparable; 0 when met."""
        if value is None:
            return 0.0
        sign = 1 if HIGHER_IS_BETTER[self.metric] else -1
        return max(0.0, sign * (self.limit - value) / self._scale())

    def progress(self, before: float | None, after: float | None) -> float:
        """How much closer `after` is to (or further beyond) the limit than `before`, in gap units."""
        if before is None or after is None:
            return 0.0
        return self.gap(before) - self.gap(after) if self.gap(before) or self.gap(after) else \
            (after - before) * (1 if HIGHER_IS_BETTER[self.metric] else -1) / self._scale()

    def _scale(self) -> float:
        if HIGHER_IS_BETTER[self.metric]:
            return 1.0 - self.limit if self.metric in BOUNDED and self.limit < 1 else max(abs(self.limit), 1.0)
        return max(abs(self.limit), 1e-12)

    def text(self) -> str:
        """The budget as people read it ("cosine ≥ 0.99"); also its form in the search's cache key."""
        return f"{self.metric} {'≥' if HIGHER_IS_BETTER[self.metric] else '≤'} {self.limit:g}"


def parse_budgets(items) -> tuple[Budget, ...]:
    """`--budget cosine=0.995` (repeatable) or a {metric: limit} mapping → budgets on output metrics."""
    out = []
    for metric, value in key_values(items):
        if metric not in METRICS:
            raise BadInput(f"cannot use {metric!r} as a budget", fix=f"budget a verification metric: {', '.join(METRICS)}")
        try:
            out.append(Budget(metric, number(value)))
        except ValueError:
            raise BadInput(f"budget {metric}: {value!r} is not a number", fix="write --budget METRIC=VALUE") from None
    return tuple(out)


@dataclass(frozen=True)
class SearchSpec:
    """An accuracy-aware int8 conversion's terms (edgekit.engine.search): the budgets to meet, the least
    share of weight bytes that stays int8, and the most conversions after full int8. No budgets: no search."""

    budgets: tuple[Budget, ...] = ()
    min_int8_share: float = 0.8
    max_steps: int = 8

    def __post_init__(self):
        if isinstance(self.min_int8_share, bool) or not isinstance(self.min_int8_share, (int, float)) \
                or not 0 <= self.min_int8_share <= 1:
            raise BadInput(f"--min-int8-share {self.min_int8_share!r} is not a share", fix="give a number from 0 to 1")
        if isinstance(self.max_steps, bool) or not isinstance(self.max_steps, int) or self.max_steps < 0:
            raise BadInput(f"--max-steps {self.max_steps!r} is not a count of conversions", fix="give an int of 0 or more")

    def __bool__(self) -> bool:
        return bool(self.budgets)

    def to_json(self) -> dict:
        """budgets (sorted texts), min_int8_share, max_steps: part of the artifact cache's key, order-independent."""
        return {"budgets": sorted(b.text() for b in self.budgets), "min_int8_share": self.min_int8_share,
                "max_steps": self.max_steps}
