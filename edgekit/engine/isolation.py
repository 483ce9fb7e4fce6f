"""Running artifacts in their own runtimes, in a child process so a native crash stays contained."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from edgekit.core.artifact import ModelArtifact
from edgekit.core.deps import available, require
from edgekit.core.errors import BadInput, ConversionFailed
from edgekit.core.inspection import Inspection
from edgekit.core.quiet import captured, private_dir
from edgekit.core.signature import Signature
from edgekit.targets import by_format
from edgekit.targets.inspection import inspect_artifact


def run_isolated(artifact: ModelArtifact, inputs: dict[str, np.ndarray], *, timeout: float = 900,
                 inspect: bool = False, inspection: Inspection | None = None
                 ) -> tuple[list[np.ndarray], Inspection | None]:
    """Run `artifact` on stacked `inputs` (leading sample axis) in its runtime's worker process.

    Returns one stacked array per output and, with `inspect`, the artifact's inspection (see
    edgekit.targets.inspection): `inspection` when given, else made in this process. Its runtime
    needs decide the worker: the format's runtime plus only the libraries the artifact declares. A crash
    or error in the runtime becomes a ConversionFailed naming the runtime and quoting its last words; the
    worker is started again for the next artifact.
    """
    require(by_format(artifact.format).extra, f"running a .{artifact.format} artifact")
    found = inspection if inspection is not None else _inspection(artifact)
    needed = tuple(sorted({m for need in (found.needs if found else ()) for m in need.modules}))
    with _job_dir() as tmp:
        sig_path, in_path, out_path = (os.path.join(tmp, n) for n in ("sig.json", "in.npz", "out.npz"))
        _write_job(artifact.signature, inputs, sig_path, in_path)
        _worker(artifact.format, needed).run({"path": str(artifact.path), "signature": sig_path, "inputs": in_path,
                                              "outputs": out_path, "tmp": tmp}, artifact.path, timeout)
        with np.load(out_path) as data:
            outputs = [data[f"output_{j}"] for j in range(len(data.files))]
    if inspect and found is None:  # the runtime ran a file its reader could not read: the reader's error
        with captured():
            found = inspect_artifact(artifact.format, str(artifact.path))
    return outputs, found if inspect else None


_INSPECTED: dict[tuple, Inspection] = {}


def _inspection(artifact: ModelArtifact) -> Inspection | None:
    """The inspection of an artifact edgekit built, made in this process and kept while the file is
    unchanged: what it needs from its runtime decides the worker that runs it. A given file, which may be
    damaged, is inspected in a child first (`inspect_isolated`) and its inspection passed to run_isolated."""
    st = os.stat(artifact.path)
    key = (str(artifact.path), st.st_mtime_ns, st.st_size)
    if key not in _INSPECTED:
        try:
            with captured():
                _INSPECTED[key] = inspect_artifact(artifact.format, str(artifact.path))
        except Exception:  # noqa: BLE001 - a file its reader cannot read declares nothing: the runtime says what is wrong
            return None
    return _INSPECTED[key]


class RuntimeWorker:
    """A child process with one runtime imported, running artifacts until it is closed.

    It reads one job per line (JSON) on its standard input and answers on a pipe of its own, so
    whatever the runtime prints cannot be taken for an answer; its standard error goes to a file
    whose last lines explain a crash.
    """

    def __init__(self, fmt: str, needed: tuple[str, ...] = ()):
        self.fmt = fmt
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "edgekit.targets.worker", fmt, *needed], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True, errors="replace",
                                     env={**os.environ, "OMP_NUM_THREADS": "1"})  # batch-1 loops: one thread

    def run(self, job: dict, path: str, timeout: float) -> None:
        """Send one job (file paths, its outputs written to job["outputs"]) and wait up to `timeout` seconds.
        Any failure is a ConversionFailed naming `path`'s file; after a timeout or a crash the worker is closed."""
        runtime = by_format(self.fmt).runtime
        try:
            self.proc.stdin.write(json.dumps(job) + "\n")
            self.proc.stdin.flush()
            ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
            answer = self.proc.stdout.readline() if ready else None
        except (BrokenPipeError, OSError):
            answer = ""
        except BaseException:  # interrupted in flight (a time budget, Ctrl-C): its answer would be read by the next job
            self.close()
            raise
        if answer is None:
            self.close()
            raise ConversionFailed(f"{runtime} did not finish {Path(path).name} within {timeout:.0f} s")
        if answer.startswith("ok"):
            return
        if answer.startswith("error "):  # the whole cause, our temporary folder cut from the paths it names
            cause = answer[6:].strip().replace(str(Path(path).parent) + os.sep, "")
            raise ConversionFailed(f"{runtime} failed running {Path(path).name}: {cause[:1500]}")
        code = self.proc.wait()  # no answer: the process died
        self.close()
        how = f"crashed (signal {-code})" if code < 0 else "failed"
        raise ConversionFailed(f"{runtime} {how} running {Path(path).name}: {_last_words(self._stderr())}")

    @property
    def alive(self) -> bool:
        """Whether the child is still running (a dead one is replaced before the next job)."""
        return self.proc.poll() is None

    def _stderr(self) -> str:
        self.log.seek(0)
        return self.log.read()[-20000:].decode("utf-8", "replace")

    def close(self) -> None:
        """Kill the child if it still runs and release its pipes and log; a job in flight is lost."""
        if self.alive:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                stream.close()
        self.log.close()


