"""Benchmark: edgekit's default int8 against the raw library calls (and NNCF) on the whole model zoo.

    .venv/bin/python bench/bench_zoo.py [--models a,b] [--targets x,y] [--work DIR] [--skip-raw]
                                        [--json PATH [--merge]] [--md PATH] [--nncf-path DIR]

For every model of sample_models/zoo.py (25 real pretrained models, each with its calibration and disjoint
eval samples) and every target edgekit reaches from the model's source framework

    torch (.pt2, TorchScript .pt) tflite, executorch, onnx, ort
    keras (.keras, Keras 2 .h5)   tflite, onnx, ort
    savedmodel (TF SavedModel)  tflite, onnx, ort
    onnx (.onnx)                onnx, ort

it measures, on the same calibration samples and verified alike by edgekit's own verifier on the eval samples:

  edgekit  `edgekit convert SRC -t TARGET --eval EVAL --json --no-cache` as a subprocess
           (bench_int8_real.edgekit_convert), once at fp32 and once with edgekit's default int8: only
           `--int8 --calib CALIB`, plus `--input-shape` when the zoo gives one. --no-cache: every row is a
           real conversion, so its seconds are too, and edgekit's shared artifact cache is left alone.
           An .onnx source at fp32 → onnx without --input-shape has nothing to convert (edgekit refuses):
           its fp32 parity is "-" and its size ratio is taken over the source file.
  raw      what a hand-written script would call:
             torch → tflite      litert-torch PT2E, per-channel symmetric (bench_int8_real.raw_tflite)
             torch → executorch  XNNPACKQuantizer + XnnpackPartitioner (bench_int8_real.raw_executorch)
             torch → onnx        onnxruntime quant_pre_process + quantize_static, QDQ, MinMax, per-channel,
                                 on the fp32 .onnx edgekit exported (bench_int8_real.raw_onnx: the raw call is
                                 the quantizer, not the exporter)
             keras → tflite      tf.lite.TFLiteConverter.from_keras_model + Optimize.DEFAULT +
                                 representative_dataset + TFLITE_BUILTINS_INT8 (float I/O, as edgekit's default)
             keras → onnx        model.export(SavedModel) → `python -m tf2onnx.convert --saved-model`
                                 (its default opset) → quant_pre_process + quantize_static as above
             savedmodel → tflite tf.lite.TFLiteConverter.from_saved_model + the keras → tflite settings
             savedmodel → onnx   `python -m tf2onnx.convert --saved-model SRC` → quant_pre_process +
                                 quantize_static as above
             onnx → onnx         quant_pre_process + quantize_static on the source; when quant_pre_process
                                 refuses the dynamic input, again with the shape fixed by
                                 onnxruntime.tools.onnx_model_utils (bench_int8_real.raw_onnx)
             … → ort             the int8 .onnx of the row above, then onnxruntime's
                                 convert_onnx_models_to_ort with the Fixed optimization style (the tool's
                                 defaults otherwise: level all, no target platform)
           The raw and nncf .onnx quantizers get each calibration sample with a batch axis put before it, except
           a sample that already has the rank of the model input (Silero's 2×1×128 state; FedAsIs).
           Each raw artifact is verified by edgekit.engine.pipeline.verify_artifacts
           (bench_int8_real.verify). A raw call that raises is a row "fails: <first line>".
  nncf     only when nncf is importable (it is not an edgekit dependency; see bench/bench_nncf.py for how
           to install it apart; --nncf-path, default /tmp/nncf-pkgs, is appended to sys.path when that
           folder exists): nncf.quantize with its defaults on edgekit's fp32 .onnx, or on the source .onnx
           (target onnx), and nncf's quantize_pt2e + XNNPACKQuantizer (target executorch, torch sources),
           the calls of bench/bench_nncf.py. NNCF has no tflite or ort route: no rows there.

Every raw / nncf call runs in a child process (this script with --one), so a crash or a hang (timeout
--call-timeout, default 1800 s) is a row, not the end of the run; its libraries' output goes to
WORK/bench-zoo/calls.log.

Columns
  converts?      yes, or the first line of the failure (edgekit: its `edgekit: error:` line; raw: the
                 exception; "verify fails: …" when the artifact was made but edgekit could not run it)
  verdict        edgekit's pass / fail against its int8 thresholds (cosine ≥ 0.99, cosine_min ≥ 0.95,
                 int8 weight and conv/matmul share ≥ 0.5); the reasons are in the JSON
  fp32 cos       edgekit side only: mean per-sample cosine of edgekit's fp32 artifact against the source
  int8 cos       mean per-sample cosine of the int8 artifact against the source, the worst output of the
                 model (multi-output models: MTCNN box / prob / landmarks, Silero probability / state)
  int8 cos min   the worst sample's cosine, the lowest over the outputs edgekit reports it for: edgekit judges
                 each output by its kind (scores, embedding, regression, map, sequence; in the JSON as "kinds")
                 and leaves cosine_min out for a regression such as MTCNN's 4 box offsets, so this can
                 exceed int8 cos when the worst output is a regression
  metric, task   the zoo model's own metric (ZooModel.metric): top1 = arg-max agreement of output 0
                 (classifiers); cos = the int8 cos column (embedding, text map); decisions = share of the
                 source's face / not-face decisions the artifact makes too (MTCNN: per crop on R-Net and O-Net,
                 per position of P-Net's probability map; face_decisions); class cos = the
                 detector's class-score rows alone (detection_agreement: mean per-image cosine; the share of
                 the source's detections reproduced is in the notes); max_abs = largest
                 absolute difference of the speech probability (Silero VAD, lower is better); for the OCR
                 recogniser ctc = share of eval lines whose greedy CTC decoding (zoo.ctc_decode) is the same
                 string as the source model's, the artifact and the source both run here in onnxruntime
                 (the per-step arg-max agreement is in the notes and the JSON); pitch (CREPE) = share of eval
                 frames whose arg-max pitch bin is within 1 bin of the source's (pitch_agreement; the share over
                 the voiced frames, the source's peak > 0.5, is in the notes); note F1 (basic-pitch) = F1 of the
                 artifact's note map thresholded at 0.5 against the source's, over every sample × frame × key
                 (note_agreement; the notes also give the package's own nmp.onnx against the source and the
                 artifact against it). For these two the artifact runs in its runtime through edgekit's
                 run_isolated and the source as zoo_wild.reference_outputs runs it (torch.export program,
                 SavedModel in TF's v1 loader); the models of zoo_wild2: ctc (ddddocr's recogniser) = share of eval
                 captchas whose greedy CTC string is the source's, seq (g2p_en) = share of eval words whose greedy
                 phoneme sequence is the source's, boxes (ddddocr's detector) = share of the source's detections
                 (YOLOX decoding, score > 0.1, NMS 0.45) the artifact reproduces at IoU ≥ 0.5, mask IoU (MediaPipe's
                 selfie segmentation) = mean IoU of the masks thresholded at 0.5 (zoo_wild2.task_metric:
                 the source in onnxruntime or as its torch.export program, the artifact through run_isolated)
  bar            the model's task bar (ZooModel.task_bar; zoo.TASK_BARS says why): the task value at which a user
                 would call the int8 artifact good for the task (a maximum for max_abs, else a minimum)
  verdict vs task  edgekit rows: agree when the verdict says what the task says (pass and the task meets its bar, or
                 fail and it misses it), false fail (verdict fail, task meets the bar), false pass (verdict pass, task
                 misses the bar), not int8 (verdict fail only on the artifact's int8 shares, "did not really quantize",
                 while float layers keep the task); "-" when there is no verdict or no task value. Counted in a line
                 under the table.
  w-int8         share of the artifact's weight bytes stored as int8 (edgekit's inspection)
  int8/fp32      int8 artifact bytes over edgekit's fp32 artifact bytes for the same target
  conv s         conversion seconds: edgekit's own report (fp32 export included for an onnx/ort target from
                 torch or keras), the raw / nncf calls alone (the raw keras → onnx/ort rows include tf2onnx;
                 the raw torch → onnx/ort rows do not include edgekit's fp32 export)
  wall s         edgekit: its whole subprocess (start-up, conversion, verification); raw / nncf: the calls and
                 the verification, in the child process (start-up excluded)
Below the table, notes give what a cell cannot hold: whole failure lines, why a verdict is fail, notes of the raw
calls. The machine may be shared: seconds are indicative. Models are built (or reused) in --work. With --merge,
the rows of --json PATH (an earlier run) are kept for the model × target × side cells this run does not measure
again.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path):
    """A module from a file, as bench_nncf.py loads bench_int8_real.py; registered in sys.modules first, since
    zoo.py's dataclasses look their module up there."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


