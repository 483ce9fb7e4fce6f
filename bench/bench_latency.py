"""Benchmark: `edgekit bench`'s latency against a timing loop written directly against each runtime.

    .venv/bin/python bench/bench_latency.py [--model sample_models/digits_mobilenet.pt2] [--repeat 11]

The MobileNet-style sample is converted once at fp32 and at int8 to tflite, executorch, onnx and ort
(`edgekit convert`). Then, per round and per format, `edgekit bench FP32 INT8 --threads 1 --json`
times the two artifacts, and for each a separate process runs this file's `direct` loop: the runtime's
own Python API as its documentation shows it (LiteRT Interpreter with its signature runner,
ExecuTorch's Runtime/Method, an ONNX Runtime InferenceSession), one thread, the same input shape, 50
warm-up calls, then 2 s of calls, the median. The two sides of a format run back to back, in turns
(edgekit first in even rounds, direct first in odd ones). Printed per artifact: both medians over
rounds with their ranges, edgekit ÷ direct as the median over rounds of the paired ratio, and
int8 ÷ fp32 by each side. Host CPU latency.

On a shared virtual machine a sub-millisecond latency drifts by 20–50% over minutes (the neighbours'
load) and moves from one process to the next: timings taken a format apart (a minute) disagree by
more than the two loops ever do, so each round compares the two sides measured seconds apart.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_models"
PY = sys.executable
TARGETS = ("tflite", "executorch", "onnx", "ort")
WARMUP, SECONDS = 50, 2.0


# ----------------------------------------------------------------------------- the direct loops
def direct(fmt: str, path: str) -> float:
    """Median seconds of one call, timed straight against the runtime (a new process per artifact)."""
    rng = np.random.default_rng(0)
    if fmt == "tflite":
        from ai_edge_litert.interpreter import Interpreter

        interp = Interpreter(model_path=path, num_threads=1)
        runner = interp.get_signature_runner()
        feeds = {k: _random(d["shape"], d["dtype"], rng) for k, d in runner.get_input_details().items()}

        def call():
            return runner(**feeds)
    elif fmt == "pte":
        import torch
        from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool
        from executorch.runtime import Runtime

        _unsafe_reset_threadpool(1)
        method = Runtime.get().load_program(path).load_method("forward")
        meta = method.metadata
        dtypes = {6: np.float32, 1: np.int8, 0: np.uint8}
        args = [torch.from_numpy(_random(meta.input_tensor_meta(i).sizes(), dtypes[meta.input_tensor_meta(i).dtype()], rng))
                for i in range(meta.num_inputs())]

        def call():
            return method.execute(args)
    else:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        if fmt == "ort":
            opts.add_session_config_entry("session.load_model_format", "ORT")
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        types = {"tensor(float)": np.float32, "tensor(int8)": np.int8, "tensor(uint8)": np.uint8}
        feeds = {i.name: _random([d if isinstance(d, int) else 1 for d in i.shape], types[i.type], rng)
                 for i in session.get_inputs()}

        def call():
            return session.run(None, feeds)
    for _ in range(WARMUP):
        call()
    times = []
    end = time.perf_counter() + SECONDS
    while time.perf_counter() < end:
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _range(values: list[float]) -> str:
    return f"{min(values):.4f}–{max(values):.4f}"


def _random(shape, dtype, rng) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.standard_normal(tuple(shape)).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, tuple(shape)).astype(dtype)


# ----------------------------------------------------------------------------- the benchmark
def edgekit(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    proc = subprocess.run([PY, "-m", "edgekit", *map(str, args)], capture_output=True, text=True, timeout=timeout)
    if proc.returncode not in (0, 1):
        sys.exit(f"edgekit {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["direct"]:
        print(json.dumps(direct(argv[1], argv[2])))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=SAMPLES / "digits_mobilenet.pt2")
    parser.add_argument("--calib", type=Path, default=SAMPLES / "digits32_calib.npz")
    parser.add_argument("--eval", type=Path, default=SAMPLES / "digits32_eval.npz")
    parser.add_argument("--repeat", type=int, default=11)
    args = parser.parse_args(argv)
    ours: dict[str, list[float]] = {}
    theirs: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="edgekit-bench-latency-") as tmp:
        out = Path(tmp) / "artifacts"
        targets = [a for t in TARGETS for a in ("-t", t)]
        edgekit("convert", args.model, *targets, "-o", out, "--eval", args.eval, "--no-cache")
        edgekit("convert", args.model, *targets, "-o", out, "--int8", "--calib", args.calib, "--eval", args.eval,
                "--no-cache")
        pairs: dict[str, dict[str, str]] = {}  # format → {precision: path}
        for a in json.loads(edgekit("report", out, "--json").stdout)["artifacts"]:
            pairs.setdefault(a["format"], {})[a["precision"]] = str(Path(a["path"]).resolve())
        for round_ in range(args.repeat):
            for fmt, pair in sorted(pairs.items()):
                paths = [pair[p] for p in ("fp32", "int8") if p in pair]
                sides = (_edgekit_side, _direct_side) if round_ % 2 == 0 else (_direct_side, _edgekit_side)
                for side in sides:
                    for path, ms in side(fmt, paths).items():
                        (ours if side is _edgekit_side else theirs).setdefault(path, []).append(ms)
            print(f"round {round_ + 1}/{args.repeat} done", file=sys.stderr)
    meta = {path: (fmt, precision) for fmt, pair in pairs.items() for precision, path in pair.items()}
    print(f"\n{args.model.name}: host CPU latency at 1 thread, {args.repeat} rounds")
    print(f"  {'artifact':28} {'edgekit ms':>11} {'range over rounds':>19} {'direct ms':>10} {'range over rounds':>19}"
          f" {'edgekit ÷ direct':>17}")
    med = {p: (statistics.median(ours[p]), statistics.median(theirs[p])) for p in meta}
    worst = 0.0
    for path in sorted(meta, key=lambda p: (meta[p][0], meta[p][1] != "fp32")):
        e, d = med[path]
        ratio = statistics.median(a / b for a, b in zip(ours[path], theirs[path]))  # paired within each round
        worst = max(worst, abs(ratio - 1))
        print(f"  {Path(path).name:28} {e:11.4f} {_range(ours[path]):>19} {d:10.4f} {_range(theirs[path]):>19}"
              f" {ratio:17.3f}")
    print(f"\n  {'format':10} {'int8 ÷ fp32 (edgekit)':>22} {'int8 ÷ fp32 (direct)':>21}")
    for fmt in ("tflite", "pte", "onnx", "ort"):
        pair = {meta[p][1]: med[p] for p in meta if meta[p][0] == fmt}
        if {"fp32", "int8"} <= set(pair):
            print(f"  {fmt:10} {pair['int8'][0] / pair['fp32'][0]:22.2f} {pair['int8'][1] / pair['fp32'][1]:21.2f}")
    print(f"\nlargest |edgekit ÷ direct − 1| (median over rounds of the paired ratio): {worst:.1%} "
          f"({'within' if worst <= 0.10 else 'OVER'} 10%)")
    return 0 if worst <= 0.10 else 1


def _edgekit_side(fmt: str, paths: list[str]) -> dict[str, float]:
    doc = json.loads(edgekit("bench", *paths, "--threads", "1", "--json").stdout)
    return {str(Path(a["path"]).resolve()): a["timings"][0]["median_ms"] for a in doc["artifacts"]}


def _direct_side(fmt: str, paths: list[str]) -> dict[str, float]:
    out = {}
    for path in paths:
        proc = subprocess.run([PY, __file__, "direct", fmt, path], capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            sys.exit(f"direct loop on {path} failed:\n{proc.stderr[-3000:]}")
        out[path] = json.loads(proc.stdout.strip().splitlines()[-1]) * 1e3
    return out


if __name__ == "__main__":
    sys.exit(main())