_WORKERS: dict[tuple[str, tuple[str, ...]], RuntimeWorker] = {}


def _worker(fmt: str, needed: tuple[str, ...] = ()) -> RuntimeWorker:
    """This process's worker for format `fmt` with the modules `needed` beyond its runtime (one worker per
    set, so no artifact runs with a library it does not declare), started on first use and after a crash."""
    worker = _WORKERS.get((fmt, needed))
    if worker is None or not worker.alive:
        if worker is not None:
            worker.close()
        worker = _WORKERS[(fmt, needed)] = RuntimeWorker(fmt, needed)
    return worker


def start_workers(formats) -> None:
    """Start the workers of `formats` now (those whose runtime is installed), so that each imports its
    runtime while this process opens the source and converts; the first artifact then runs at once."""
    for fmt in formats:
        if available(by_format(fmt).extra):
            _worker(fmt)


@atexit.register
def close_workers() -> None:
    """Stop every runtime worker of this process (they also stop when it dies)."""
    while _WORKERS:
        _WORKERS.popitem()[1].close()


def trace_layers_isolated(fmt: str, float_path: str, quant_path: str, signature: Signature,
                          inputs: dict[str, np.ndarray], *, gains: bool = False, timeout: float = 900) -> list[dict]:
    """Per-layer drift of `quant_path` against `float_path` (see edgekit.engine.layers), in a child process;
    with `gains`, what keeping each layer float gains, where the format's tracer measures it."""
    require(by_format(fmt).extra, f"tracing a .{fmt} artifact")
    with _job_dir() as tmp:
        sig_path, in_path, out_path = (os.path.join(tmp, n) for n in ("sig.json", "in.npz", "layers.json"))
        _write_job(signature, inputs, sig_path, in_path)
        _child(["edgekit.targets.layers", fmt, float_path, quant_path, sig_path, in_path, out_path, *(["gains"] if gains else [])],
               fmt, quant_path, timeout)
        with open(out_path) as f:
            return json.load(f)


def inspect_isolated(fmt: str, path: str, *, timeout: float = 900) -> Inspection:
    """The inspection (edgekit.targets.inspection) of an artifact that may be damaged or hostile, made
    in a child process: a file the reader cannot make sense of is a BadInput naming it, a native crash or
    hang of the reader a ConversionFailed naming the runtime."""
    require(by_format(fmt).extra, f"inspecting a .{fmt} artifact")
    with _job_dir() as tmp:
        out_path = os.path.join(tmp, "inspection.json")
        _child(["edgekit.targets.inspect_child", fmt, str(path), out_path], fmt, str(path), timeout)
        with open(out_path) as f:
            doc = json.load(f)
    if "error" in doc:
        raise BadInput(doc["error"]["message"], fix=doc["error"]["fix"])
    return Inspection.from_json(doc["inspection"])