bir = _load("bench_int8_real", REPO / "bench" / "bench_int8_real.py")  # edgekit_convert, raw_*, verify, first_line
bnn = _load("bench_nncf", REPO / "bench" / "bench_nncf.py")            # nncf_onnx, nncf_pte, nncf_side
zoo = _load("zoo", REPO / "sample_models" / "zoo.py")                  # ZOO, load, ctc_charset, ctc_decode

TARGETS = {"torch": ("tflite", "executorch", "onnx", "ort"), "keras": ("tflite", "onnx", "ort"),
           "savedmodel": ("tflite", "onnx", "ort"), "onnx": ("onnx", "ort")}
ALL_TARGETS = ("tflite", "executorch", "onnx", "ort")  # also the order a model's targets run in: onnx before ort
EXT = {**bir.EXT, "ort": "ort"}
METRIC_LABEL = {"top1_agreement": "top1", "cosine": "cos", "max_abs": "max_abs↓", "ctc": "ctc", "class_scores": "class cos",
                "decisions": "decisions", "pitch": "pitch", "note_f1": "note F1", "seq": "seq", "boxes": "boxes",
                "mask_iou": "mask IoU"}
WILD2_METRICS = ("ctc", "seq", "boxes", "mask_iou")   # task metrics zoo_wild2.task_metric computes (ppocr_rec's ctc is ctc_agreement)


def edgekit_convert(m, target: str, int8: bool, out: Path, extra: tuple = ()) -> dict:
    """bench_int8_real.edgekit_convert, with a ZooModel.input_shape of several inputs ("a=1,576;b=2,1,128") given
    as one --input-shape per input."""
    shapes = [s for s in (m.input_shape or "").split(";") if s]
    if len(shapes) <= 1:
        return bir.edgekit_convert(m, target, int8, out, extra=extra)
    import dataclasses

    more = tuple(a for s in shapes[1:] for a in ("--input-shape", s))
    return bir.edgekit_convert(dataclasses.replace(m, input_shape=shapes[0]), target, int8, out, extra=(*extra, *more))


# ----------------------------------------------------------------------------- raw calls beyond bench_int8_real
def onnx_to_ort(onnx_path: Path, out: Path) -> None:
    """onnxruntime's own ORT-format tool, as `python -m onnxruntime.tools.convert_onnx_models_to_ort
    --optimization_style Fixed MODEL` runs it; the .ort is moved to `out`."""
    from onnxruntime.tools.convert_onnx_models_to_ort import OptimizationStyle, convert_onnx_models_to_ort

    with tempfile.TemporaryDirectory() as tmp:
        convert_onnx_models_to_ort(Path(onnx_path), output_dir=Path(tmp), optimization_styles=[OptimizationStyle.Fixed])
        made = list(Path(tmp).glob("*.ort"))
        if len(made) != 1:
            raise RuntimeError(f"convert_onnx_models_to_ort wrote {len(made)} .ort files")
        shutil.move(str(made[0]), out)


