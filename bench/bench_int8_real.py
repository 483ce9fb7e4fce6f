"""Benchmark: edgekit's int8 against the raw library calls, on real pretrained models and real data.

    .venv/bin/python bench/bench_int8_real.py [--models a,b] [--targets x,y] [--work DIR] [--json PATH]

For each model of sample_models/real_models.py (EfficientNet-Lite0, MiniLM-L6, the nudenet YOLOv8n
detector) and each target (tflite, executorch, onnx for the .pt2 models; onnx for the .onnx detector):

  edgekit  `edgekit convert SRC -t TARGET --int8 --calib CALIB --eval EVAL --json` as a subprocess
           (edgekit's defaults, i.e. MinMax calibration), plus one fp32 conversion for the size ratio;
  raw      the calls a hand-written script would make on the same calibration samples: litert-torch
           PT2E (tflite), XNNPACKQuantizer + XnnpackPartitioner (executorch), onnxruntime's
           quant_pre_process + quantize_static QDQ MinMax (onnx; for a .pt2 source it quantizes the
           fp32 .onnx edgekit exported, since the raw call is the quantizer, not the exporter).
           Each raw artifact is verified by edgekit's own verifier (edgekit.engine.pipeline.verify_artifacts)
           on the same eval samples, so both sides are measured alike. A raw call that raises is
           reported as "fails: <exception>", as its user would see it.

Columns: cosine = mean per-sample cosine of output 0 against the source model, cos min = worst sample,
top-1 = arg-max agreement (classifier), ch-cos = per-channel cosine (detector), w-int8 = share of the
weight bytes stored as int8, int8/fp32 = artifact bytes over edgekit's fp32 artifact for the target
(for the .onnx detector, over the source file: edgekit has nothing to convert at fp32 onnx → onnx),
conv s = conversion seconds (edgekit's own report / the raw calls), wall s = edgekit's whole subprocess
(start-up, conversion, verification) / raw conversion + verification. The machine may be shared:
seconds are indicative. Models build (~10 s each) and are cached in --work (default: a temp dir).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
EDGEKIT = Path(sys.executable).with_name("edgekit")
TORCH_TARGETS = ("tflite", "executorch", "onnx")
EXT = {"tflite": "tflite", "executorch": "pte", "onnx": "onnx"}
RAW_LOG: list[str] = []  # the libraries' own chatter, kept off the table


def real_models():
    spec = importlib.util.spec_from_file_location("real_models", REPO / "sample_models" / "real_models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


# ----------------------------------------------------------------------------- edgekit side
def edgekit_convert(m, target: str, int8: bool, out: Path, extra: tuple = ()) -> dict:
    cmd = [str(EDGEKIT), "convert", str(m.source), "-t", target, "--eval", str(m.eval), "--json", "--out", str(out),
           *extra]
    if int8:
        cmd += ["--int8", "--calib", str(m.calib)]
    if m.input_shape:
        cmd += ["--input-shape", m.input_shape]
    if getattr(m, "output_kind", None):
        cmd += ["--output-kind", m.output_kind]
    started = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=out.parent)
    wall = time.perf_counter() - started
    row = {"exit": p.returncode, "wall_s": wall, "error": None, "artifact": None}
    try:
        row["artifact"] = json.loads(p.stdout)["artifacts"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
        row["error"] = f"no JSON artifact: {tail}"
    return row


# ----------------------------------------------------------------------------- raw library calls
def torch_calib(ep, calib: dict) -> list[tuple]:
    import torch

    names = [s.arg.name for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    keys = names if set(names) <= set(calib) else list(calib)
    return [tuple(torch.from_numpy(calib[k][i][None].copy()) for k in keys) for i in range(len(calib[keys[0]]))]


def calibrate(prepared, samples):
    import torch

    with torch.no_grad():
        for args in samples:
            prepared(*args)
    return prepared


def raw_tflite(m, calib, out, fp32_onnx):
    import litert_torch
    import torch
    from litert_torch.quantize.pt2e_quantizer import PT2EQuantizer, get_symmetric_quantization_config
    from litert_torch.quantize.quant_config import QuantConfig
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    ep = torch.export.load(str(m.source))
    samples = torch_calib(ep, calib)
    quantizer = PT2EQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    model = convert_pt2e(calibrate(prepare_pt2e(ep.module(), quantizer), samples), fold_quantize=False)
    litert_torch.convert(model, samples[0], quant_config=QuantConfig(pt2e_quantizer=quantizer)).export(str(out))


def raw_executorch(m, calib, out, fp32_onnx):
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer, get_symmetric_quantization_config)
    from executorch.exir import to_edge_transform_and_lower
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    ep = torch.export.load(str(m.source))
    samples = torch_calib(ep, calib)
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    model = convert_pt2e(calibrate(prepare_pt2e(ep.module(), quantizer), samples))
    lowered = to_edge_transform_and_lower(torch.export.export(model, samples[0]), partitioner=[XnnpackPartitioner()])
    out.write_bytes(lowered.to_executorch().buffer)


def raw_onnx(m, calib, out, fp32_onnx):
    """Returns a note when the source's dynamic input had to be fixed for quant_pre_process."""
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quant_pre_process, quantize_static

    src = Path(fp32_onnx if m.source.suffix != ".onnx" else m.source).resolve()
    if not src.is_file():
        raise FileNotFoundError(f"no fp32 .onnx from edgekit's fp32 run to quantize ({src})")
    graph = onnx.load(str(src), load_external_data=False).graph
    inits = {i.name for i in graph.initializer}
    names = [i.name for i in graph.input if i.name not in inits]
    keys = names if set(names) <= set(calib) else list(calib)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(range(len(calib[keys[0]])))

        def get_next(self):
            i = next(self.it, None)
            return None if i is None else {n: calib[k][i][None].copy() for n, k in zip(names, keys)}

    note = None
    with tempfile.TemporaryDirectory() as tmp, contextlib.chdir(tmp):  # their stray files land here
        pre = Path(tmp) / "pre.onnx"
        try:
            quant_pre_process(str(src), str(pre))
        except Exception as e:  # noqa: BLE001 — only then fix the dynamic input, as a user would next
            if not m.input_shape:
                raise
            from onnxruntime.tools.onnx_model_utils import make_input_shape_fixed

            note = f"quant_pre_process refused the dynamic model ({first_line(e)}); retried with the input shape fixed"
            name, dims = m.input_shape.split("=")
            model = onnx.load(str(src))
            make_input_shape_fixed(model.graph, name, [int(d) for d in dims.split(",")])
            onnx.save(model, str(Path(tmp) / "fixed.onnx"))
            quant_pre_process(str(Path(tmp) / "fixed.onnx"), str(pre))
        quantize_static(str(pre), str(out.resolve()), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    return note


RAW = {"tflite": raw_tflite, "executorch": raw_executorch, "onnx": raw_onnx}


def raw_side(m, target: str, fp32_onnx: str | None, folder: Path) -> dict:
    from edgekit.core.quiet import captured

    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"{m.name}.int8.{EXT[target]}"
    calib = dict(np.load(m.calib))
    row = {"exit": None, "error": None, "note": None, "artifact": None}
    log: list[str] = []
    started = time.perf_counter()
    try:
        with captured() as sink:
            log = sink
            row["note"] = RAW[target](m, calib, out, fp32_onnx)
    except Exception as e:  # noqa: BLE001 — a raw call that raises is a result
        row["error"] = f"fails: {first_line(e)}"
    finally:
        RAW_LOG.append(f"==== raw {m.name} {target}\n" + "".join(log))
    row["conv_s"] = time.perf_counter() - started
    if row["error"] is None:
        row["artifact"], row["error"] = verify(m, out)
    row["wall_s"] = time.perf_counter() - started
    gc.collect()
    return row


def verify(m, path: Path):
    """edgekit's verifier on an artifact made elsewhere: (artifact JSON, error)."""
    from edgekit.sources.loading import SourceOptions
    from edgekit.engine.request import build_request
    from edgekit.engine.pipeline import verify_artifacts

    req = build_request(source=str(m.source), targets=("all",), eval_data=str(m.eval), precision="int8",
                        output_kinds=(m.output_kind,) if getattr(m, "output_kind", None) else (),
                        source_options=SourceOptions(input_shapes=(m.input_shape,) if m.input_shape else ()))
    try:
        return verify_artifacts(req, [str(path)]).artifacts[0].to_json(), None
    except Exception as e:  # noqa: BLE001 - reported in the table, as a user of the raw calls would see it
        return None, f"verify fails: {first_line(e)}"


# ----------------------------------------------------------------------------- table
def summarize(model, target, side, row, fp32_bytes, kind):
    a = row.get("artifact") or {}
    v = a.get("verification") or {}
    out0 = (v.get("metrics") or {}).get("output_0", {})
    size = a.get("bytes")
    status = row["error"] or (f"exit {row['exit']}" if side == "edgekit" else "ok")
    return {
        "model": model, "target": target, "side": side, "result": status, "status": v.get("status"),
        "cosine": out0.get("cosine"), "cosine_min": out0.get("cosine_min"),
        "top1_agreement": out0.get("top1_agreement") if kind == "classifier" else None,
        "channel_cosine": out0.get("channel_cosine") if kind == "detector" else None,
        "int8_weight_share": (v.get("inspection") or {}).get("int8_weight_share"),
        "bytes": size, "fp32_bytes": fp32_bytes, "size_ratio": size / fp32_bytes if size and fp32_bytes else None,
        "conv_s": a.get("seconds") if side == "edgekit" else row.get("conv_s"), "wall_s": row.get("wall_s"),
        "note": row.get("note"), "reasons": v.get("reasons"),
    }


COLUMNS = [("model", 18, "s"), ("target", 10, "s"), ("side", 7, "s"), ("result", 34, "s"), ("status", 6, "s"),
           ("cosine", 7, ".4f"), ("cosine_min", 7, ".4f"), ("top1_agreement", 6, ".3f"), ("channel_cosine", 7, ".4f"),
           ("int8_weight_share", 6, ".3f"), ("size_ratio", 9, ".3f"), ("conv_s", 7, ".1f"), ("wall_s", 7, ".1f")]
HEADERS = {"cosine_min": "cos min", "top1_agreement": "top-1", "channel_cosine": "ch-cos",
           "int8_weight_share": "w-int8", "size_ratio": "int8/fp32", "conv_s": "conv s", "wall_s": "wall s"}


def cell(value, width, fmt):
    if value is None:
        return "-".rjust(width) if fmt != "s" else "-".ljust(width)
    if fmt == "s":
        text = str(value)
        return (text if len(text) <= width else text[:width - 1] + "…").ljust(width)
    return format(value, fmt).rjust(width)


def print_table(rows):
    print(" | ".join(cell(HEADERS.get(c, c), w, "s") if f == "s" else HEADERS.get(c, c).rjust(w)
                     for c, w, f in COLUMNS))
    print("-+-".join("-" * w for _, w, _ in COLUMNS))
    for r in rows:
        print(" | ".join(cell(r[c], w, f) for c, w, f in COLUMNS))
    notes = [r for r in rows if (r["result"] not in ("ok",) and not r["result"].startswith("exit 0")) or r["note"]]
    for r in notes:
        print(f"* {r['model']} {r['target']} {r['side']}: {r['result']}" + (f" — {r['note']}" if r["note"] else ""))


# ----------------------------------------------------------------------------- the loop every real-model bench runs
def bench_args(doc: str, argv=None) -> argparse.Namespace:
    """The options the real-model benchmarks share: --models, --targets, --work, --json."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--models", default="efficientnet_lite0,minilm_l6,nudenet_320n")
    parser.add_argument("--targets", default=",".join(TORCH_TARGETS))
    parser.add_argument("--work", type=Path, default=None, help="build folder for the models (default: temp dir)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    return parser.parse_args(argv)


@contextlib.contextmanager
def work_folder(args, prefix: str):
    """--work, or a temporary folder removed at the end."""
    with contextlib.ExitStack() as stack:
        work = args.work or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=prefix)))
        work.mkdir(parents=True, exist_ok=True)
        yield work


def cases(args, work: Path, prefix: str = ""):
    """(name, model, target, a fresh folder) for every real model × target asked for; an ONNX model
    goes to onnx only."""
    rm = real_models()
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    for name in (n.strip() for n in args.models.split(",") if n.strip()):
        m = rm.MODELS[name](work)
        for target in [t for t in targets if m.source.suffix != ".onnx" or t == "onnx"]:
            yield name, m, target, Path(tempfile.mkdtemp(prefix=f"{prefix}{name}-{target}-", dir=work))


def main(argv=None) -> int:
    args = bench_args(__doc__, argv)
    with work_folder(args, "bench-int8-") as work:
        started, rows = time.perf_counter(), []
        for name, m, target, base in cases(args, work):
            print(f"{name} {target}: edgekit fp32, edgekit int8, raw int8 …", flush=True)
            if m.source.suffix == f".{EXT[target]}":  # edgekit refuses fp32 onnx → onnx: nothing to convert
                fp32 = {"exit": 0, "error": None, "artifact": {"bytes": m.source.stat().st_size}}
            else:
                fp32 = edgekit_convert(m, target, False, base / "fp32")
            fp32_art = fp32["artifact"] or {}
            ours = edgekit_convert(m, target, True, base / "int8")
            raw = raw_side(m, target, fp32_art.get("path"), base / "raw")
            for side, row in (("edgekit", ours), ("raw", raw)):
                rows.append(summarize(name, target, side, row, fp32_art.get("bytes"), m.kind))
                r = rows[-1]
                print(f"  {side:7} {r['result']}  cosine={r['cosine']}  wall={r['wall_s']:.1f}s", flush=True)
            if fp32["error"] or fp32["exit"]:
                print(f"  (fp32 run: exit {fp32['exit']} {fp32['error'] or ''})", flush=True)
        total = time.perf_counter() - started
        (work / "raw-calls.log").write_text("\n".join(RAW_LOG))
    print(f"\nint8: edgekit vs raw library calls, verified by edgekit on the eval samples ({total:.0f} s in all)\n")
    print_table(rows)
    if args.json:
        args.json.write_text(json.dumps({"seconds": total, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
