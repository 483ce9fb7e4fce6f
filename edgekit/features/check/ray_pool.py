"""`check --executor ray`: a check's units as Ray tasks, on a local Ray instance or a Ray cluster.

The interface of edgekit.features.check.workers.Pool. Each call is a Ray task on one CPU reserving
`first_estimate` bytes of Ray's (logical) `memory`; at most `jobs` are in flight, the highest priority
submitted first. A Ray worker process keeps its opened sources between tasks. Ray writes nothing to
stderr; the workers' progress lines come back through a queue. A task that ran on another node sends
back the files it wrote under `out_dir` (hidden folders, edgekit's `.edgekit-tmp-*`, excepted), written
here at the same relative paths. An error raised in a task is raised here as itself. A local instance
keeps its session files in a temporary folder removed when the pool closes.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from typing import TYPE_CHECKING

from edgekit.engine.pipeline import Sources

if TYPE_CHECKING:
    from ray.util.queue import Queue

_state: dict = {}  # in a Ray worker process: its opened sources, kept between tasks


class RayPool:
    """A check's units run as Ray tasks (see the module's docstring); use it as a context manager: leaving it
    disconnects from Ray (stopping a local instance it started) unless this process was connected before."""

    def __init__(self, address: str | None, jobs: int, show_progress: bool, first_estimate: int = 2 << 30,
                 out_dir: str | None = None, runtime_env: dict | None = None):
        """`address`: None starts a local Ray instance on `jobs` CPUs, else that of a running cluster
        ("HEAD:6379", "auto"). If this process is already connected to Ray, that connection is used.
        `out_dir`: the folder under which tasks on other nodes write files to bring back (None: none).
        `runtime_env`: for ray.init (e.g. {"py_modules": [...]}, {"env_vars": {...}})."""
        import ray
        from ray.util.queue import Queue

        self.jobs, self.out_dir = jobs, out_dir
        self._own = not ray.is_initialized()
        self._session = None
        if self._own:
            local = {}
            if address is None:  # a new instance, whatever RAY_ADDRESS says, its session files in a folder of ours
                # short: Ray's socket paths inside it must fit AF_UNIX's 107 bytes
                self._session = tempfile.mkdtemp(prefix="ekray-", dir="/tmp" if os.path.isdir("/tmp") else None)
                local = {"num_cpus": jobs, "include_dashboard": False, "_temp_dir": self._session}
            ray.init(address=address or "local", log_to_driver=False, logging_level=logging.ERROR,
                     runtime_env=runtime_env, **local)
        self._node = ray.get_runtime_context().get_node_id()
        largest = max((n["Resources"].get("memory", 0) for n in ray.nodes() if n["Alive"]), default=0)
        task = _remote_run()
        self._task = task.options(memory=int(min(first_estimate, largest))) if largest else task
        self._started = time.time()
        self._placed: dict[str, int] = {}  # relative path → mtime (ns) of the copy written here
        self.copied = 0  # files written here for tasks that ran on other nodes
        self._progress = Queue(actor_options={"num_cpus": 0}) if show_progress else None
        self._stop = threading.Event()
        self._echo = threading.Thread(target=self._echo_progress, daemon=True)
        if show_progress:
            self._echo.start()

    def __enter__(self) -> "RayPool":
        return self

    def __exit__(self, *exc) -> None:
        import ray

        if self._progress is not None:
            self._stop.set()
            self._echo.join()
            self._progress.shutdown(force=True)
        if self._own:
            ray.shutdown()
        if self._session is not None:
            shutil.rmtree(self._session, ignore_errors=True)

    def map(self, fn, calls: list[tuple], priority=lambda args: 0) -> list:
        """fn(*args, sources=, progress=) for every args of `calls`, as Ray tasks, the highest
        `priority(args)` first; the results in the order of `calls`."""
        import ray

        results: list = [None] * len(calls)
        pending = sorted(enumerate(calls), key=lambda c: priority(c[1]), reverse=True)
        running: dict = {}  # ObjectRef → index in calls
        try:
            while pending or running:
                while pending and len(running) < self.jobs:
                    i, args = pending.pop(0)
                    ref = self._task.remote(fn, args, self._node, self.out_dir, self._progress, self._started)
                    running[ref] = i
                done, _ = ray.wait(list(running), num_returns=1)
                for ref in done:
                    i = running.pop(ref)
                    results[i], files = _get(ref)  # a unit's error is raised here, as in a serial run
                    self._place(files)
        except BaseException:  # an error, or Ctrl-C: the tasks still running are stopped (workers killed)
            for ref in running:
                ray.cancel(ref, force=True)
            raise
        return results

    def _place(self, files: dict[str, tuple[int, bytes]]) -> None:
        """Write the files a task sent back; of two versions of a file, the newer stays."""
        for rel, (mtime, data) in files.items():
            if mtime >= self._placed.get(rel, -1):
                path = os.path.join(self.out_dir, rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as f:
                    f.write(data)
                self._placed[rel] = mtime
                self.copied += 1

    def _echo_progress(self) -> None:
        """The workers' progress lines to stderr as they come; when the pool closes, the rest."""
        from ray.util.queue import Empty

        while not self._stop.is_set():
            with contextlib.suppress(Empty):
                sys.stderr.write(self._progress.get(timeout=0.2))
        for line in self._progress.get_nowait_batch(self._progress.qsize()):
            sys.stderr.write(line)


def _get(ref):
    """The task's value; an exception raised in the task is raised again as its own type."""
    import ray

    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as e:
        if isinstance(e.cause, BaseException):
            raise e.cause from e  # e carries the worker's traceback
        raise


@functools.cache
def _remote_run():
    """`_run` as a Ray task on one CPU, never retried; made on first use, so that importing this module
    does not import Ray."""
    import ray

    return ray.remote(num_cpus=1, max_retries=0)(_run)


def _run(fn, args: tuple, driver_node: str, out_dir: str | None, progress: Queue | None, started: float):
    """In a Ray worker: fn with this worker's sources; (its value, the files it wrote if on another node)."""
    import ray

    if "sources" not in _state:
        _state["sources"] = Sources()

    def say(msg: str) -> None:
        progress.put(f"{time.time() - started:7.1f}s [{os.getpid()}] {msg}\n")

    remote = out_dir is not None and ray.get_runtime_context().get_node_id() != driver_node
    before = snapshot(out_dir) if remote else {}
    value = fn(*args, sources=_state["sources"], progress=say if progress is not None else None)
    return value, written(out_dir, before) if remote else {}


def snapshot(root: str) -> dict[str, int]:
    """Relative path → mtime (ns) of every file under `root`, hidden folders excepted."""
    found = {}
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in names:
            path = os.path.join(folder, name)
            with contextlib.suppress(OSError):  # removed meanwhile
                found[os.path.relpath(path, root)] = os.stat(path).st_mtime_ns
    return found


def written(root: str, before: dict[str, int]) -> dict[str, tuple[int, bytes]]:
    """Files under `root` new or changed since the snapshot `before`: relative path → (mtime ns, bytes)."""
    files = {}
    for rel, mtime in snapshot(root).items():
        if before.get(rel) != mtime:
            with contextlib.suppress(OSError), open(os.path.join(root, rel), "rb") as f:
                files[rel] = (mtime, f.read())
    return files