def then_ort(quantize_onnx):
    """The raw → ort call: `quantize_onnx`'s int8 .onnx (written beside the .ort), then onnx_to_ort."""
    def call(m, calib, out, fp32_onnx):
        qdq = out.with_suffix(".onnx")
        note = quantize_onnx(m, calib, qdq, fp32_onnx)
        onnx_to_ort(qdq, out)
        return note
    return call


def _keras_model(m):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras

    return keras.saving.load_model(str(m.source), compile=False)


def raw_keras_tflite(m, calib, out, fp32_onnx):
    import tensorflow as tf

    model = _keras_model(m)
    names = [t.name for t in model.inputs]
    keys = names if set(names) <= set(calib) else list(calib)
    n = len(calib[keys[0]])
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = lambda: ([calib[k][i][None].copy() for k in keys] for i in range(n))
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    out.write_bytes(converter.convert())


def tf2onnx_export(m, folder: Path) -> Path:
    """The Keras model exported as a SavedModel (Keras' defaults), then tf2onnx's command line on it."""
    model = _keras_model(m)
    saved, onnx_path = folder / "saved_model", folder / f"{m.name}.tf2onnx.onnx"
    shutil.rmtree(saved, ignore_errors=True)
    model.export(str(saved), verbose=False)
    return tf2onnx_cli(saved, onnx_path)


def tf2onnx_cli(saved: Path, onnx_path: Path) -> Path:
    """`python -m tf2onnx.convert --saved-model SAVED --output ONNX_PATH` (its default opset)."""
    p = subprocess.run([sys.executable, "-m", "tf2onnx.convert", "--saved-model", str(saved), "--output", str(onnx_path)],
                       capture_output=True, text=True, stdin=subprocess.DEVNULL)
    print(p.stdout + p.stderr)  # into the call's log
    if p.returncode != 0:
        errors = [ln for ln in p.stderr.splitlines() if "rror" in ln] or p.stderr.splitlines() or ["no output"]
        raise RuntimeError(f"tf2onnx exit {p.returncode}: {errors[-1].strip()}")
    return onnx_path


def raw_keras_onnx(m, calib, out, fp32_onnx):
    return bir.raw_onnx(m, calib, out, str(tf2onnx_export(m, out.parent)))


def raw_savedmodel_tflite(m, calib, out, fp32_onnx):
    """TFLiteConverter.from_saved_model on the source directory, with raw_keras_tflite's int8 settings."""
    import tensorflow as tf

    keys = list(calib)
    n = len(calib[keys[0]])
    converter = tf.lite.TFLiteConverter.from_saved_model(str(m.source))
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = lambda: ([calib[k][i][None].copy() for k in keys] for i in range(n))
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    out.write_bytes(converter.convert())


def raw_savedmodel_onnx(m, calib, out, fp32_onnx):
    return bir.raw_onnx(m, calib, out, str(tf2onnx_cli(m.source, out.parent / f"{m.name}.tf2onnx.onnx")))


RAW = {("torch", "tflite"): bir.raw_tflite, ("torch", "executorch"): bir.raw_executorch,
       ("torch", "onnx"): bir.raw_onnx, ("torch", "ort"): then_ort(bir.raw_onnx),
       ("keras", "tflite"): raw_keras_tflite, ("keras", "onnx"): raw_keras_onnx, ("keras", "ort"): then_ort(raw_keras_onnx),
       ("savedmodel", "tflite"): raw_savedmodel_tflite, ("savedmodel", "onnx"): raw_savedmodel_onnx,
       ("savedmodel", "ort"): then_ort(raw_savedmodel_onnx),
       ("onnx", "onnx"): bir.raw_onnx, ("onnx", "ort"): then_ort(bir.raw_onnx)}
NNCF = {("torch", "onnx"): bnn.nncf_onnx, ("keras", "onnx"): bnn.nncf_onnx, ("savedmodel", "onnx"): bnn.nncf_onnx,
        ("onnx", "onnx"): bnn.nncf_onnx,
        ("torch", "executorch"): bnn.nncf_pte}


class FedAsIs:
    """calib[k] for an input whose samples already have the model input's rank (Silero's state: 2×1×128 per
    sample, the model's batch axis being its axis 1). bench_int8_real.raw_onnx and bench_nncf.nncf_onnx feed
    `calib[k][i][None]`, a batch axis put before every sample; through this, `[i][None]` is the sample as is."""

    def __init__(self, samples: np.ndarray, i: int | None = None):
        self.samples, self.i = samples, i

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index):
        if self.i is None:
            return FedAsIs(self.samples, index)
        return self.samples[self.i] if index is None else self.samples[self.i][index]


def fed_by_rank(calib: dict, onnx_path: str | None) -> dict:
    """`calib` with FedAsIs around the arrays whose samples already have the rank of the .onnx input they feed."""
    if not onnx_path or not Path(onnx_path).is_file():
        return calib
    import onnx

    graph = onnx.load(onnx_path, load_external_data=False).graph
    ranks = {i.name: len(i.type.tensor_type.shape.dim) for i in graph.input}
    return {k: FedAsIs(v) if ranks.get(k) == v.ndim - 1 else v for k, v in calib.items()}


def describe(e: BaseException, always_where: bool = False) -> str:
    """bench_int8_real.first_line, with where it was raised when the exception says nothing (a bare assert)
    or `always_where`: the innermost frame, as package folder/file:line."""
    text = bir.first_line(e)
    frames = traceback.extract_tb(e.__traceback__)
    if frames and (always_where or not str(e).strip()):
        text += f" (raised at {'/'.join(Path(frames[-1].filename).parts[-2:])}:{frames[-1].lineno})"
    return text