def latency_isolated(fmt: str, path: str, threads: tuple[int, ...], *, inputs: str | None = None,
                     shapes: dict | None = None, min_seconds: float = 1.0, max_seconds: float = 10.0,
                     needed: tuple[str, ...] = (), lm: dict | None = None, timeout: float = 900) -> dict:
    """Host CPU latency and peak memory of the artifact at `path` in its runtime (see
    edgekit.targets.latency), in a new child process: its peak memory is this artifact's alone. `needed`: the
    modules the artifact declares it needs beyond its runtime (a kernel library), imported there too. `lm`
    (prefill_len, cache_shape, vocab): a decoder LM, timed per prefill and per decoded token."""
    require(by_format(fmt).extra, f"timing a .{fmt} artifact")
    with _job_dir() as tmp:
        job_path, out_path = os.path.join(tmp, "job.json"), os.path.join(tmp, "latency.json")
        with open(job_path, "w") as f:
            json.dump({"format": fmt, "path": str(path), "threads": list(threads), "inputs": inputs,
                       "shapes": shapes or {}, "min_seconds": min_seconds, "max_seconds": max_seconds, "tmp": tmp,
                       "needed": list(needed), "lm": lm}, f)
        _child(["edgekit.targets.latency", job_path, out_path], fmt, path, timeout)
        with open(out_path) as f:
            return json.load(f)


def lm_steps_isolated(fmt: str, path: str, windows: np.ndarray, *, prefill_len: int, cache_shape, generate: int = 0,
                      threads: int = 1, needed: tuple[str, ...] = (), timeout: float = 1800) -> dict[str, np.ndarray]:
    """A decoder LM artifact run token by token through its runtime with its cache, in a child process
    (edgekit.targets.lm_child): its logits on `windows`, its greedy tokens, the seconds of each call. `needed`:
    the modules the artifact declares it needs beyond its runtime (a kernel library), imported there too."""
    require(by_format(fmt).extra, f"running a .{fmt} language model")
    with _job_dir() as tmp:
        job_path, win_path, out_path = (os.path.join(tmp, n) for n in ("job.json", "windows.npz", "out.npz"))
        np.savez(win_path, tokens=windows)
        with open(job_path, "w") as f:
            json.dump({"windows": win_path, "prefill_len": prefill_len, "cache_shape": list(cache_shape),
                       "generate": generate, "threads": threads, "needed": list(needed)}, f)
        _child(["edgekit.targets.lm_child", fmt, str(path), job_path, out_path], fmt, str(path), timeout)
        with np.load(out_path) as out:
            return {k: out[k] for k in out.files}


@contextlib.contextmanager
def _job_dir():
    """A private folder for one child's inputs and outputs, `edgekit-job-<pid>-*` in the temporary folder
    (inside --out during a conversion); ones a killed run left behind are swept away first."""
    path = private_dir(tempfile.gettempdir(), "edgekit-job-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _write_job(signature: Signature, inputs: dict[str, np.ndarray], sig_path: str, in_path: str) -> None:
    with open(sig_path, "w") as f:
        json.dump(signature.to_json(), f)
    np.savez(in_path, **inputs)


def _child(args: list[str], fmt: str, path: str, timeout: float) -> None:
    """Run `python -m args...`; a crash, error or timeout becomes a ConversionFailed naming the runtime."""
    runtime = by_format(fmt).runtime
    try:
        proc = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, errors="replace")
    except subprocess.TimeoutExpired:
        raise ConversionFailed(f"{runtime} did not finish {Path(path).name} within {timeout:.0f} s") from None
    if proc.returncode != 0:
        how = f"crashed (signal {-proc.returncode})" if proc.returncode < 0 else "failed"
        raise ConversionFailed(f"{runtime} {how} running {Path(path).name}: {_last_words(proc.stderr)}")


def _last_words(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if "Error" in ln or "error" in ln]
    return (errors or lines or ["no message"])[-1][:400]
