"""A time budget per target: the work of one target (build, verify, place) ends when it runs past its budget, with
a message that says where it was and how to give it more time; the run goes on with the other targets."""

from __future__ import annotations

import signal
import threading
import time
from contextlib import contextmanager

from edgekit.core.errors import ConversionFailed

DEFAULT_TIME_BUDGET = 1800.0  # seconds per target (--time-budget); 0 or None: no budget
RETRY = 0.2  # seconds: a budget that runs out inside an import is noticed when the import is done


class TimeBudgetExceeded(ConversionFailed):
    """A target's work ran past its --time-budget (exit 3, like any conversion that did not finish)."""


@contextmanager
def time_budget(seconds: float | None, target: str, step: list[str]):
    """Run the block under a budget of `seconds`: past it, TimeBudgetExceeded is raised in the block, naming
    `target` and the last step it said (`step[0]`, kept up to date by the caller).

    The budget is a SIGALRM timer, so it only works in the main thread (elsewhere, and without a budget, the
    block runs unbounded) and it interrupts Python code: a single call into native code (one MLIR conversion,
    one runtime call) runs to its end before the budget is noticed; the runtime's own calls have their worker's
    timeout. Nor does it interrupt an import: one cut short would leave a broken module for the other targets."""
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return
    started = time.perf_counter()

    def expire(_signum, frame):
        if _importing(frame):  # an import cut short leaves a half-made module behind for every later target
            signal.setitimer(signal.ITIMER_REAL, RETRY)
            return
        raise TimeBudgetExceeded(
            f"{target}: stopped after {time.perf_counter() - started:.0f} s, past its time budget of {seconds:g} s, "
            f"while {step[0] or 'starting'}",
            fix=f"give it more time (--time-budget {int(seconds * 4)}) or leave the target out; the other targets' "
                "results are kept")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _importing(frame) -> bool:
    """Whether Python is importing a module in `frame` or a frame that called it."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False