def nncf_status(path: Path) -> str | None:
    """nncf's version when importable (after appending `path` to sys.path if it is a folder), else None."""
    if path.is_dir() and str(path) not in sys.path:
        sys.path.append(str(path))  # appended: the venv's numpy, torch, onnx... stay first
    try:
        import nncf
    except Exception:  # noqa: BLE001 — ImportError, or a broken install: both mean no NNCF rows
        return None
    return nncf.__version__


# ----------------------------------------------------------------------------- one raw / nncf call, in a child
def one_call(args) -> int:
    """Child mode (--one SIDE): run one raw or nncf call with bench_nncf.nncf_side (the call under edgekit's
    output capture, timed, then bench_int8_real.verify) and write its row to --row-out. When the call raises,
    the exceptions it was raised from (first lines) go into the row's note and the traceback into the log.
    The calibration samples are fed by the rank of the .onnx input when it is known (fed_by_rank)."""
    m = zoo.load(args.models, args.work)
    key = (m.framework, args.targets)
    if args.one == "nncf":
        nncf_status(args.nncf_path)
    call, causes, tracebacks = (RAW if args.one == "raw" else NNCF)[key], [], []

    def traced(m, calib, out, fp32_onnx):
        try:
            return call(m, fed_by_rank(calib, fp32_onnx), out, fp32_onnx)
        except Exception as e:
            tracebacks.append("".join(traceback.format_exception(e)))
            causes.append(describe(e, always_where=True))
            inner = e.__cause__ or (None if e.__suppress_context__ else e.__context__)
            while inner is not None:
                causes.append(describe(inner))
                inner = inner.__cause__ or (None if inner.__suppress_context__ else inner.__context__)
            raise

    out = Path(args.row_out).parent / f"{m.name}.int8.{EXT[args.targets]}"
    fp32_onnx = args.fp32_onnx or (str(m.source) if m.framework == "onnx" else None)
    with contextlib.chdir(out.parent):  # the verifier's and the libraries' stray files land in this folder
        row = bnn.nncf_side(m, f"{args.one} {args.targets}", traced, fp32_onnx, out)
    if causes:  # the exception where it was raised, then the ones it was raised from
        row["note"] = "; ".join(filter(None, [row["note"], " ← ".join(causes)]))
    Path(args.row_out).write_text(json.dumps(row))
    Path(args.row_out).with_suffix(".log").write_text("\n".join(bnn.LOG + tracebacks))
    return 0


def call_in_child(side: str, m, target: str, fp32_onnx: str | None, folder: Path, args) -> dict:
    """Run `--one side` for (m, target) in a child process; a crash or a timeout is a failed row."""
    folder.mkdir(parents=True, exist_ok=True)
    row_out = folder / "row.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", side, "--models", m.name, "--targets", target,
           "--work", str(args.work), "--row-out", str(row_out), "--nncf-path", str(args.nncf_path)]
    if fp32_onnx:
        cmd += ["--fp32-onnx", fp32_onnx]
    started = time.perf_counter()
    with open(folder / "child.log", "w") as log:
        child = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True)  # its own process group: a timeout ends its children too
        try:
            code = child.wait(timeout=args.call_timeout)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            code = None
    wall = time.perf_counter() - started
    if row_out.is_file():
        CALL_LOG.append(row_out.with_suffix(".log").read_text())
        return json.loads(row_out.read_text())
    tail = (folder / "child.log").read_text(errors="replace").strip().splitlines()
    why = f"timed out after {args.call_timeout:.0f} s" if code is None else f"child exit {code}: {tail[-1] if tail else ''}"
    CALL_LOG.append(f"==== {side} {m.name} {target}\n" + "\n".join(tail[-60:]))
    return {"exit": code, "error": f"fails: {why}", "note": None, "artifact": None, "conv_s": None, "wall_s": wall}


CALL_LOG: list[str] = []


# ----------------------------------------------------------------------------- the OCR recogniser's own metric
_REFERENCE: dict[str, tuple] = {}  # model name → the source's outputs (and what derives from them), made once


