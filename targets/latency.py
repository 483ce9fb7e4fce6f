"""Host CPU latency of one artifact in its own runtime, in a process of its own.

    python -m edgekit.targets.latency JOB.json OUT.json

The job names the artifact (`format`, `path`), the thread counts to time it at (`threads`), optional
`inputs` (an .npz: the first sample of each input is fed; otherwise seeded random inputs of the
artifact's own shapes and types) and `shapes` ({input name: shape}, for a dynamic dimension or a .ptl,
which records none). For each thread count the runtime is opened afresh with that many threads and
called the way a user's loop calls it (LiteRT's signature runner, an ONNX Runtime session, an
ExecuTorch method, a lite-interpreter module), warmed up, then timed until the median is stable
(`samples`); that is done ROUNDS times, each with a new instance of the runtime (its buffers land
elsewhere, which moves a small model's latency by tens of percent), and the runs are pooled. The
process is new for every artifact, so its peak resident memory (`peak_rss_bytes`) is the runtime's
with this artifact loaded and run; `runtime_rss_bytes` is the same process after importing the
runtime, before the artifact.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import resource
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np

from edgekit.core.process import die_with_parent
from edgekit.targets import by_format, runtime_only
from edgekit.targets.lm_child import timed_calls

WARMUP_SECONDS = 0.3
MIN_RUNS = 20
MIN_SECONDS = 1.0
MAX_SECONDS = 10.0
MAX_RUNS = 20000
STABLE = 0.02  # the medians of the two halves of the runs agree within 2%
ROUNDS = 3  # instances of the runtime opened one after the other per thread count, their runs pooled

@dataclass(frozen=True)
class Timing:
    """Latency over `runs` timed calls, in milliseconds: the median, the 10th and 90th percentiles
    (`spread_ms` = p90 − p10), and whether the median had settled (`stable`)."""

    threads: int
    median_ms: float
    p10_ms: float
    p90_ms: float
    spread_ms: float
    runs: int
    stable: bool

    @classmethod
    def of(cls, threads: int, seconds: list[float], stable: bool) -> "Timing":
        """The timing of per-run `seconds` (at least one run), converted to milliseconds."""
        ms = np.asarray(seconds) * 1e3
        p10, p90 = (float(v) for v in np.percentile(ms, [10, 90]))
        return cls(threads, float(np.median(ms)), p10, p90, p90 - p10, len(ms), stable)

    def to_json(self) -> dict:
        """Every field by name: an entry of a bench document's `timings`."""
        return asdict(self)


def settled(seconds: list[float], tolerance: float = STABLE) -> bool:
    """Whether the median of the first half of the runs and that of the second half agree."""
    half = len(seconds) // 2
    if half < MIN_RUNS // 2:
        return False
    first, second = statistics.median(seconds[:half]), statistics.median(seconds[half:])
    return abs(first - second) <= tolerance * max(first, second)


def timed(call: Callable[[], object], threads: int, *, min_seconds: float = MIN_SECONDS,
          max_seconds: float = MAX_SECONDS, clock=time.perf_counter) -> Timing:
    """`call`'s latency (see `samples`)."""
    seconds, stable = samples(call, min_seconds=min_seconds, max_seconds=max_seconds, clock=clock)
    return Timing.of(threads, seconds, stable)


def samples(call: Callable[[], object], *, min_seconds: float = MIN_SECONDS, max_seconds: float = MAX_SECONDS,
            clock=time.perf_counter) -> tuple[list[float], bool]:
    """Warm `call` up, then time it until at least MIN_RUNS runs and `min_seconds` have passed and the
    median has settled, or `max_seconds` have passed; the seconds of each run, and whether it settled."""
    start = clock()
    warm = 0
    while warm < 3 or clock() - start < WARMUP_SECONDS:
        call()
        warm += 1
    seconds: list[float] = []
    gc.disable()  # as timeit does: a collection is not the runtime's time
    try:
        start = clock()
        while True:
            t = clock()
            call()
            seconds.append(clock() - t)
            elapsed = clock() - start
            if len(seconds) >= MIN_RUNS and elapsed >= min_seconds and len(seconds) % 10 == 0 and settled(seconds):
                return seconds, True
            if (elapsed >= max_seconds and len(seconds) >= 3) or len(seconds) >= MAX_RUNS:
                return seconds, settled(seconds)
    finally:
        gc.enable()


def feed(shape, dtype, given: np.ndarray | None, rng) -> np.ndarray:
    dtype = np.dtype(dtype)
    if given is not None and given.dtype == dtype and tuple(given.shape) == tuple(shape):
        return np.ascontiguousarray(given)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype in (np.int8, np.uint8):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max + 1, shape).astype(dtype)
    return np.ones(shape, dtype)  # token ids and masks: 1 is valid for both


def _dims(dims) -> list[int | None]:
    """A runtime's input dimensions as ints, None where dynamic (-1, 0, a symbol or missing)."""
    out = []
    for d in dims:
        try:
            n = int(d)
        except (TypeError, ValueError):
            n = None
        out.append(n if n is not None and n > 0 else None)
    return out


