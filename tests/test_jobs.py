"""`check --jobs` and `check --executor ray`: units in worker processes or Ray tasks, as many at once as
memory allows, with the results of a serial run. The Ray cases start a local Ray instance of their own."""

from __future__ import annotations

import os
import time

import pytest

from edgekit.core.errors import ConversionFailed
from edgekit.features.check.workers import available_memory, pool

EXECUTORS = ["local", pytest.param("ray", marks=pytest.mark.slow)]


def sleeper(seconds: float, *, sources, progress) -> tuple[float, float, int]:
    """A unit of work that only takes time: when it ran, and where."""
    started = time.time()
    time.sleep(seconds)
    return started, time.time(), os.getpid()


def failing(message: str, *, sources, progress):
    raise ConversionFailed(message, converter="torch_to_tflite", fix="try another target")


def _overlaps(spans) -> bool:
    spans = sorted(spans)
    return any(b[0] < a[1] for a, b in zip(spans, spans[1:]))


@pytest.mark.parametrize("executor", EXECUTORS)
def test_units_run_side_by_side_when_memory_holds_them(executor, tmp_path):
    with pool(executor, 2, False, 1 << 20, out_dir=str(tmp_path)) as workers:
        spans = workers.map(sleeper, [(1.0,), (1.0,), (1.0,), (1.0,)])
    assert len(spans) == 4 and _overlaps(spans)
    assert len({pid for _, _, pid in spans}) == 2  # two workers, each reused


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_unit_larger_than_free_memory_runs_alone(executor, tmp_path):
    too_big = (available_memory() or 0) * 4 + (1 << 40)
    with pool(executor, 2, False, too_big, out_dir=str(tmp_path)) as workers:
        workers._measured = True  # local: as if a unit had been measured at that size (Ray reserves it)
        spans = workers.map(sleeper, [(0.5,), (0.5,), (0.5,)])
    assert not _overlaps(spans)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_results_come_back_in_the_order_asked_and_errors_as_themselves(executor, tmp_path):
    with pool(executor, 2, False, 1 << 20, out_dir=str(tmp_path)) as workers:
        spans = workers.map(sleeper, [(0.1,), (1.0,), (0.2,)], priority=lambda args: args[0])
        # two slots: the lowest priority, asked first, waits until one of the two others has finished (when a
        # worker starts is the machine's business: a loaded one starts Ray's second worker seconds late)
        assert spans[0][0] >= min(spans[1][1], spans[2][1]) - 0.05
        assert [b - a >= s for (a, b, _), s in zip(spans, (0.1, 1.0, 0.2))] == [True] * 3
        with pytest.raises(ConversionFailed) as caught:
            workers.map(failing, [("no kernel for aten.foo",)])
    assert (caught.value.message, caught.value.fix) == ("torch_to_tflite: no kernel for aten.foo", "try another target")
