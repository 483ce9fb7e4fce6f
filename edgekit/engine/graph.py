"""The converter graph: formats are nodes, converters are edges; plans are found before any run."""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from itertools import count

from edgekit.core.errors import BadInput, MissingDependency
from edgekit.converters.base import Converter, converters, node_of
from edgekit.core.quant import PRECISIONS, Precision


@dataclass(frozen=True)
class Step:
    """One edge of a route: the converter class (instantiated only when built) and what it makes."""

    converter: type[Converter]
    precision: str  # the precision this step produces


@dataclass(frozen=True)
class Route:
    """A planned chain of conversions from the source's format to a target format at a precision; checked to
    fit together when planned, nothing run yet."""

    source_format: str
    target_format: str
    precision: str
    steps: tuple[Step, ...]

    @property
    def cost(self) -> float:
        """The sum of the converters' declared costs (relative weights, not seconds); what planning minimises."""
        return sum(s.converter.cost for s in self.steps)

    @property
    def quantizing(self) -> int | None:
        """The index of the step that turns the float model into an int8 one, or None."""
        return next((i for i, s in enumerate(self.steps) if s.precision == Precision.INT8), None)

    @property
    def quantizing_step(self) -> Step | None:
        """The step at `quantizing` (its converter's capabilities settle the spec), or None for a float route."""
        return None if self.quantizing is None else self.steps[self.quantizing]

    @property
    def formats(self) -> list[str]:
        """The source's own format (not its graph node), then the format each step writes."""
        return [self.source_format] + [s.converter.target for s in self.steps]


class Graph:
    """The converter graph over `edges` (default: every registered converter, installed or not); plans routes."""

    def __init__(self, edges: list[type[Converter]] | None = None):
        self.edges = list(converters().values()) if edges is None else list(edges)

    def _search(self, start: str, goal: tuple[str, str] | None, only_available: bool):
        """Dijkstra over (node, precision) states; returns the best step list per reached state."""
        best: dict[tuple[str, str], tuple[float, tuple[Step, ...]]] = {(start, Precision.FP32): (0.0, ())}
        tie = count()
        queue = [(0.0, next(tie), (start, Precision.FP32))]
        while queue:
            cost, _, state = heapq.heappop(queue)
            if cost > best[state][0]:
                continue
            if state == goal:
                break
            node, prec = state
            for edge in self.edges:
                if edge.source != node or (only_available and not edge.available()):
                    continue
                for out_prec in PRECISIONS:
                    if not edge.accepts(prec, out_prec):
                        continue
                    nxt = (edge.target, out_prec)
                    c = cost + edge.cost
                    if nxt not in best or c < best[nxt][0]:
                        best[nxt] = (c, best[state][1] + (Step(edge, out_prec),))
                        heapq.heappush(queue, (c, next(tie), nxt))
        return best

    def reachable(self, source_format: str) -> dict[str, set[str]]:
        """Target format → the precisions reachable from `source_format` (any dependency state).

        The source itself (its own format at fp32) is not a target: nothing would be converted.
        """
        out: dict[str, set[str]] = {}
        for (node, prec), _ in self._search(node_of(source_format), None, False).items():
            if (node, prec) != (node_of(source_format), Precision.FP32):
                out.setdefault(node, set()).add(prec)
        return out

    def route(self, source_format: str, target_format: str, precision: str = Precision.FP32, *,
              rewrite: bool = False) -> Route:
        """The cheapest route from a source format to a target format at a precision.

        Prefers routes whose converters are all installed; raises MissingDependency naming the
        extra when only uninstalled routes exist, BadInput (listing what is reachable) when none.
        The source's own format at fp32 is a route only with `rewrite` (input shapes were given) and an
        edge from that format to itself at fp32 (an ONNX model written with fixed input shapes).
        """
        precision = Precision.parse(precision)
        start, goal = node_of(source_format), (target_format, precision)
        if goal == (start, Precision.FP32):
            same = [e for e in self.edges if e.source == start and e.target == start and e.accepts(Precision.FP32, Precision.FP32)]
            if rewrite and same:
                plan = Route(source_format, target_format, precision, (Step(same[0], Precision.FP32),))
                if not same[0].available():
                    raise MissingDependency(f"the {start} → {start} converter", same[0].extra, same[0].missing())
                return plan
            raise BadInput(f"the source is already {target_format} at fp32: there is nothing to convert",
                           fix="ask for another target or precision (edgekit graph lists them)"
                               + (", or give --input-shape to write it with fixed input shapes" if same else ""))
        found = self._search(start, goal, True).get(goal)
        if found is None:
            anyway = self._search(start, goal, False).get(goal)
            if anyway is None:
                reach = self.reachable(source_format)
                listing = ", ".join(f"{t} ({'/'.join(sorted(p))})" for t, p in sorted(reach.items())) or "nothing"
                raise BadInput(
                    f"no route from {source_format} to {target_format} at {precision}",
                    fix=f"reachable from {source_format}: {listing}",
                )
            blocked = next(s.converter for s in anyway[1] if not s.converter.available())
            raise MissingDependency(f"the {blocked.source} → {blocked.target} converter", blocked.extra, blocked.missing())
        plan = Route(source_format, target_format, precision, found[1])
        _validate(plan)
        return plan


def _validate(plan: Route) -> None:
    """Check the whole chain fits together before anything runs."""
    node, prec = node_of(plan.source_format), Precision.FP32
    for step in plan.steps:
        conv = step.converter
        if conv.source != node or not conv.accepts(prec, step.precision):
            raise RuntimeError(f"invalid plan: {conv.name} cannot follow {node}@{prec}")
        node, prec = conv.target, step.precision
    if (node, prec) != (plan.target_format, plan.precision):
        raise RuntimeError(f"invalid plan: ends at {node}@{prec}")
