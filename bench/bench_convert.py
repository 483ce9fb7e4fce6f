"""Benchmark: edgekit's conversion time against the raw library calls that do the same work.

    .venv/bin/python bench/bench_convert.py [--repeat 3] [--precisions fp32,int8]

For each target and precision it times, in the same process and interleaved, (a) edgekit's path
— open the source, plan the route, run the converter chain — and (b) the bare litert-torch /
ExecuTorch / onnxruntime calls a hand-written script would make, and prints the median of each
and their ratio. Then it times int8 calibration at 10, 100 and 1000 real digit images, edgekit
against the raw calls. Verification (running the artifact) is left out of both sides: the raw
script does not do it. The machine is shared: read the ratios, not the seconds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "sample_models" / "digits_cnn.pt2"


# ----------------------------------------------------------------------------- raw library calls
def raw_tflite(ep, args, precision, calib, out):
    import litert_torch

    if precision == "fp32":
        litert_torch.convert(ep.module(), args).export(str(out))
        return
    from litert_torch.quantize.pt2e_quantizer import PT2EQuantizer, get_symmetric_quantization_config
    from litert_torch.quantize.quant_config import QuantConfig
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = PT2EQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    model = _calibrate(prepare_pt2e(ep.module(), quantizer), calib)
    model = convert_pt2e(model, fold_quantize=False)
    litert_torch.convert(model, args, quant_config=QuantConfig(pt2e_quantizer=quantizer)).export(str(out))


def raw_pte(ep, args, precision, calib, out):
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    if precision != "fp32":
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
            XNNPACKQuantizer, get_symmetric_quantization_config)
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

        quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
        model = convert_pt2e(_calibrate(prepare_pt2e(ep.module(), quantizer), calib))
        ep = torch.export.export(model, args)
    out.write_bytes(to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer)


def raw_onnx(ep, args, precision, calib, out):
    import torch

    fp32 = out.with_name("raw-fp32.onnx") if precision != "fp32" else out
    torch.onnx.export(ep, args, str(fp32), dynamo=True, input_names=["x"], external_data=True, verbose=False)
    if precision == "fp32":
        return
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quant_pre_process, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(calib)

        def get_next(self):
            x = next(self.it, None)
            return None if x is None else {"x": x.copy()}

    pre = out.with_name("raw-pre.onnx")
    quant_pre_process(str(fp32), str(pre))
    quantize_static(str(pre), str(out), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)


def _calibrate(prepared, calib):
    import torch

    with torch.no_grad():
        for x in calib:
            prepared(torch.from_numpy(x.copy()))
    return prepared


RAW = {"tflite": raw_tflite, "pte": raw_pte, "onnx": raw_onnx}


# ----------------------------------------------------------------------------- edgekit's path
def edgekit_convert(target_format, precision, samples, folder):
    from edgekit.engine.graph import Graph
    from edgekit.sources.loading import open_source
    from edgekit.converters.base import ConvertContext
    from edgekit.core.quant import QuantSpec
    from edgekit.core.quiet import captured
    from edgekit.targets import by_format

    with captured():
        src = open_source(str(MODEL))
        plan = Graph().route(src.artifact.format, target_format, precision)
        # The calibration method each backend uses by default: a histogram (mse) for PT2E, MinMax for ORT.
        ctx = ConvertContext(src, folder, samples,
                             QuantSpec(precision, "minmax" if target_format == "onnx" else "mse"))
        artifact = src.artifact
        for i, step in enumerate(plan.steps):
            path = folder / f"step{i}{by_format(step.converter.target).extension}"
            artifact = step.converter()(artifact, path, step.precision, ctx)
    return artifact


def raw_convert(target_format, precision, calib, folder):
    import torch

    from edgekit.core.quiet import captured

    with captured():
        ep = torch.export.load(str(MODEL))
        args = (torch.from_numpy(calib[0].copy()),)
        RAW[target_format](ep, args, precision, calib, folder / f"raw.{target_format}")


def digits(n: int) -> np.ndarray:
    """n real digit images (1×1×8×8 each), cycling through scikit-learn's 1,797."""
    from sklearn.datasets import load_digits

    images = (load_digits().images / 16.0).astype(np.float32)
    return np.stack([images[i % len(images)][None, None].copy() for i in range(n)])


def timed(fn, *args) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        fn(*args, Path(tmp))
        return time.perf_counter() - started


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--precisions", default="fp32,int8")
    parser.add_argument("--calib-sizes", default="10,100,1000")
    args = parser.parse_args(argv)
    from edgekit.calibration.data import SampleSet

    def sample_set(x):
        return SampleSet("bench", {"x": x}, None)

    calib = digits(200)
    # Warm-up: imports and first-call caches are paid once, outside the measurements.
    for fmt in RAW:
        timed(raw_convert, fmt, "fp32", calib[:2])
        timed(edgekit_convert, fmt, "fp32", sample_set(calib[:2]))

    print(f"conversion of {MODEL.name}: median of {args.repeat} runs, edgekit vs the raw library calls")
    print(f"{'target':<8} {'precision':<9} {'edgekit s':>10} {'raw s':>8} {'ratio':>6}")
    for precision in args.precisions.split(","):
        for fmt in RAW:
            ours, raw = [], []
            for _ in range(args.repeat):
                ours.append(timed(edgekit_convert, fmt, precision, sample_set(calib)))
                raw.append(timed(raw_convert, fmt, precision, calib))
            o, r = statistics.median(ours), statistics.median(raw)
            print(f"{fmt:<8} {precision:<9} {o:>10.2f} {r:>8.2f} {o / r:>6.2f}", flush=True)

    print("\nint8 calibration + conversion by number of calibration samples (median of runs)")
    print(f"{'target':<8} {'samples':>7} {'edgekit s':>10} {'raw s':>8} {'ratio':>6}")
    for n in (int(s) for s in args.calib_sizes.split(",")):
        data = digits(n)
        for fmt in RAW:
            ours, raw = [], []
            for _ in range(args.repeat):
                ours.append(timed(edgekit_convert, fmt, "int8", sample_set(data)))
                raw.append(timed(raw_convert, fmt, "int8", data))
            o, r = statistics.median(ours), statistics.median(raw)
            print(f"{fmt:<8} {n:>7} {o:>10.2f} {r:>8.2f} {o / r:>6.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