def _ort_outputs(path, x: np.ndarray) -> np.ndarray:
    """Output 0 of an .onnx / .ort model on every sample of x, one at a time, in onnxruntime (CPU)."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return np.concatenate([session.run(None, {name: x[i:i + 1]})[0] for i in range(len(x))])


def ctc_agreement(m, artifact: str) -> tuple[float, float] | None:
    """(share of eval lines whose greedy CTC string equals the source's, per-step arg-max agreement), the
    source .onnx and the int8 .onnx / .ort both run in onnxruntime (CPU), one sample at a time."""
    x = next(iter(np.load(m.eval).values()))
    if m.name not in _REFERENCE:
        charset = zoo.ctc_charset(m.source)
        ref = _ort_outputs(m.source, x)
        _REFERENCE[m.name] = charset, ref, [zoo.ctc_decode(r, charset) for r in ref]
    charset, ref, texts = _REFERENCE[m.name]
    try:
        out = _ort_outputs(artifact, x).reshape(ref.shape)
    except Exception as e:  # noqa: BLE001
        print(f"  (ctc: cannot run {artifact}: {bir.first_line(e)})", flush=True)
        return None
    same = np.mean([zoo.ctc_decode(o, charset) == t for o, t in zip(out, texts)])
    return float(same), float(np.mean(ref.argmax(-1) == out.argmax(-1)))


# ----------------------------------------------------------------------------- the detector's own metrics
def detection_agreement(m, artifact: str) -> tuple[float, float] | None:
    """(mean per-image cosine of the YOLO output's class-score rows 4:, share of the source's detections
    the artifact reproduces): a box-and-score tensor's cosine is carried by the box rows (pixels, up to
    320), so the class scores are judged apart. Detections are zoo's decode (score ≥ 0.25, NMS 0.45); one
    matches when the artifact has a detection of the same class with IoU ≥ 0.5; an image where neither
    detects anything agrees. The source .onnx and the artifact both run in onnxruntime (CPU)."""
    x = next(iter(np.load(m.eval).values()))
    if m.name not in _REFERENCE:
        _REFERENCE[m.name] = (_ort_outputs(m.source, x),)
    (ref,) = _REFERENCE[m.name]
    try:
        out = _ort_outputs(artifact, x).reshape(ref.shape)
    except Exception as e:  # noqa: BLE001
        print(f"  (detections: cannot run {artifact}: {bir.first_line(e)})", flush=True)
        return None
    cosines, agreed = [], []
    for r, o in zip(ref, out):
        a, b = r[4:].ravel().astype(np.float64), o[4:].ravel().astype(np.float64)
        norm = np.linalg.norm(a) * np.linalg.norm(b)
        cosines.append(float(a @ b / norm) if norm > 0 else float(np.array_equal(a, b)))
        want, got = zoo.rm.decode_detections(r), zoo.rm.decode_detections(o)
        hits = sum(any(c == c2 and _iou(box, box2) >= 0.5 for c2, _, box2 in got) for c, _, box in want)
        agreed.append(1.0 if not want and not got else hits / max(len(want), len(got)))
    return float(np.mean(cosines)), float(np.mean(agreed))


# ----------------------------------------------------------------------------- a face detector's decisions
def face_decisions(metrics: dict) -> float | None:
    """Share of the source's face / not-face decisions (the arg-max of the softmax each MTCNN net writes
    last) that the artifact makes too, as the verifier measured it in the artifact's own runtime: per crop
    on R-Net and O-Net (top1_agreement), per position of P-Net's channels-last probability map
    (step_top1_agreement)."""
    last = metrics.get(f"output_{len(metrics) - 1}", {})
    return last.get("top1_agreement", last.get("step_top1_agreement"))


# ----------------------------------------------------------------------------- pitch and note maps (zoo_wild)
def artifact_outputs(path: str, inputs: dict[str, np.ndarray], like: list[np.ndarray]) -> list[np.ndarray]:
    """An artifact's outputs on the eval samples (`inputs`: leading sample axis, each sample without the batch
    axis), in its own runtime through edgekit's run_isolated, as its verifier runs it (outputs in the source's
    order); each reshaped as the source's `like`."""
    from edgekit.core.artifact import ModelArtifact
    from edgekit.core.formats import detect
    from edgekit.core.signature import Signature, TensorSpec
    from edgekit.engine.isolation import run_isolated

    batched = {k: v[:, None] for k, v in inputs.items()}
    sig = Signature(tuple(TensorSpec(k, tuple(v.shape[1:]), v.dtype.name) for k, v in batched.items()),
                    tuple(TensorSpec(f"output_{j}", (1, *r.shape[1:]), "float32") for j, r in enumerate(like)))
    outs, _ = run_isolated(ModelArtifact(detect(path), str(path), sig), batched)
    return [np.asarray(o).reshape(r.shape) for o, r in zip(outs, like)]


def _source_and_artifact(m, artifact: str, what: str):
    """(eval inputs, the source's outputs (made once), the artifact's outputs or None when it cannot run)."""
    inputs = dict(np.load(m.eval))
    if m.name not in _REFERENCE:
        _REFERENCE[m.name] = (zoo.zoo_wild.reference_outputs(m, next(iter(inputs.values()))),)
    (ref,) = _REFERENCE[m.name]
    try:
        return inputs, ref, artifact_outputs(artifact, inputs, ref)
    except Exception as e:  # noqa: BLE001
        print(f"  ({what}: cannot run {artifact}: {bir.first_line(e)})", flush=True)
        return inputs, ref, None


def pitch_agreement(m, artifact: str) -> tuple[float, float] | None:
    """(share of eval frames whose arg-max pitch bin is within 1 bin (20 cents) of the source's, the same
    over the voiced frames alone: those where the source's peak activation exceeds 0.5)."""
    _, (ref,), got = _source_and_artifact(m, artifact, "pitch")
    if got is None:
        return None
    close = np.abs(ref.argmax(-1) - got[0].argmax(-1)) <= 1
    voiced = ref.max(-1) > 0.5
    return float(close.mean()), float(close[voiced].mean()) if voiced.any() else float("nan")


def note_agreement(m, artifact: str) -> tuple[float, str] | None:
    """(note F1 of the artifact against the source: zoo_wild.note_f1 over every sample × frame × key, a note
    comparing it with the package's own .onnx (m.shipped_onnx) when there is one)."""
    wild = zoo.zoo_wild
    inputs, ref, got = _source_and_artifact(m, artifact, "note F1")
    if got is None:
        return None
    k = wild.BP_OUTPUTS.index("note")
    f1 = wild.note_f1(ref[k], got[k])
    note = ""
    if m.shipped_onnx is not None:
        key = m.name + ":shipped"
        if key not in _REFERENCE:
            _REFERENCE[key] = (wild.shipped_onnx_run(m.shipped_onnx, next(iter(inputs.values()))),)
        (shipped,) = _REFERENCE[key]
        cos = min(wild._cos(shipped[name], got[j]) for j, name in enumerate(wild.BP_OUTPUTS))
        note = (f"package's {Path(m.shipped_onnx).name} vs the source: note F1 {wild.note_f1(ref[k], shipped['note']):.4f}; "
                f"artifact vs {Path(m.shipped_onnx).name}: note F1 {wild.note_f1(shipped['note'], got[k]):.4f}, "
                f"worst-output cosine {cos:.4f}")
    return f1, note


