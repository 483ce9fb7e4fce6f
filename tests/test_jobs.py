"""`check --jobs`: units in worker processes, as many at once as memory allows, with the results of a serial run."""

from __future__ import annotations

import time

from edgekit.features.check.workers import Pool, available_memory


def sleeper(seconds: float, *, sources, progress) -> tuple[float, float]:
    """A unit of work that only takes time: when it ran."""
    started = time.time()
    time.sleep(seconds)
    return started, time.time()


def _overlaps(spans) -> bool:
    spans = sorted(spans)
    return any(b[0] < a[1] for a, b in zip(spans, spans[1:]))


def test_units_run_side_by_side_when_memory_holds_them():
    with Pool(2, False, first_estimate=1) as pool:
        spans = pool.map(sleeper, [(1.0,), (1.0,), (1.0,), (1.0,)])
    assert len(spans) == 4 and _overlaps(spans)
    assert pool.peak > 1  # the workers measured what a unit takes


def test_a_unit_larger_than_free_memory_runs_alone():
    too_big = (available_memory() or 0) * 4 + (1 << 40)
    with Pool(2, False, first_estimate=too_big) as pool:
        pool._measured = True  # as if a unit had been measured at that size
        spans = pool.map(sleeper, [(0.5,), (0.5,), (0.5,)])
    assert not _overlaps(spans)


def test_results_come_back_in_the_order_asked_whatever_ran_first():
    with Pool(2, False, first_estimate=1) as pool:
        spans = pool.map(sleeper, [(0.2,), (1.0,), (0.1,)], priority=lambda args: args[0])
    assert spans[1][0] <= spans[0][0] and spans[1][0] <= spans[2][0]  # the longest started first
    assert [round(b - a, 1) >= s for (a, b), s in zip(spans, (0.2, 1.0, 0.1))] == [True] * 3
