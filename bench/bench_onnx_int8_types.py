"""Benchmark: ONNX Runtime int8 accuracy, latency and fusion by quantized types, on this CPU.

    .venv/bin/python bench/bench_onnx_int8_types.py [--work /tmp/real]

On x86-64 without VNNI, ONNX Runtime's uint8 × int8 kernels (VPMADDUBSW) saturate pairs of products in
int16; its quantization guide names uint8 × uint8, or 7-bit weights (`reduce_range`), as the remedy.
edgekit chooses uint8 × uint8 on such a CPU (edgekit.core.cpu). This script makes the fp32 ONNX model
with `edgekit convert`, quantizes it with onnxruntime's own `quantize_static` (QDQ, per-channel, MinMax)
in each type pair, runs each in ONNX Runtime with its default optimizations (the fused int8 kernels)
and, for reference, with basic optimizations only (QDQ run in float: what a saturation-free kernel
computes), and prints SQNR and cosine against the fp32 ONNX model; then the latency at 1 thread (median
of 1,000 calls after 100) and how many convolutions ONNX Runtime runs as fused int8 kernels (QLinearConv,
read from its optimized graph) against those it leaves DQ → Conv → Q in float. The digits CNN and the
MobileNet-style sample (its SiLU and HardSwish activations) always; EfficientNet-Lite0 when --work holds it
(sample_models/real_models.py writes it).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_models"


def main() -> int:
    import onnxruntime as ort
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType, quant_pre_process,
                                          quantize_static)

    from edgekit.core.cpu import int8_products_saturate

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    models = {"digits_cnn": (SAMPLES / "digits_cnn.pt2", SAMPLES / "digits_calib.npz", SAMPLES / "digits_eval.npz", None),
              "digits_mobilenet": (SAMPLES / "digits_mobilenet.pt2", SAMPLES / "digits32_calib.npz",
                                   SAMPLES / "digits32_eval.npz", (200, 200))}
    if args.work is not None and (args.work / "efficientnet_lite0.pt2").is_file():
        w = args.work
        models["efficientnet_lite0"] = (w / "efficientnet_lite0.pt2", w / "efficientnet_lite0_calib.npz",
                                        w / "efficientnet_lite0_eval.npz", (32, 24))
    print(f"onnxruntime {ort.__version__}; int8 products saturate on this CPU: {int8_products_saturate()}")
    pairs = {"int8 × int8": dict(activation_type=QuantType.QInt8, weight_type=QuantType.QInt8),
             "int8 × int8, 7-bit weights": dict(activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                                                reduce_range=True),
             "uint8 × uint8": dict(activation_type=QuantType.QUInt8, weight_type=QuantType.QUInt8)}
    for name, (model, calib_path, eval_path, counts) in models.items():
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            subprocess.run([sys.executable, "-m", "edgekit", "convert", str(model), "-t", "onnx", "-o", str(tmp),
                            "--no-cache"], check=True, capture_output=True)
            fp32 = next(tmp.glob("*.onnx"))
            with np.load(calib_path) as d:
                calib = d[d.files[0]]
            with np.load(eval_path) as d:
                samples = d[next(k for k in d.files if k != "labels")]
            if counts:
                calib, samples = calib[:counts[0]], samples[:counts[1]]
            key = ort.InferenceSession(str(fp32)).get_inputs()[0].name

            class Reader(CalibrationDataReader):
                def __init__(self):
                    self.it = iter(calib)

                def get_next(self):
                    x = next(self.it, None)
                    return None if x is None else {key: x[None].copy()}

            def run(path, level=None):
                opts = ort.SessionOptions()
                opts.intra_op_num_threads = 1
                if level is not None:
                    opts.graph_optimization_level = level
                s = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
                return np.concatenate([s.run(None, {key: x[None].copy()})[0] for x in samples]).reshape(len(samples), -1)

            def latency_ms(path) -> float:
                opts = ort.SessionOptions()
                opts.intra_op_num_threads = 1
                s = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
                feed = {key: samples[:1].copy()}
                for _ in range(100):
                    s.run(None, feed)
                times = []
                for _ in range(1000):
                    t = time.perf_counter()
                    s.run(None, feed)
                    times.append(time.perf_counter() - t)
                return statistics.median(times) * 1e3

            def convs(path) -> str:
                import onnx

                opts = ort.SessionOptions()
                opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
                opts.optimized_model_filepath = str(tmp / "optimized.onnx")
                ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
                ops = Counter(n.op_type for n in onnx.load(opts.optimized_model_filepath).graph.node)
                return f"convs fused int8 {ops['QLinearConv']}, float {ops['Conv'] + ops['FusedConv']}"

            def scores(ref, out):
                sqnr = 10 * np.log10((ref ** 2).sum() / ((ref - out) ** 2).sum())
                cos = np.mean(np.sum(ref * out, 1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(out, axis=1)))
                return f"{sqnr:6.2f} dB  cosine {cos:.5f}"

            pre = tmp / "pre.onnx"
            quant_pre_process(str(fp32), str(pre))
            reference = run(fp32)
            print(f"\n{name}: {len(calib)} calibration, {len(samples)} eval samples; against the fp32 ONNX model;"
                  f" fp32 {latency_ms(fp32):.4f} ms at 1 thread")
            for label, kw in pairs.items():
                q = tmp / "q.onnx"
                quantize_static(str(pre), str(q), Reader(), quant_format=QuantFormat.QDQ, per_channel=True, **kw)
                fused = scores(reference, run(q))
                emulated = scores(reference, run(q, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC))
                print(f"  {label:<28} int8 kernels {fused}   QDQ in float {emulated}   {latency_ms(q):.4f} ms   "
                      f"{convs(q)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