def wild2_task(m, artifact: str) -> tuple[float, str] | None:
    """zoo_wild2.task_metric of the artifact against the source (made once) on the eval samples: (value, note)."""
    wild2 = zoo.zoo_wild2
    inputs = dict(np.load(m.eval))
    if m.name not in _REFERENCE:
        _REFERENCE[m.name] = (wild2.reference_outputs(m, inputs),)
    (ref,) = _REFERENCE[m.name]
    try:
        got = artifact_outputs(artifact, inputs, [r.reshape(len(r), -1) for r in ref])
    except Exception as e:  # noqa: BLE001
        print(f"  ({m.metric}: cannot run {artifact}: {bir.first_line(e)})", flush=True)
        return None
    return wild2.task_metric(m, ref, got)


NOT_INT8 = "did not really quantize"  # the start of the verdict's reasons about the artifact's int8 shares


def vs_task(verdict: str | None, task: float | None, bar: float | None, metric: str,
            reasons: list | None = None) -> str | None:
    """agree / false fail / false pass of edgekit's verdict against the task metric and its bar; "not int8" for a
    verdict that fails only on the artifact's int8 shares while the task meets its bar (float layers kept the
    task: the verdict fails the int8 promise, not the accuracy); None when either is missing."""
    if verdict not in ("pass", "fail") or task is None or bar is None or task != task:  # NaN: not judged
        return None
    meets = task <= bar if metric in zoo.LOWER_IS_BETTER else task >= bar
    if (verdict == "pass") == meets:
        return "agree"
    if meets and reasons and all(str(r).startswith(NOT_INT8) for r in reasons):
        return "not int8"
    return "false fail" if meets else "false pass"


def _iou(p: list, q: list) -> float:
    ix = max(0.0, min(p[2], q[2]) - max(p[0], q[0]))
    iy = max(0.0, min(p[3], q[3]) - max(p[1], q[1]))
    union = (p[2] - p[0]) * (p[3] - p[1]) + (q[2] - q[0]) * (q[3] - q[1]) - ix * iy
    return ix * iy / union if union > 0 else 0.0


# ----------------------------------------------------------------------------- a row of the table
def _worst(metrics: dict, key: str) -> tuple[float | None, str | None]:
    """(the lowest value of `key` over the outputs, that output's name)."""
    values = [(v[key], name) for name, v in metrics.items() if v.get(key) is not None]
    return min(values) if values else (None, None)


def summarize(m, target: str, side: str, row: dict, fp32: dict | None, fp32_bytes: int | None) -> dict:
    a = row.get("artifact") or {}
    v = a.get("verification") or {}
    metrics = v.get("metrics") or {}
    cosine, worst_output = _worst(metrics, "cosine")
    fp32_metrics = ((((fp32 or {}).get("artifact") or {}).get("verification") or {}).get("metrics") or {})
    error = row.get("error")
    if error and error.startswith("no JSON artifact: "):  # edgekit: its one `edgekit: error:` line
        error = "fails: " + error.removeprefix("no JSON artifact: ")
    converts = "yes" if a else (error or f"fails: exit {row.get('exit')}").replace(f"{m.source.parent}/bench-zoo/", "")
    r = {
        "model": m.name, "framework": m.framework, "target": target, "side": side, "converts": converts,
        "verdict": v.get("status"), "fp32_cosine": _worst(fp32_metrics, "cosine")[0] if side == "edgekit" else None,
        "fp32_error": None, "cosine": cosine, "cosine_min": _worst(metrics, "cosine_min")[0],
        "worst_output": worst_output, "kinds": {k: o.get("kind") for k, o in (v.get("outputs") or {}).items()},
        "metric": m.metric, "task": None,
        "int8_weight_share": (v.get("inspection") or {}).get("int8_weight_share"),
        "bytes": a.get("bytes"), "fp32_bytes": fp32_bytes,
        "size_ratio": a["bytes"] / fp32_bytes if a.get("bytes") and fp32_bytes else None,
        "conv_s": a.get("seconds") if side == "edgekit" else row.get("conv_s"), "wall_s": row.get("wall_s"),
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
        "note": re.sub(r"^\d+ calibration samples$", "", row.get("note") or "") or None,  # bench_nncf's count
        "reasons": v.get("reasons"), "path": a.get("path"), "metrics": metrics,
    }
    if side == "edgekit" and fp32 is not None and not fp32.get("artifact"):
        r["fp32_error"] = (fp32.get("error") or "").removeprefix("no JSON artifact: ") or f"exit {fp32.get('exit')}"
    if m.metric == "top1_agreement":
        r["task"] = metrics.get("output_0", {}).get("top1_agreement")
    elif m.metric == "max_abs":
        r["task"] = metrics.get("output_0", {}).get("max_abs")
    else:
        r["task"] = cosine
    if m.metric == "decisions":
        r["task"] = face_decisions(metrics)
    if m.metric == "class_scores":
        got = detection_agreement(m, a["path"]) if a.get("path") else None
        r["task"] = got[0] if got else None
        if got:
            r["detection_agreement"] = got[1]
            r["note"] = "; ".join(filter(None, [r["note"], f"detections reproduced {got[1]:.4f}"]))
    if m.metric == "pitch":
        got = pitch_agreement(m, a["path"]) if a.get("path") else None
        r["task"] = got[0] if got else None
        if got:
            r["pitch_voiced_agreement"] = got[1]
            r["note"] = "; ".join(filter(None, [r["note"], f"pitch bin within 1 on voiced frames {got[1]:.4f}"]))
    if m.metric == "note_f1":
        got = note_agreement(m, a["path"]) if a.get("path") else None
        r["task"] = got[0] if got else None
        if got and got[1]:
            r["note"] = "; ".join(filter(None, [r["note"], got[1]]))
    if m.metric in WILD2_METRICS:
        got = wild2_task(m, a["path"]) if a.get("path") else None
        r["task"] = got[0] if got else None
        if got and got[1]:
            r["note"] = "; ".join(filter(None, [r["note"], got[1]]))
    if m.name == "ppocr_rec":
        r["metric"] = "ctc"
        got = ctc_agreement(m, a["path"]) if a.get("path") else None
        if got:
            r["task"], r["ctc_step_agreement"] = got
            step = metrics.get("output_0", {}).get("step_top1_agreement")
            r["note"] = "; ".join(filter(None, [r["note"], f"per-step arg-max agreement {got[1]:.4f}"
                                                + (f" (edgekit's step_top1_agreement {step:.4f})" if step is not None
                                                   else "")]))
    r["task_bar"] = m.task_bar
    r["vs_task"] = vs_task(r["verdict"], r["task"], m.task_bar, m.metric, r.get("reasons")) if side == "edgekit" else None
    return r


