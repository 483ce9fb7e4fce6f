"""Benchmark: a model matrix as a CI gate runs it — cold, warm cache, one worker or two, Ray — and
edgekit against the raw library calls doing the same work, per target, as whole processes.

    .venv/bin/python bench/bench_matrix.py [--work /tmp/real] [--models digits_cnn,digits_mobilenet]
                                           [--targets tflite,executorch,onnx,ort] [--repeat 3]

Part 1 (`edgekit check`, whole processes): the models × targets × fp32 and int8 as one config, run
  cold (empty artifact cache) with --jobs 1, again warm (the same cache), cold with --jobs 2, and
  cold with --executor ray when Ray is installed; each run's JSON must equal the --jobs 1 run's.
Part 2 (edgekit ÷ raw, whole processes, verification included on both sides): for each model,
  target and precision, `edgekit convert --no-cache` against this file's `raw` command, which makes
  the same artifact with the libraries' own calls, runs the source and the artifact on the same eval
  samples in the same runtimes and compares them; paired and interleaved, the median of --repeat.
  Then `--target all` against the sum of the raw runs of every target.

The real model (EfficientNet-Lite0) is used when --work holds it (sample_models/real_models.py
writes it). The machine may be shared: read the ratios, not the seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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
MODELS = {  # name → (model, calibration, eval)
    "digits_cnn": (SAMPLES / "digits_cnn.pt2", SAMPLES / "digits_calib.npz", SAMPLES / "digits_eval.npz"),
    "digits_mobilenet": (SAMPLES / "digits_mobilenet.pt2", SAMPLES / "digits32_calib.npz", SAMPLES / "digits32_eval.npz"),
}
REAL = ("efficientnet_lite0", "efficientnet_lite0.pt2", "efficientnet_lite0_calib.npz", "efficientnet_lite0_eval.npz")


# ----------------------------------------------------------------------------- part 1: check runs
def config(models: dict, targets: list[str], folder: Path) -> Path:
    path = folder / "matrix.toml"
    path.write_text("".join(f'[[models]]\nname = "{name}"\npath = "{m}"\ncalibration = "{c}"\neval = "{e}"\n'
                            f'targets = {json.dumps(targets)}\nprecisions = ["fp32", "int8"]\n\n'
                            for name, (m, c, e) in models.items()))
    return path


def check(config_path: Path, out: Path, cache: Path, *extra: str) -> tuple[float, dict]:
    env = {**os.environ, "EDGEKIT_CACHE_DIR": str(cache)}
    started = time.perf_counter()
    proc = subprocess.run([PY, "-m", "edgekit", "check", str(config_path), "-o", str(out), "--json",
                           "--attribution", "none", *extra], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if proc.returncode not in (0, 1):
        raise SystemExit(f"edgekit check {' '.join(extra)} failed: {proc.stderr[-2000:]}")
    doc = json.loads(proc.stdout)
    for c in doc["cases"]:
        c["path"] = str(Path(c["path"]).relative_to(out))
    return seconds, doc


def part1(models: dict, targets: list[str], work: Path) -> None:
    cfg = config(models, targets, work)
    cases = len(models) * len(targets) * 2
    print(f"\nPart 1: edgekit check on {len(models)} models × {len(targets)} targets × fp32/int8 = {cases} cases")
    runs = [("cold, --jobs 1", "c1", ()), ("warm cache, --jobs 1", "c1", ()), ("cold, --jobs 2", "c2", ("--jobs", "2"))]
    try:
        import ray  # noqa: F401

        runs.append(("cold, --executor ray (local, 2 CPUs)", "c3", ("--executor", "ray", "--jobs", "2")))
    except ImportError:
        print("  (Ray is not installed: pip install 'edgekit[ray]' for the Ray row)")
    first, times = None, {}
    for label, cache, extra in runs:
        seconds, doc = check(cfg, work / f"out-{cache}", work / cache, *extra)
        same = "" if first is None else ("same results" if doc == first else "RESULTS DIFFER")
        first = first or doc
        times[label] = seconds
        print(f"  {label:<40} {seconds:8.1f} s  {doc['passed']} passed, {doc['failed']} failed  {same}", flush=True)
    cold = times["cold, --jobs 1"]
    print(f"  warm ÷ cold: {cold / times['warm cache, --jobs 1']:.1f}× faster; --jobs 2: "
          f"{cold / times['cold, --jobs 2']:.2f}× faster than --jobs 1" +
          "".join(f"; Ray: {cold / s:.2f}×" for k, s in times.items() if "ray" in k))


# ----------------------------------------------------------------------------- part 2: edgekit ÷ raw
def edgekit_run(model, calib, eval_data, target: str, precision: str, out: Path) -> float:
    args = [PY, "-m", "edgekit", "convert", str(model), "-t", target, "--eval", str(eval_data), "-o", str(out),
            "--no-cache"] + (["--int8", "--calib", str(calib)] if precision == "int8" else [])
    started = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"edgekit convert -t {target} failed: {proc.stderr[-2000:]}")
    return time.perf_counter() - started


def raw_run(model, calib, eval_data, target: str, precision: str, out: Path) -> float:
    started = time.perf_counter()
    proc = subprocess.run([PY, __file__, "raw", target, precision, str(model), str(calib), str(eval_data), str(out)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"raw {target} {precision} failed: {proc.stderr[-2000:]}")
    return time.perf_counter() - started


def part2(models: dict, targets: list[str], work: Path, repeat: int) -> None:
    print(f"\nPart 2: edgekit ÷ raw library calls, whole processes with verification, median of {repeat}")
    print(f"  {'model':<20} {'target':<11} {'precision':<9} {'edgekit s':>9} {'raw s':>8} {'ratio':>6}")
    for name, (model, calib, eval_data) in models.items():
        for precision in ("fp32", "int8"):
            sums = {"edgekit": [], "raw": []}
            for target in targets:
                ours, raw = [], []
                for i in range(repeat):
                    with tempfile.TemporaryDirectory(dir=work) as tmp:
                        ours.append(edgekit_run(model, calib, eval_data, target, precision, Path(tmp) / "e"))
                        raw.append(raw_run(model, calib, eval_data, target, precision, Path(tmp) / "r"))
                o, r = statistics.median(ours), statistics.median(raw)
                sums["raw"].append(r)
                print(f"  {name:<20} {target:<11} {precision:<9} {o:>9.1f} {r:>8.1f} {o / r:>6.2f}", flush=True)
            alls = []
            for i in range(repeat):
                with tempfile.TemporaryDirectory(dir=work) as tmp:
                    args = [PY, "-m", "edgekit", "convert", str(model), "--eval", str(eval_data), "-o", tmp, "--no-cache"]
                    for t in targets:
                        args += ["-t", t]
                    if precision == "int8":
                        args += ["--int8", "--calib", str(calib)]
                    started = time.perf_counter()
                    subprocess.run(args, capture_output=True, text=True)
                    alls.append(time.perf_counter() - started)
            a, total = statistics.median(alls), sum(sums["raw"])
            print(f"  {name:<20} {'these all':<11} {precision:<9} {a:>9.1f} {total:>8.1f} {a / total:>6.2f}"
                  "  (one edgekit run ÷ the sum of the raw runs)", flush=True)


# ----------------------------------------------------------------------------- the raw side
def raw_main(target: str, precision: str, model: str, calib: str, eval_data: str, out: str) -> None:
    """Convert with the libraries' own calls, run source and artifact on the eval samples, compare."""
    import torch

    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    ep = torch.export.load(model)
    name = next(s.arg.name for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT")
    with np.load(calib) as d:
        calib_x = [x[None].copy() for x in d[name if name in d else d.files[0]]]  # copies: no zero strides
    with np.load(eval_data) as d:
        eval_x = d[name if name in d else next(k for k in d.files if k != "labels")]
    args = (torch.from_numpy(calib_x[0].copy()),)
    module = ep.module()
    with torch.no_grad():
        reference = np.concatenate([module(torch.from_numpy(x[None].copy())).numpy() for x in eval_x])
    path = out_dir / f"raw.{'pte' if target == 'executorch' else target}"
    CONVERT[target](ep, args, precision, calib_x, path, name)
    outputs = np.concatenate([y for y in RUN[target](str(path), eval_x, name)])
    r, o = reference.reshape(len(reference), -1), outputs.reshape(len(outputs), -1)
    cosine = float(np.mean(np.sum(r * o, 1) / (np.linalg.norm(r, axis=1) * np.linalg.norm(o, axis=1) + 1e-12)))
    print(json.dumps({"target": target, "precision": precision, "cosine": cosine}))


def _calibrated(prepared, calib):
    import torch

    with torch.no_grad():
        for x in calib:
            prepared(torch.from_numpy(x.copy()))
    return prepared


def convert_tflite(ep, args, precision, calib, path, name):
    import litert_torch

    if precision == "fp32":
        litert_torch.convert(ep.module(), args).export(str(path))
        return
    from litert_torch.quantize.pt2e_quantizer import PT2EQuantizer, get_symmetric_quantization_config
    from litert_torch.quantize.quant_config import QuantConfig
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = PT2EQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    model = convert_pt2e(_calibrated(prepare_pt2e(ep.module(), quantizer), calib), fold_quantize=False)
    litert_torch.convert(model, args, quant_config=QuantConfig(pt2e_quantizer=quantizer)).export(str(path))


def convert_pte(ep, args, precision, calib, path, name):
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    if precision != "fp32":
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (XNNPACKQuantizer,
                                                                             get_symmetric_quantization_config)
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

        quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
        ep = torch.export.export(convert_pt2e(_calibrated(prepare_pt2e(ep.module(), quantizer), calib)), args)
    path.write_bytes(to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer)


def convert_onnx(ep, args, precision, calib, path, name):
    import torch

    fp32 = path.with_name("raw-fp32.onnx") if precision != "fp32" else path
    torch.onnx.export(ep, args, str(fp32), dynamo=True, input_names=[name], external_data=True, verbose=False)
    if precision == "fp32":
        return
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType, quant_pre_process,
                                          quantize_static)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(calib)

        def get_next(self):
            x = next(self.it, None)
            return None if x is None else {name: x.copy()}

    pre = path.with_name("raw-pre.onnx")
    quant_pre_process(str(fp32), str(pre))
    quantize_static(str(pre), str(path), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)