def input_shape(dims, name: str, shapes: dict, given: np.ndarray | None) -> tuple[int, ...]:
    if name in shapes:
        return tuple(shapes[name])
    dims = _dims(dims)
    if given is not None and len(given.shape) == len(dims):
        return tuple(int(g) if d is None else d for d, g in zip(dims, given.shape))
    return tuple(1 if d is None else d for d in dims)  # a dynamic dimension at 1


def given(inputs: dict[str, np.ndarray], name: str, i: int, dims) -> np.ndarray | None:
    """The given sample for input `name` (or the i-th), with or without its leading sample axis to match
    the artifact's rank."""
    values = list(inputs.values())
    x = inputs.get(name, values[i] if i < len(values) else None)
    if x is None:
        return None
    for candidate in (x[0], x):  # the .npz holds samples along its first axis
        if candidate.ndim == len(dims):
            return candidate
    return None


def specs(feeds: dict[str, np.ndarray]) -> list[dict]:
    return [{"name": k, "shape": list(v.shape), "dtype": str(v.dtype)} for k, v in feeds.items()]


def _status_bytes(field: str) -> int:
    """A memory figure of this process from /proc/self/status (VmRSS now, VmHWM its peak), in bytes."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _peak_bytes() -> int:
    # VmHWM starts afresh at exec; getrusage's ru_maxrss keeps the parent's peak across fork and exec
    return _status_bytes("VmHWM") or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def measure(job: dict) -> dict:
    fmt, path = job["format"], job["path"]
    inputs: dict[str, np.ndarray] = {}
    if job.get("inputs"):
        with np.load(job["inputs"]) as data:
            inputs = {k: data[k][:1] for k in data.files if k != "labels"}
    shapes = {k: tuple(v) for k, v in (job.get("shapes") or {}).items()}
    runtime_only(fmt)  # as in the runtime worker: the compiler's memory is not the artifact's
    for module in (*by_format(fmt).modules, *job.get("needed", ())):  # the runtime, and what the artifact declares
        importlib.import_module(module)
    runtime_rss = _status_bytes("VmRSS")
    opener = by_format(fmt).backend.open_timed
    timings, specs = [], []
    min_seconds, max_seconds = job.get("min_seconds", MIN_SECONDS), job.get("max_seconds", MAX_SECONDS)
    if job.get("lm"):
        timings, specs = _lm_timings(fmt, path, job["threads"], job["lm"], min_seconds, max_seconds)
        return {"timings": timings, "inputs": specs, "peak_rss_bytes": _peak_bytes(), "runtime_rss_bytes": runtime_rss}
    for threads in job["threads"]:
        pooled, stable = [], True
        for _ in range(ROUNDS):  # fresh instances: where the runtime put its buffers changes the latency too
            call, specs = opener(path, threads, inputs, shapes, np.random.default_rng(0))
            seconds, settled_ = samples(call, min_seconds=min_seconds / ROUNDS, max_seconds=max_seconds / ROUNDS)
            pooled += seconds
            stable = stable and settled_
            del call
            gc.collect()
        timings.append(Timing.of(threads, pooled, stable).to_json())
    return {"timings": timings, "inputs": specs, "peak_rss_bytes": _peak_bytes(), "runtime_rss_bytes": runtime_rss}


def _lm_timings(fmt: str, path: str, threads: list[int], lm: dict, min_seconds: float,
                max_seconds: float) -> tuple[list[dict], list[dict]]:
    """A decoder LM's timings (`lm`: prefill_len, cache_shape, vocab; edgekit.targets.lm_child.timed_calls):
    per thread count, the decode call's Timing (milliseconds per generated token) with the prefill call's median
    and both as tokens per second; ROUNDS fresh instances pooled, as for any artifact."""
    out = []
    for n in threads:
        pooled = {"prefill": [], "decode": []}
        stable = True
        for _ in range(ROUNDS):
            calls = timed_calls(by_format(fmt).backend.lm_entry_points(path, n), lm["prefill_len"],
                                tuple(lm["cache_shape"]), lm["vocab"])
            for name, call in calls.items():
                seconds, settled_ = samples(call, min_seconds=min_seconds / ROUNDS / 2,
                                            max_seconds=max_seconds / ROUNDS / 2)
                pooled[name] += seconds
                stable = stable and settled_
            del calls
            gc.collect()
        decode = Timing.of(n, pooled["decode"], stable).to_json()
        prefill_ms = float(np.median(pooled["prefill"])) * 1e3
        out.append(decode | {"prefill_ms": prefill_ms, "prefill_tokens_per_s": lm["prefill_len"] / prefill_ms * 1e3,
                             "decode_tokens_per_s": 1e3 / decode["median_ms"]})
    specs = [{"name": "tokens", "shape": [1, lm["prefill_len"]], "dtype": "int64"},
             {"name": "cache", "shape": list(lm["cache_shape"]), "dtype": "float32"}]
    return out, specs


def main(argv: list[str]) -> int:
    die_with_parent()
    job_path, out_path = argv
    with open(job_path) as f:
        job = json.load(f)
    os.environ["TMPDIR"] = job.get("tmp") or os.environ.get("TMPDIR", "")
    try:
        result = measure(job)
    except (ValueError, RuntimeError) as e:  # the runtime refused the artifact or edgekit's inputs: say why
        print(f"Error: {type(e).__name__}: {' '.join(str(e).split())}", file=sys.stderr)
        return 1
    with open(out_path, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
