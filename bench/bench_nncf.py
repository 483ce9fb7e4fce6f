"""Benchmark: NNCF's post-training int8 against edgekit's own, on real pretrained models and real data.

    PYTHONPATH=/tmp/nncf-pkgs .venv/bin/python bench/bench_nncf.py [--models a,b] [--work DIR] [--json PATH]

NNCF is not a dependency of edgekit. Install it beside the project's virtualenv, not into it, and keep
.venv's numpy/torch/onnx/scipy/scikit-learn/networkx/rich/...; only NNCF's missing small dependencies go
into the separate folder:

    .venv/bin/python -m pip install --target /tmp/nncf-pkgs --no-deps nncf==3.4.0 \\
        "ninja>=1.10.0.post2,<1.14" openvino-telemetry psutil "pydot>=1.4.1,<=4.0.1" pyparsing

For each model of sample_models/real_models.py built in --work (default /tmp/real): EfficientNet-Lite0
(classifier) and MiniLM-L6 (sentence embedding), on the same calibration samples (all of _calib.npz,
batch 1) and verified alike by edgekit's own verifier on _eval.npz (bench_int8_real.verify):

  edgekit onnx    `edgekit convert SRC -t onnx --int8 --calib CALIB --eval EVAL --json` (MinMax, QDQ,
                  per-channel); plus one fp32 conversion, whose .onnx is NNCF's ONNX input;
  nncf onnx       nncf.quantize(fp32 .onnx, nncf.Dataset(dicts of input name → array)) with its defaults
                  (mixed preset, fast bias correction; subset_size = all the calibration samples);
  nncf onnx tr    the same with model_type=nncf.ModelType.TRANSFORMER (SmoothQuant; MiniLM only);
  edgekit pte     `edgekit convert SRC -t executorch --int8 ...` (XNNPACKQuantizer, PT2E, MinMax);
  edgekit … bc    the same with --bias-correction (edgekit's own pass, against NNCF's fast bias correction);
  nncf pte        nncf.experimental.torch.fx.quantize_pt2e(torch.export.load(SRC).module(),
                  XNNPACKQuantizer(per-channel symmetric), nncf.Dataset(tuples of tensors)), then lowered as
                  edgekit lowers: torch.export.export → to_edge_transform_and_lower(XnnpackPartitioner)
                  → .to_executorch().buffer.

Columns: cosine = mean per-sample cosine of output 0 against the source model, cos min = worst sample,
top-1 = arg-max agreement (classifier), w-int8 = share of the weight bytes stored as int8, bytes = the
artifact, quant s = seconds of the quantization: edgekit's own report for its conversion (for onnx that
includes the fp32 export, which NNCF's row does not), NNCF's calls alone (for pte including the lowering),
wall s = that plus verification (edgekit: its whole subprocess). A call that raises is reported by the
first line of its exception and the run goes on. The libraries' own output goes to WORK/nncf-calls.log.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
LOG: list[str] = []


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bir = _load("bench_int8_real", REPO / "bench" / "bench_int8_real.py")


def require_nncf():
    try:
        import nncf
    except ImportError as e:
        sys.exit(f"bench_nncf: nncf is not importable ({e}). It is not an edgekit dependency; install it apart, "
                 "e.g. `.venv/bin/python -m pip install --target /tmp/nncf-pkgs --no-deps nncf==3.4.0 ninja "
                 "openvino-telemetry psutil pydot pyparsing`, and run with PYTHONPATH=/tmp/nncf-pkgs "
                 "(see this script's docstring).")
    return nncf


# ----------------------------------------------------------------------------- NNCF calls
def nncf_onnx(m, calib: dict, out: Path, fp32_onnx: str | None, transformer: bool = False):
    import nncf
    import onnx

    if not fp32_onnx or not Path(fp32_onnx).is_file():
        raise FileNotFoundError(f"no fp32 .onnx from edgekit's fp32 run to quantize ({fp32_onnx})")
    model = onnx.load(fp32_onnx)
    inits = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    keys = names if set(names) <= set(calib) else list(calib)
    items = [{n: calib[k][i][None].copy() for n, k in zip(names, keys)} for i in range(len(calib[keys[0]]))]
    extra = {"model_type": nncf.ModelType.TRANSFORMER} if transformer else {}
    quantized = nncf.quantize(model, nncf.Dataset(items), subset_size=len(items), **extra)
    onnx.save(quantized, str(out))
    return f"{len(items)} calibration samples"


def nncf_pte(m, calib: dict, out: Path, fp32_onnx: str | None):
    import nncf
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer, get_symmetric_quantization_config)
    from executorch.exir import to_edge_transform_and_lower
    from nncf.experimental.torch.fx import quantize_pt2e

    ep = torch.export.load(str(m.source))
    samples = bir.torch_calib(ep, calib)
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    with torch.no_grad():
        quantized = quantize_pt2e(ep.module(), quantizer, nncf.Dataset(samples), subset_size=len(samples))
    lowered = to_edge_transform_and_lower(torch.export.export(quantized, samples[0]), partitioner=[XnnpackPartitioner()])
    out.write_bytes(lowered.to_executorch().buffer)
    return f"{len(samples)} calibration samples"


def nncf_side(m, label: str, call, fp32_onnx, out: Path, **kw) -> dict:
    from edgekit.core.quiet import captured

    out.parent.mkdir(parents=True, exist_ok=True)
    calib = dict(np.load(m.calib))
    row = {"exit": None, "error": None, "note": None, "artifact": None}
    log: list[str] = []
    started = time.perf_counter()
    try:
        with captured() as sink:
            log = sink
            row["note"] = call(m, calib, out, fp32_onnx, **kw)
    except Exception as e:  # noqa: BLE001 — a call that raises is a result
        row["error"] = f"fails: {bir.first_line(e)}"
    finally:
        LOG.append(f"==== {m.name} {label}\n" + "".join(log))
    row["conv_s"] = time.perf_counter() - started
    if row["error"] is None:
        row["artifact"], row["error"] = bir.verify(m, out)
    row["wall_s"] = time.perf_counter() - started
    gc.collect()
    return row


# ----------------------------------------------------------------------------- table
COLUMNS = [("model", 18, "s"), ("side", 14, "s"), ("result", 30, "s"), ("status", 6, "s"), ("cosine", 7, ".4f"),
           ("cosine_min", 7, ".4f"), ("top1_agreement", 6, ".3f"), ("int8_weight_share", 6, ".3f"),
           ("bytes", 10, "d"), ("conv_s", 7, ".1f"), ("wall_s", 7, ".1f")]
HEADERS = {"cosine_min": "cos min", "top1_agreement": "top-1", "int8_weight_share": "w-int8",
           "conv_s": "quant s", "wall_s": "wall s"}


def print_table(rows):
    print(" | ".join(bir.cell(HEADERS.get(c, c), w, "s") if f == "s" else HEADERS.get(c, c).rjust(w)
                     for c, w, f in COLUMNS))
    print("-+-".join("-" * w for _, w, _ in COLUMNS))
    for r in rows:
        print(" | ".join(bir.cell(r[c], w, f) for c, w, f in COLUMNS))
    for r in rows:
        if (r["result"] != "ok" and not r["result"].startswith("exit 0")) or r["note"]:
            print(f"* {r['model']} {r['side']}: {r['result']}" + (f" — {r['note']}" if r["note"] else ""))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="efficientnet_lite0,minilm_l6")
    parser.add_argument("--work", type=Path, default=Path("/tmp/real"),
                        help="folder of the built models (built there if missing); results go in a subfolder")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    nncf = require_nncf()
    rm = bir.real_models()
    args.work.mkdir(parents=True, exist_ok=True)
    started, rows = time.perf_counter(), []
    for name in (n.strip() for n in args.models.split(",") if n.strip()):
        m = rm.MODELS[name](args.work)
        if m.source.suffix != ".pt2":
            print(f"{name}: skipped, not a .pt2 source", flush=True)
            continue
        base = Path(tempfile.mkdtemp(prefix=f"nncf-{name}-", dir=args.work))
        print(f"{name}: edgekit fp32 onnx, int8 onnx, int8 pte; nncf onnx, pt2e pte (in {base}) …", flush=True)
        fp32 = bir.edgekit_convert(m, "onnx", False, base / "fp32")
        fp32_art = fp32["artifact"] or {}
        if fp32["error"] or fp32["exit"]:
            print(f"  (fp32 onnx run: exit {fp32['exit']} {fp32['error'] or ''})", flush=True)
        bc = ("--bias-correction",)
        runs = [("edgekit onnx", "edgekit", lambda: bir.edgekit_convert(m, "onnx", True, base / "int8-onnx")),
                ("edgekit onnx bc", "edgekit", lambda: bir.edgekit_convert(m, "onnx", True, base / "bc-onnx", extra=bc)),
                ("nncf onnx", "nncf", lambda: nncf_side(m, "nncf onnx", nncf_onnx, fp32_art.get("path"),
                                                        base / "nncf-onnx" / f"{name}.int8.onnx"))]
        if m.kind == "embedding":  # a transformer: SmoothQuant
            runs.append(("nncf onnx tr", "nncf",
                         lambda: nncf_side(m, "nncf onnx transformer", nncf_onnx, fp32_art.get("path"),
                                           base / "nncf-onnx-tr" / f"{name}.int8.onnx", transformer=True)))
        runs += [("edgekit pte", "edgekit", lambda: bir.edgekit_convert(m, "executorch", True, base / "int8-pte")),
                 ("edgekit pte bc", "edgekit", lambda: bir.edgekit_convert(m, "executorch", True, base / "bc-pte",
                                                                           extra=bc)),
                 ("nncf pte", "nncf", lambda: nncf_side(m, "nncf pt2e", nncf_pte, None,
                                                       base / "nncf-pte" / f"{name}.int8.pte"))]
        for side, who, run in runs:
            row = run()
            r = bir.summarize(name, side.split()[1], who, row, fp32_art.get("bytes"), m.kind)
            r["side"] = side
            r["fp32_onnx_bytes"] = r.pop("fp32_bytes")
            r["path"] = (row.get("artifact") or {}).get("path")
            rows.append(r)
            print(f"  {side:13} {r['result']}  cosine={r['cosine']}  quant={r['conv_s']}s  wall={r['wall_s']:.1f}s",
                  flush=True)
    total = time.perf_counter() - started
    (args.work / "nncf-calls.log").write_text("\n".join(LOG))
    print(f"\nint8: edgekit vs NNCF {nncf.__version__}, verified by edgekit on the eval samples ({total:.0f} s in all)\n")
    print_table(rows)
    if args.json:
        args.json.write_text(json.dumps({"seconds": total, "nncf": nncf.__version__, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