def convert_ort(ep, args, precision, calib, path, name):
    from onnxruntime.tools.convert_onnx_models_to_ort import OptimizationStyle, convert_onnx_models_to_ort

    onnx_path = path.with_suffix(".onnx")
    convert_onnx(ep, args, precision, calib, onnx_path, name)
    # for phones, as edgekit makes it (and ONNX Runtime's mobile guide says): on an x86 host an .ort
    # optimized for x86 runs other kernels, and its verification would time other work
    convert_onnx_models_to_ort(onnx_path, output_dir=path.parent, optimization_styles=[OptimizationStyle.Fixed],
                               target_platform="arm")
    produced = next(path.parent.glob(f"{onnx_path.stem}*.ort"))
    produced.rename(path)


def run_tflite(path, xs, name):
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=path, num_threads=1)
    runner = interp.get_signature_runner()
    key, given = next(iter(runner.get_input_details().items()))
    taken = next(iter(runner.get_output_details().values()))
    for x in xs:
        x = x[None].copy()
        if given["dtype"] != np.float32:  # an int8 model from PT2E takes and gives int8: scale by hand
            scale, zero = given["quantization_parameters"]["scales"][0], given["quantization_parameters"]["zero_points"][0]
            x = np.clip(np.round(x / scale) + zero, -128, 127).astype(given["dtype"])
        y = next(iter(runner(**{key: x}).values()))
        if taken["dtype"] != np.float32:
            scale, zero = taken["quantization_parameters"]["scales"][0], taken["quantization_parameters"]["zero_points"][0]
            y = (y.astype(np.float32) - zero) * scale
        yield y


