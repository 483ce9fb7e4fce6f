"""`check --jobs N`: a check's units in worker processes, as many at once as cores and memory allow.

Workers are started once (spawned: the frameworks are never forked) and each keeps its opened source
models between the units it runs. Each runs its framework on cores ÷ jobs threads, so N workers do
not fight over the cores. A unit reports the peak memory of its worker and the runtimes that
worker started; the pool starts a unit only while the memory the machine has free holds another
unit as large as the largest seen so far (until one has been measured, a unit is taken to need
`first_estimate` bytes: 2 GiB, or 8 × the largest source model's file).
The units likely to take longest (by the caller's `priority`) start first, and the short ones fill in
around them.
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

from edgekit.core.deps import require
from edgekit.core.quiet import UserStderr
from edgekit.engine.pipeline import Sources
from edgekit.features.check.ray_pool import RayPool

_state: dict = {}  # in a worker: its opened sources and its progress writer


def available_memory() -> int | None:
    """Bytes of memory the machine can give without swapping (Linux MemAvailable), or None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def pool(executor: str, jobs: int, show_progress: bool, first_estimate: int, ray_address: str | None = None,
         out_dir: str | None = None):
    """The pool of `executor`: "local" (worker processes here) or "ray" (Ray tasks; edgekit[ray])."""
    if executor == "local":
        return Pool(jobs, show_progress, first_estimate)
    require("ray", "check --executor ray")
    # On a cluster, the tasks use the cache folder this process uses (a folder every node mounts shares it).
    shared = os.environ.get("EDGEKIT_CACHE_DIR") if ray_address else None
    return RayPool(ray_address, jobs, show_progress, first_estimate, out_dir=out_dir,
                   runtime_env={"env_vars": {"EDGEKIT_CACHE_DIR": shared}} if shared else None)


class Pool:
    """At most `jobs` spawned worker processes on this machine (see the module's docstring); use it as a context
    manager: leaving it waits for the running units and cancels those not started."""

    def __init__(self, jobs: int, show_progress: bool, first_estimate: int = 2 << 30):
        self.jobs = jobs
        threads = max(1, (os.cpu_count() or 1) // jobs)
        self._pool = ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=_start, initargs=(threads, show_progress, time.time(), UserStderr()))
        self.peak = first_estimate  # bytes: the largest unit measured so far (at first, the estimate)
        self._measured = False

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, *exc) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def map(self, fn, calls: list[tuple], priority=lambda args: 0) -> list:
        """fn(*args) for every args of `calls`, in the workers, the highest `priority(args)` first; the
        results in the order of `calls`."""
        results: list = [None] * len(calls)
        pending = sorted(enumerate(calls), key=lambda c: priority(c[1]), reverse=True)
        running: dict = {}
        while pending or running:
            while pending and self._fits(len(running)):
                i, args = pending.pop(0)
                running[self._pool.submit(_call, fn, args)] = i
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                i = running.pop(future)
                value, peak = future.result()  # a unit's error is raised here, as in a serial run
                self.peak = max(self.peak, peak) if self._measured else peak
                self._measured = True
                results[i] = value
        return results

    def _fits(self, running: int) -> bool:
        if running == 0:
            return True
        if running >= self.jobs:
            return False
        free = available_memory()
        return free is None or free >= self.peak


def _start(threads: int, show_progress: bool, started: float, err) -> None:
    """`err`: the user's standard error (a UserStderr, unpickled here); fd 2 is /dev/null unless --verbose."""
    os.environ["OMP_NUM_THREADS"] = str(threads)  # torch, and the runtimes' children, read it when they start

    def say(msg: str) -> None:
        err.write(f"{time.time() - started:7.1f}s [{os.getpid()}] {msg}\n")

    _state.update(say=say if show_progress else None, sources=None)


def _call(fn, args: tuple):
    """Run fn in this worker with its sources and progress; (the result, this worker's peak memory in bytes)."""
    if _state.get("sources") is None:
        _state["sources"] = Sources()
    value = fn(*args, sources=_state["sources"], progress=_state["say"])
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return value, (own + children) * 1024