# ----------------------------------------------------------------------------- the table
COLUMNS = [("model", "model", "s"), ("framework", "src", "s"), ("target", "target", "s"), ("side", "side", "s"),
           ("converts", "converts?", "s"), ("verdict", "verdict", "s"), ("fp32_cosine", "fp32 cos", ".6f"),
           ("cosine", "int8 cos", ".4f"), ("cosine_min", "int8 cos min", ".4f"), ("metric", "metric", "s"),
           ("task", "task", ".4f"), ("task_bar", "bar", "g"), ("vs_task", "verdict vs task", "s"),
           ("int8_weight_share", "w-int8", ".3f"), ("size_ratio", "int8/fp32", ".3f"),
           ("conv_s", "conv s", ".1f"), ("wall_s", "wall s", ".1f")]


def _cell(r: dict, key: str, fmt: str) -> str:
    value = r.get(key)
    if key == "metric":
        return METRIC_LABEL.get(value, value)
    if key == "fp32_cosine" and r["side"] == "edgekit" and value is None:
        return "fails" if r.get("fp32_error") else "n/a"
    if value is None:
        return "-"
    if fmt == "s":
        text = str(value).replace("|", "\\|")
        return text if len(text) <= 90 else text[:89] + "…"
    return format(value, fmt)


def markdown(rows: list[dict], header: str) -> str:
    lines = [header, "", "| " + " | ".join(h for _, h, _ in COLUMNS) + " |",
             "|" + "|".join("---" if f == "s" else "---:" for _, _, f in COLUMNS) + "|"]
    lines += ["| " + " | ".join(_cell(r, k, f) for k, _, f in COLUMNS) + " |" for r in rows]
    lines += ["", vs_task_summary(rows)]
    notes = []
    for r in rows:
        where = f"{r['model']} {r['target']} {r['side']}"
        if r["converts"] != "yes" and len(r["converts"]) > 90:
            notes.append(f"{where}: {r['converts']}")
        if r.get("fp32_error"):
            notes.append(f"{where}: fp32 conversion {r['fp32_error']}")
        if r.get("note"):
            notes.append(f"{where}: {r['note']}")
        for reason in r.get("reasons") or []:  # why edgekit's verifier failed the artifact
            notes.append(f"{where}: fails verification: {reason if len(reason) <= 200 else reason[:199] + '…'}")
        if r.get("worst_output") not in (None, "output_0"):
            notes.append(f"{where}: int8 cos is {r['worst_output']}'s (the worst output)")
    if notes:
        lines += ["", "Notes:", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def vs_task_summary(rows: list[dict]) -> str:
    """The line under the table: how often edgekit's int8 verdict agrees with the task metric and its bar."""
    ours = [r for r in rows if r["side"] == "edgekit"]
    count = {k: sum(r.get("vs_task") == k for r in ours) for k in ("agree", "false fail", "false pass", "not int8")}
    unjudged = len(ours) - sum(count.values())
    named = lambda k: ", ".join(f"{r['model']} → {r['target']}" for r in ours if r.get("vs_task") == k)  # noqa: E731
    text = (f"Verdict vs task (edgekit int8 rows): {count['agree']} agree, {count['false fail']} false fail, "
            f"{count['false pass']} false pass, {count['not int8']} not int8 (failed only on its int8 shares, the task "
            f"kept by float layers), {unjudged} not judged (no artifact, no verdict or no task value).")
    for k in ("false fail", "false pass", "not int8"):
        if count[k]:
            text += f" {k.capitalize()}: {named(k)}."
    return text


def provenance() -> dict:
    """The edgekit code measured: its commit and the files changed since (read-only git calls)."""
    def git(*a):
        p = subprocess.run(["git", "-C", str(REPO), *a], capture_output=True, text=True)
        return p.stdout.rstrip() if p.returncode == 0 else None
    return {"commit": git("rev-parse", "HEAD"), "changed": (git("status", "--porcelain") or "").splitlines()}


SIDES = ("edgekit", "raw", "nncf")


def merged(kept: list[dict], rows: list[dict]) -> list[dict]:
    """`rows` with the rows of `kept` whose model × target × side is not among them (a --skip-raw run keeps the
    earlier raw and nncf rows), in zoo × target × side order."""
    measured = {(r["model"], r["target"], r["side"]) for r in rows}
    names = list(zoo.ZOO)

    def order(r):
        return names.index(r["model"]) if r["model"] in names else len(names), ALL_TARGETS.index(r["target"]), \
            SIDES.index(r["side"])
    return sorted([r for r in kept if (r["model"], r["target"], r["side"]) not in measured] + rows, key=order)


def write_outputs(args, rows: list[dict], header: str, total: float, nncf: str | None, earlier: dict | None) -> None:
    if args.json:
        doc = {"seconds": total, "finished": time.strftime("%Y-%m-%d %H:%M:%S"), "nncf": nncf,
               "edgekit": provenance(), "rows": rows}
        if earlier:
            doc["earlier"] = {k: earlier.get(k) for k in ("seconds", "finished", "edgekit", "earlier")}
        args.json.write_text(json.dumps(doc, indent=2, default=str))
    if args.md:
        args.md.write_text(markdown(rows, header))


# ----------------------------------------------------------------------------- the run
def fp32_run(m, target: str, folder: Path) -> tuple[dict | None, int | None]:
    """edgekit's fp32 conversion of m to target: (its row or None when there is nothing to convert, fp32 bytes)."""
    if m.framework == "onnx" and target == "onnx" and not m.input_shape:  # edgekit refuses: nothing to convert
        return None, m.source.stat().st_size
    row = edgekit_convert(m, target, False, folder, extra=("--no-cache",))
    return row, (row.get("artifact") or {}).get("bytes")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(zoo.ZOO), help="comma-separated zoo names (default: all)")
    parser.add_argument("--targets", default=",".join(ALL_TARGETS), help="comma-separated (default: all reachable)")
    parser.add_argument("--work", type=Path, default=None, help="models are built / reused here (default: temp dir)")
    parser.add_argument("--skip-raw", action="store_true", help="edgekit rows only (no raw, no nncf)")
    parser.add_argument("--edgekit-args", default="", help="options added to edgekit's int8 conversions, e.g. "
                        "'--calib-method auto' (default: none, the default recipe)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    parser.add_argument("--md", type=Path, default=None, help="also write the Markdown table here")
    parser.add_argument("--nncf-path", type=Path, default=Path("/tmp/nncf-pkgs"),
                        help="folder appended to sys.path to find nncf, if it exists (default /tmp/nncf-pkgs)")
    parser.add_argument("--merge", action="store_true",
                        help="with --json PATH written by an earlier run: keep its rows of the model × target cells "
                             "this run does not measure (to measure some cells again)")
    parser.add_argument("--call-timeout", type=float, default=1800, help="seconds for one raw / nncf call")
    parser.add_argument("--one", choices=("raw", "nncf"), help=argparse.SUPPRESS)  # child mode, see one_call
    parser.add_argument("--fp32-onnx", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--row-out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        return one_call(args)

    nncf = None if args.skip_raw else nncf_status(args.nncf_path)
    if not args.skip_raw and nncf is None:
        print(f"nncf is not importable (nor from {args.nncf_path}): no NNCF rows. Install it apart as "
              "bench/bench_nncf.py's docstring says to add them.", flush=True)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    wanted = [t.strip() for t in args.targets.split(",") if t.strip()]
    with bir.work_folder(args, "bench-zoo-") as work:
        args.work = work.resolve()
        root = args.work / "bench-zoo"
        started, rows = time.perf_counter(), []
        earlier = json.loads(args.json.read_text()) if args.merge and args.json and args.json.is_file() else None
        header = ""
        for name in names:
            m = zoo.load(name, args.work)
            fp32_onnx: str | None = None  # edgekit's fp32 .onnx of a torch / keras m: the raw / nncf calls' input
            for target in [t for t in ALL_TARGETS if t in TARGETS[m.framework] and t in wanted]:
                base = root / f"{name}-{target}"
                shutil.rmtree(base, ignore_errors=True)  # this script's own folder of the previous run
                base.mkdir(parents=True)
                print(f"{name} [{m.framework}] → {target}: edgekit fp32, edgekit int8"
                      + ("" if args.skip_raw else ", raw int8" + (", nncf int8" if nncf and (m.framework, target) in NNCF
                                                                 else "")) + " …", flush=True)
                fp32, fp32_bytes = fp32_run(m, target, base / "fp32")
                if m.framework != "onnx" and target == "onnx" and fp32 and fp32.get("artifact"):
                    fp32_onnx = fp32["artifact"]["path"]
                ours = edgekit_convert(m, target, True, base / "int8", extra=("--no-cache", *shlex.split(args.edgekit_args)))
                runs = [("edgekit", ours)]
                if not args.skip_raw:
                    if m.framework == "torch" and target == "ort" and fp32_onnx is None:  # onnx was not asked for
                        extra, _ = fp32_run(m, "onnx", base / "fp32-onnx")
                        fp32_onnx = (extra.get("artifact") or {}).get("path")
                    runs.append(("raw", call_in_child("raw", m, target, fp32_onnx, base / "raw", args)))
                    if nncf and (m.framework, target) in NNCF:
                        runs.append(("nncf", call_in_child("nncf", m, target, fp32_onnx, base / "nncf", args)))
                for side, row in runs:
                    r = summarize(m, target, side, row, fp32 if side == "edgekit" else None, fp32_bytes)
                    rows.append(r)
                    print(f"  {side:7} {r['converts'][:100]}  verdict={r['verdict']}  cos={r['cosine']}  "
                          f"task={r['task']}  wall={r['wall_s'] or 0:.1f}s", flush=True)
                total = time.perf_counter() - started
                header = (f"int8 on the zoo: edgekit's " + (f"int8 with {args.edgekit_args}" if args.edgekit_args else "default int8")
                          + " vs the raw library calls"
                          + (f" and NNCF {nncf}" if nncf else " (NNCF not importable: no nncf rows)")
                          + f", verified by edgekit on the eval samples ({total:.0f} s in all")
                if earlier:
                    rows_out = merged(earlier["rows"], rows)
                    header += (f"; {len(rows_out) - len(rows)} rows kept from an earlier run of {earlier['seconds']:.0f} s"
                               + (f" that finished at {earlier['finished']}" if earlier.get("finished") else ""))
                else:
                    rows_out = rows
                header += ")"
                # after every target: a crash keeps what was measured
                write_outputs(args, rows_out, header, total, nncf, earlier)
        root.mkdir(parents=True, exist_ok=True)
        (root / "calls.log").write_text("\n".join(CALL_LOG))
    print()
    print(markdown(rows_out, header))
    return 0


if __name__ == "__main__":
    sys.exit(main())
