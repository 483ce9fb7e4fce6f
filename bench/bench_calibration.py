"""Benchmark: edgekit's calibration methods and whole-model passes on the real models, beside the raw calls.

    .venv/bin/python bench/bench_calibration.py [--models a,b] [--targets x,y] [--work DIR] [--json PATH]

For each real model (sample_models/real_models.py) × target, in one run, verified by edgekit's verifier
on the model's eval samples:

  raw        bench_int8_real's raw library calls (the backend's quantizer as its docs show it);
  minmax     `edgekit convert --int8` (the default: min/max ranges, no pass);
  +sq        the same with --smooth-quant (only for models with linears reading a LayerNorm);
  +bc        the same with --bias-correction;
  auto       `--calib-method auto`: every method the backend has, without and with bias correction, and
             the best of them with SmoothQuant where it applies, each measured in the runtime on held-out
             calibration samples; the candidates are printed below the table with their held-out SQNR.

Columns: cosine / top-1 of output 0 against the source model on the eval samples, SQNR (dB), w-int8 = share
of weight bytes stored as int8, conv s = the whole command's wall time. The machine may be shared: seconds
are indicative.
"""

from __future__ import annotations

import json
import sys
import time

import bench_int8_real as R  # beside this script, which Python puts first on the path
SIDES = {"minmax": (), "+sq": ("--smooth-quant",), "+bc": ("--bias-correction",), "auto": ("--calib-method", "auto")}


def smoothable(m) -> bool:
    from edgekit.calibration import smooth_quant
    from edgekit.sources.loading import SourceOptions, open_source

    return smooth_quant.applies(open_source(str(m.source), SourceOptions(input_shapes=(m.input_shape,) if m.input_shape else ())))


def row(name: str, target: str, side: str, run: dict, kind: str) -> dict:
    r = R.summarize(name, target, "raw" if side == "raw" else "edgekit", run, None, kind)
    art = run.get("artifact") or {}
    metrics = ((art.get("verification") or {}).get("metrics") or {}).get("output_0") or {}
    cal = (art.get("calibration") or {})
    quant = art.get("quantization") or {}
    chosen = "+".join([cal.get("method") or "", *(p for p in ("smooth_quant", "bias_correction") if quant.get(p))])
    r.update(side=side, sqnr_db=metrics.get("sqnr_db"), chosen=chosen if side == "auto" else "",
             candidates=cal.get("candidates") or [])
    return r


COLUMNS = [("model", 18, "s"), ("target", 10, "s"), ("side", 6, "s"), ("result", 24, "s"), ("cosine", 7, ".4f"),
           ("sqnr_db", 6, ".2f"), ("top1_agreement", 6, ".3f"), ("int8_weight_share", 6, ".3f"), ("wall_s", 7, ".1f"),
           ("chosen", 28, "s")]
HEADERS = {**R.HEADERS, "sqnr_db": "SQNR", "wall_s": "conv s"}


def print_table(rows) -> None:
    print(" | ".join(R.cell(HEADERS.get(c, c), w, "s") if f == "s" else HEADERS.get(c, c).rjust(w)
                     for c, w, f in COLUMNS))
    print("-+-".join("-" * w for _, w, _ in COLUMNS))
    for r in rows:
        print(" | ".join(R.cell(r.get(c), w, f) for c, w, f in COLUMNS))
    for r in rows:
        if r["candidates"]:
            print(f"\n{r['model']} {r['target']} auto candidates (held-out calibration samples):")
            for c in r["candidates"]:
                passes = "+".join(p for p in ("smooth_quant", "bias_correction") if c.get(p)) or "-"
                print(f"    {c['method']:<10} {passes:<30} cosine {c['cosine']:.5f}  SQNR {c['sqnr_db']:.2f} dB")


def main(argv=None) -> int:
    args = R.bench_args(__doc__, argv)
    with R.work_folder(args, "bench-calib-") as work:
        started, rows = time.perf_counter(), []
        for name, m, target, base in R.cases(args, work, "calib-"):
            sides = [s for s in SIDES if s != "+sq" or smoothable(m)]
            print(f"{name} {target}: {', '.join(['raw', *sides])} …", flush=True)
            fp32_onnx = None
            if target == "onnx" and m.source.suffix != ".onnx":  # the raw quantizer needs edgekit's fp32 .onnx
                fp32_onnx = (R.edgekit_convert(m, target, False, base / "fp32").get("artifact") or {}).get("path")
            rows.append(row(name, target, "raw", R.raw_side(m, target, fp32_onnx, base / "raw"), m.kind))
            for side in sides:
                rows.append(row(name, target, side, R.edgekit_convert(m, target, True, base / side, SIDES[side]),
                                m.kind))
                r = rows[-1]
                print(f"  {side:6} {r['result']}  cosine={r['cosine']}  sqnr={r['sqnr_db']}  {r['chosen']}", flush=True)
        total = time.perf_counter() - started
    print(f"\nint8 calibration on real models, verified by edgekit on the eval samples ({total:.0f} s in all)\n")
    print_table(rows)
    if args.json:
        args.json.write_text(json.dumps({"seconds": total, "rows": rows}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