def run_pte(path, xs, name):
    import torch
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(path).load_method("forward")
    for x in xs:
        yield method.execute([torch.from_numpy(x[None].copy())])[0].numpy()


def run_onnx(path, xs, name):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    key = session.get_inputs()[0].name
    for x in xs:
        yield session.run(None, {key: x[None].copy()})[0]


CONVERT = {"tflite": convert_tflite, "executorch": convert_pte, "onnx": convert_onnx, "ort": convert_ort}
RUN = {"tflite": run_tflite, "executorch": run_pte, "onnx": run_onnx, "ort": run_onnx}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["raw"]:
        raw_main(*argv[1:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=None, help="where sample_models/real_models.py wrote the real models")
    parser.add_argument("--models", default="digits_cnn,digits_mobilenet" + (f",{REAL[0]}"))
    parser.add_argument("--targets", default="tflite,executorch,onnx,ort")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--parts", default="1,2")
    args = parser.parse_args(argv)
    models = dict(MODELS)
    if args.work is not None and (args.work / REAL[1]).is_file():
        models[REAL[0]] = tuple(args.work / f for f in REAL[1:])
    models = {k: v for k, v in models.items() if k in args.models.split(",")}
    targets = args.targets.split(",")
    work = Path(tempfile.mkdtemp(prefix="edgekit-bench-matrix-"))
    try:
        print(f"models: {', '.join(models)}; targets: {', '.join(targets)}")
        if "1" in args.parts:
            part1(models, targets, work)
        if "2" in args.parts:
            part2(models, targets, work, args.repeat)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
