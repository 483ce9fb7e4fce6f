"""Seeded fuzzing of every input kind edgekit reads: models, artifacts, data and configs.

Each kind has real seed inputs made from the bundled samples (see `build_seeds`): source models
(.pt2, TorchScript .pt, a torch.save state_dict .pt, .onnx, .keras, .h5, a SavedModel folder),
artifacts (.tflite, .pte, .ptl, .onnx, .ort at fp32 and int8), calibration and eval data (.npz,
compressed and not, a folder of .npy), check configs (edgekit.toml) and an integer-I/O sidecar
(<artifact>.io.json). Some seeds carry a payload that creates a canary file if a loader runs
their code (a pickle's __reduce__, a Keras Lambda, a TensorFlow WriteFile op): the canary must
never appear.

Hypothesis generates the mutations, seeded, so a run is reproducible: byte flips and
replacements, truncation, insertion and duplication of chunks, zeroed ranges; inside zip-based
formats (.pt2, .pt, .ptl, .keras, .npz) a member is mutated and the archive re-zipped, so the
damage reaches past the zip CRC; text inputs (edgekit.toml, .io.json, the JSON members of
.pt2 and .keras archives) also get structured edits (values replaced by paths, import specs,
huge numbers or wrong types; lines deleted, duplicated or inserted; non-UTF-8 bytes), and .npy
arrays (in .npz or a folder) get headers with other dtypes and shapes. A mutant is named
KIND#N; the same seed files, --mutants and --seed draw the same mutants (--keep saves the exact
inputs of every mutant with a finding).

Each mutant runs the edgekit command that reads its kind, in a long-lived worker process that
imports edgekit once and calls the Typer app in-process, with its cwd and TMPDIR in scratch
folders. A mutant passes when:

- the exit code is 0, 1, 2 or 3 (4 only when a module it names is really missing);
- no Python traceback is printed;
- the worker neither crashes (native crash, abort) nor hangs past the timeout (a crash in a worker that ran
  other mutants before is run again in a fresh worker, as a user runs each command in a process of its own:
  it is a finding when it crashes there too, and said in the mutant's output either way);
- no file appears outside the mutant's --out folder (cwd, TMPDIR, the inputs and the seeds are
  watched);
- no payload ran (the canary file does not exist).

A library's import-time side effects (a file in TMPDIR, say) show on the first mutant of a worker
that imports it, as edgekit runs in-process there; a run of the real command shows them every time.

    python -m tests.fuzzing --mutants 2000           # what `make fuzz` runs
    python -m tests.fuzzing --mutants 300 --only 'source.pt2#7' --keep /tmp/m   # one mutant again
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_models"
DIGITS = SAMPLES / "digits_cnn.pt2"
DIGITS_EVAL = SAMPLES / "digits_eval.npz"
DIGITS_CALIB = SAMPLES / "digits_calib.npz"
KERAS = SAMPLES / "digits_keras.keras"
MODEL_CLASS = "sample_models.train_digits_cnn:DigitsCNN"

ALLOWED_EXITS = frozenset({0, 1, 2, 3})
EXIT_MISSING_DEPENDENCY = 4
TRACEBACK = "Traceback (most recent call last)"
STOP_ARG = "missing.npz"  # --eval data that is not there: the run stops once the model (and --calib) are read
STOP = f"eval data not found: {STOP_ARG}"

# kind → share of the mutants. Cheap kinds (a model opened, then --eval missing.npz stops the run)
# get more; kinds whose valid mutants run a whole conversion or a runtime child get fewer.
KINDS: dict[str, float] = {
    "source.pt2": 0.10,
    "source.torchscript": 0.06,
    "source.pickle": 0.06,
    "source.onnx": 0.06,
    "source.keras": 0.06,
    "source.h5": 0.05,
    "source.savedmodel": 0.04,
    "artifact.tflite": 0.09,
    "artifact.pte": 0.06,
    "artifact.ptl": 0.06,
    "artifact.onnx": 0.06,
    "artifact.ort": 0.06,
    "gate.artifact": 0.02,
    "data.calib.npz": 0.07,
    "data.eval.npz": 0.03,
    "data.calib.npy-folder": 0.04,
    "config.toml": 0.06,
    "sidecar.io.json": 0.02,
}


# ---------------------------------------------------------------------------------------------
# seeds


@dataclass(frozen=True)
class Seed:
    """Files copied into a mutant's input folder; `entry` is what the command is given."""

    name: str
    base: Path
    files: tuple[str, ...]  # relative to base
    entry: str
    mutable: tuple[tuple[str, str], ...]  # (file, container): bytes | zip | toml | json
    payload: bool = False  # creates the canary if a loader runs its code


@dataclass
class SeedSet:
    root: Path
    canary: Path
    pt2: Path  # the source model of data, gate and sidecar mutants
    eval_small: Path
    kinds: dict[str, list[Seed]] = field(default_factory=dict)


class Payload:
    """Unpickling this calls open(path, "w"): the canary appears when a loader runs a pickle's code."""

    def __init__(self, path: str | Path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def build_seeds(root: Path, fp32_dir: Path | None = None, int8_dir: Path | None = None,
                say=lambda _msg: None) -> SeedSet:
    """Make the seed inputs of every kind under root/seeds; artifacts are converted from digits_cnn
    (fp32 and int8) unless folders holding them are given."""
    root = Path(root)
    seeds = root / "seeds"
    seeds.mkdir(parents=True, exist_ok=True)
    canary = root / "canary"
    say("seeds: torch sources")
    torch_dir = _torch_sources(seeds / "torch", canary)
    say("seeds: artifacts")
    art = seeds / "artifacts"
    converted = root / "converted"  # outside the seeds: the mutants use copies
    fp32_dir = Path(fp32_dir) if fp32_dir else _convert(converted / "fp32", "fp32")
    int8_dir = Path(int8_dir) if int8_dir else _convert(converted / "int8", "int8")
    int8io_dir = _convert(converted / "int8-io", "int8", targets=("onnx",), int8_io=True)
    say("seeds: onnx, data")
    onnx_dir = _onnx_source(seeds / "onnx", fp32_dir)
    data_dir = _data(seeds / "data", canary)
    say("seeds: keras, SavedModel")
    tf_dir = _tf_sources(seeds / "tf", canary)
    config_dir = _configs(seeds / "configs", seeds, fp32_dir, data_dir)
    if canary.exists():
        canary.unlink()  # building the Keras Lambda seeds runs the lambda once
    s = SeedSet(root, canary, torch_dir / "digits_cnn.pt2", data_dir / "eval_small.npz")

    def one(base, name, container, payload=False, files=None, mutable=None):
        return Seed(name, base, tuple(files or (name,)), name, tuple(mutable or ((name, container),)), payload)

    s.kinds["source.pt2"] = [one(torch_dir, "digits_cnn.pt2", "zip"),
                             one(torch_dir, "payload_sample_inputs.pt2", "zip", True),
                             one(torch_dir, "payload_weight.pt2", "zip", True)]
    s.kinds["source.torchscript"] = [one(torch_dir, "digits_ts.pt", "zip")]
    s.kinds["source.pickle"] = [one(torch_dir, "digits_state.pt", "zip"), one(torch_dir, "payload.pt", "zip", True),
                                one(torch_dir, "payload_legacy.pt", "bytes", True)]
    s.kinds["source.onnx"] = [one(onnx_dir, "digits_cnn.onnx", "bytes")]
    s.kinds["source.keras"] = [one(tf_dir, "digits.keras", "zip"), one(tf_dir, "payload_lambda.keras", "zip", True)]
    s.kinds["source.h5"] = [one(tf_dir, "digits.h5", "bytes"), one(tf_dir, "payload_lambda.h5", "bytes", True)]
    s.kinds["source.savedmodel"] = [_folder(tf_dir, "digits_sm"), _folder(tf_dir, "payload_writefile_sm", True)]
    artifacts = []
    for fmt, ext in (("tflite", ".tflite"), ("pte", ".pte"), ("ptl", ".ptl"), ("onnx", ".onnx"), ("ort", ".ort")):
        kind = []
        for folder, stem, prec in ((fp32_dir, "digits_cnn", "fp32"), (int8_dir, "digits_cnn.int8", "int8")):
            kind.append(_artifact(art / prec, folder / (stem + ext), fmt))
        s.kinds[f"artifact.{fmt}"] = kind
        artifacts += kind
    s.kinds["gate.artifact"] = artifacts
    s.kinds["data.calib.npz"] = [one(data_dir, "calib.npz", "zip"), one(data_dir, "calib_plain.npz", "zip"),
                                 one(data_dir, "payload.npz", "zip", True)]
    s.kinds["data.eval.npz"] = [one(data_dir, "eval_small.npz", "zip"), one(data_dir, "eval_small_plain.npz", "zip"),
                                one(data_dir, "payload.npz", "zip", True)]
    npys = tuple(sorted(f"calib_npy/{p.name}" for p in (data_dir / "calib_npy").glob("*.npy")))
    s.kinds["data.calib.npy-folder"] = [Seed("calib_npy", data_dir, npys, "calib_npy",
                                             tuple((f, "npy") for f in npys))]
    s.kinds["config.toml"] = [
        Seed(f"{d.name}/edgekit.toml", d, tuple(sorted(p.name for p in d.iterdir())), "edgekit.toml",
             (("edgekit.toml", "toml"),))
        for d in sorted(config_dir.iterdir())]
    io_files = ("digits_cnn.int8.onnx", "digits_cnn.int8.onnx.io.json")
    _copy_files(int8io_dir, art / "int8-io", io_files)
    s.kinds["sidecar.io.json"] = [Seed("digits_cnn.int8.onnx.io.json", art / "int8-io", io_files,
                                       "digits_cnn.int8.onnx", (("digits_cnn.int8.onnx.io.json", "json"),))]
    missing = set(KINDS) - set(s.kinds)
    assert not missing, missing
    return s


def _copy_files(src: Path, dst: Path, names) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for n in names:
        (dst / n).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / n, dst / n)


def _folder(base: Path, name: str, payload: bool = False) -> Seed:
    files = tuple(sorted(str(p.relative_to(base)) for p in (base / name).rglob("*") if p.is_file()))
    return Seed(name, base, files, name, ((f"{name}/saved_model.pb", "bytes"),), payload)


def _artifact(dst: Path, path: Path, fmt: str) -> Seed:
    from edgekit.core.formats import artifact_files

    names = tuple(Path(f).name for f in artifact_files(fmt, path))
    _copy_files(path.parent, dst, names)
    container = "zip" if fmt == "ptl" else "bytes"
    mutable = ((names[0], container),) + tuple((n, "bytes") for n in names[1:] if n.endswith(".data"))
    return Seed(names[0], dst, names, names[0], mutable)


def _convert(out: Path, precision: str, targets=("all",), int8_io: bool = False) -> Path:
    from edgekit.calibration.sources import CalibrationSpec
    from edgekit.engine.request import build_request
    from edgekit.engine.pipeline import convert

    calibration = CalibrationSpec(str(DIGITS_CALIB)) if precision == "int8" else None
    convert(build_request(str(DIGITS), tuple(targets), str(out), precision=precision, eval_data=str(DIGITS_EVAL),
                           calibration=calibration, int8_io=int8_io))
    return out


def _torch_sources(d: Path, canary: Path) -> Path:
    import pickle

    import torch

    from sample_models.train_digits_cnn import DigitsCNN

    d.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(DIGITS, d / "digits_cnn.pt2")
    model = DigitsCNN().eval()
    model.load_state_dict(torch.export.load(str(DIGITS)).state_dict)
    example = torch.zeros(1, 1, 8, 8)
    torch.jit.save(torch.jit.trace(model, example), str(d / "digits_ts.pt"))
    torch.save(model.state_dict(), d / "digits_state.pt")
    torch.save(Payload(canary), d / "payload.pt")
    (d / "payload_legacy.pt").write_bytes(pickle.dumps(Payload(canary), protocol=2))
    payload = _torch_save_bytes(Payload(canary))
    members = _zip_read(DIGITS)
    prefix = next(n for n, _, _ in members if n.endswith("/archive_format")).rsplit("/", 1)[0]
    # An ExportedProgram archive whose pickled members (sample inputs; a weight marked use_pickle)
    # hold the payload instead of tensors.
    _zip_write(d / "payload_sample_inputs.pt2",
               [(n, payload if n == f"{prefix}/data/sample_inputs/model.pt" else b, c) for n, b, c in members])
    config_name = f"{prefix}/data/weights/model_weights_config.json"
    config = json.loads(dict((n, b) for n, b, _ in members)[config_name])
    first = next(iter(config["config"].values()))
    first["use_pickle"] = True
    weight = f"{prefix}/data/weights/{first['path_name']}"
    _zip_write(d / "payload_weight.pt2",
               [(n, json.dumps(config).encode() if n == config_name else payload if n == weight else b, c)
                for n, b, c in members])
    return d


def _torch_save_bytes(obj) -> bytes:
    import io

    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _onnx_source(d: Path, fp32_dir: Path) -> Path:
    import onnx

    d.mkdir(parents=True, exist_ok=True)
    model = onnx.load(str(fp32_dir / "digits_cnn.onnx"))  # external data read in: one self-contained file
    onnx.save(model, str(d / "digits_cnn.onnx"))
    return d


def _data(d: Path, canary: Path) -> Path:
    import numpy as np

    d.mkdir(parents=True, exist_ok=True)
    with np.load(DIGITS_EVAL) as e:
        x, labels = e["x"][:32], e["labels"][:32]
    np.savez_compressed(d / "eval_small.npz", x=x, labels=labels)
    np.savez(d / "eval_small_plain.npz", x=x, labels=labels)
    shutil.copyfile(DIGITS_CALIB, d / "calib.npz")
    with np.load(DIGITS_CALIB) as c:
        calib = c["x"][:40]
    np.savez(d / "calib_plain.npz", x=calib)
    (d / "calib_npy").mkdir(exist_ok=True)
    for i in range(12):
        np.save(d / "calib_npy" / f"sample_{i:02d}.npy", calib[i : i + 1])
    np.savez(d / "payload.npz", x=np.array([Payload(canary)], dtype=object))
    return d


def _tf_sources(d: Path, canary: Path) -> Path:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import tensorflow as tf

    d.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(KERAS, d / "digits.keras")
    model = keras.models.load_model(str(KERAS), compile=False)
    model.save(str(d / "digits.h5"))
    specs = [tf.TensorSpec(tuple(t.shape), t.dtype, name=t.name) for t in model.inputs]  # fixed shapes
    model.export(str(d / "digits_sm"), verbose=False, input_signature=specs)
    # A Lambda whose code creates the canary: loading must refuse it (Keras safe mode).
    fn = eval(f"lambda x: x if open({str(canary)!r}, 'w').close() is None else x")  # noqa: S307
    inp = keras.Input((4,), name="x")
    lam = keras.Model(inp, keras.layers.Dense(2)(keras.layers.Lambda(fn, output_shape=(4,))(inp)))
    lam.save(str(d / "payload_lambda.keras"))
    lam.save(str(d / "payload_lambda.h5"))

    class Writer(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32, name="x")])
        def serve(self, x):
            tf.io.write_file(str(canary), "payload ran")
            return {"output_0": x * 2.0}

    w = Writer()
    tf.saved_model.save(w, str(d / "payload_writefile_sm"), signatures={"serving_default": w.serve})
    return d


def _configs(d: Path, seeds: Path, fp32_dir: Path, data_dir: Path) -> Path:
    model = seeds / "torch" / "digits_cnn.pt2"
    eval_small = data_dir / "eval_small.npz"
    onnx_art = seeds / "artifacts" / "fp32" / "digits_cnn.onnx"
    if not onnx_art.exists():
        _copy_files(fp32_dir, onnx_art.parent, ("digits_cnn.onnx", "digits_cnn.onnx.data"))
    texts = {
        "artifacts": f"""# given artifacts, verified as they are
[[models]]
name = "digits"
path = "{model}"
eval = "{eval_small}"
artifacts = ["{onnx_art}"]

[models.budgets]
min_accuracy = 0.5
max_bytes = 10000000

[models.budgets.fp32]
cosine = 0.99
""",
        "convert": f"""[[models]]
name = "digits"
path = "{model}"
eval = "{eval_small}"
targets = ["onnx"]
precisions = ["fp32"]
input_shape = ["x=1,1,8,8"]
calib_method = "minmax"

[models.budgets]
max_accuracy_drop = 0.05
""",
        "int8": f"""[[models]]
name = "digits-int8"
path = "{model}"
calibration = "fuzz_calib:samples"
eval = "{eval_small}"
targets = ["onnx"]
precisions = ["int8"]

[models.budgets.int8]
sqnr_db = 10.0
""",
    }
    for name, text in texts.items():
        (d / name).mkdir(parents=True, exist_ok=True)
        (d / name / "edgekit.toml").write_text(text)
    (d / "int8" / "fuzz_calib.py").write_text(
        '"""Calibration samples for a check config (an import spec of the config\'s own folder)."""\n'
        "import numpy as np\n\n\ndef samples():\n"
        f"    with np.load({str(data_dir / 'calib_plain.npz')!r}) as data:\n"
        "        x = data['x'][:16]\n"
        "    return [x[i : i + 1].copy() for i in range(len(x))]\n")
    return d


# ---------------------------------------------------------------------------------------------
# mutations (hypothesis strategies, drawn with a fixed seed)

INTERESTING = (b"\x00", b"\xff", b"\x7f", b"\x80", b"\x00\x00\x00\x00", b"\xff\xff\xff\xff", b"\xff\xff\xff\x7f",
               b"\x00\x00\x00\x80", b"\x00\x00\x01\x00", struct.pack("<q", -1), struct.pack("<Q", 2**63),
               struct.pack("<Q", 2**40), b"\x00" * 8, b"\xff" * 8)
ENCODING = (b"\xff", b"\xfe\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x00", b"\xef\xbb\xbf", b"\r", b"\x1b[31m",
            b"\xe2\x80\xae", b"\x80\x81\x82")
LONG_NAME = "x" * 5000
LONG_PATH = "d/" * 2500 + "x"
TOML_VALUES = (
    '"../../x"', '"../../../x"', '"../x"', '"{escape}/x"', '"{escape}"', '"/"', '"."', '""', '"sys:exit"',
    '"os:abort"', '"os:system"', '"posix:abort"', '"builtins:exec"', '"subprocess:run"', '"shutil:rmtree"',
    '"fuzz_calib:samples"', '"fuzz_calib:missing"', '"random"', '"all"', '"int8"', '"int8-dynamic"', '"fp16"',
    '"x=1,1,8,8"', '"x=99999999999,1,8,8"', '"x=0,1,8,8"', '"x=-1"', f'"{LONG_NAME}"', f'"{LONG_PATH}"',
    '"a\\u0000b"', '"\\u00e9t\\u00e9"', '"\\u202eevil"', "1e309", "-1e309", "inf", "-inf", "nan", "-1", "0", "1",
    "9223372036854775807", "-9223372036854775808", "99999999999999999999999999", "1e-320", "0.0", "true", "false",
    "[]", "[[]]", "{}", "{ a = 1 }", "[1, 2]", '["x", 1]', "1979-05-27T07:32:00Z", "1979-05-27", "07:32:00",
)
TOML_LINES = (
    "[[models]]", 'name = "../../x"', 'name = "{escape}/abs"', 'name = ""', f'name = "{LONG_NAME}"',
    "artifacts = []", 'artifacts = ["../../x"]', 'targets = ["all"]', 'precisions = ["int8"]',
    'precisions = ["int8-dynamic", "fp16"]', 'calib_method = "auto"', 'calib_method = "nope"',
    'input_shape = ["x=1,1,8,8"]', 'input_shape = ["x=99999999999,1,8,8"]', 'calibration = "os:abort"',
    'calibration = "random"', 'eval = "sys:exit"', 'path = "os:abort"', 'path = "sys:exit"', "unknown = 1",
    "budgets = 5", "[models.budgets]", "[models.budgets.int8]", "max_bytes = 1", "cosine = 2.0",
    "min_accuracy = 1e309", "models = 1", "[models]", "",
)
JSON_VALUES = (
    "0", "-0.0", "1e-45", "1e309", "-1e309", "NaN", "Infinity", "-Infinity", "-1", "127", "128", "-129", "255",
    "65536", "2147483648", "9223372036854775808", "1" * 400, '"int8"', '"uint8"', '"int16"', '"int32"',
    '"float32"', '"float16"', '"bool"', '"object"', '"int4"', '"V8"', '"bogus"', '""', '"../../x"', "null",
    "true", "false", "[]", "{}", "[null]", '{"scale": 1}', '"x"', '"output_0"',
)
JSON_LINES = ("{", "}", "[", "]", "null,", '"inputs": [],', '"outputs": null,',
              '{"name": "x", "dtype": "int8", "scale": 0, "zero_point": 0},', "")
_TOML_VALUE = re.compile(r"^\s*[\w.\"-]+\s*=\s*(.*?)\s*(?:#.*)?$")
_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_JSON_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|\btrue\b|\bfalse\b|\bnull\b')


@dataclass(frozen=True)
class Mutant:
    kind: str
    index: int
    seed: int  # index into the kind's seeds
    target: str | None  # the file mutated (None: the seed as it is)
    op: tuple | None

    @property
    def id(self) -> str:
        return f"{self.kind}#{self.index}"


def value_spans(text: str, container: str) -> list[tuple[int, int]]:
    """Where the values of a TOML or JSON text are: replaced by the structured text mutations."""
    if container == "json":
        return [m.span() for m in _JSON_TOKEN.finditer(text)]
    spans, offset = [], 0
    for line in text.splitlines(keepends=True):
        m = _TOML_VALUE.match(line)
        if m and not line.lstrip().startswith(("[", "#")) and m.group(1):
            spans.append((offset + m.start(1), offset + m.end(1)))
            spans += [(offset + s.start(), offset + s.end()) for s in _STRING.finditer(line, m.start(1), m.end(1))]
        offset += len(line)
    return sorted(set(spans))


def _byte_ops(st, n: int, text: bool = False):
    pos = st.one_of(st.integers(0, max(0, min(n, 512) - 1)), st.integers(0, max(0, n - 1)))  # headers first
    length = st.integers(1, max(1, min(n, 4096)))
    blob = st.one_of(st.sampled_from(INTERESTING + (ENCODING if text else ())), st.binary(min_size=1, max_size=64))
    return st.one_of(
        st.tuples(st.just("flip"), pos, st.integers(1, 255)),
        st.tuples(st.just("set"), pos, blob),
        st.tuples(st.just("truncate"), pos),
        st.tuples(st.just("insert"), pos, blob),
        st.tuples(st.just("duplicate"), pos, length, pos),
        st.tuples(st.just("zero"), pos, length),
    )


def _file_ops(st, path: Path, container: str):
    data = path.read_bytes()
    if container == "zip":
        members = _zip_read(path)
        ops = {n: _member_ops(st, n, b) for n, b, _ in members}
        names = [n for n, _, _ in members]
        member = st.sampled_from(names).flatmap(lambda name: st.tuples(st.just("member"), st.just(name), ops[name]))
        return _weighted(st, (6, member), (1, st.tuples(st.just("raw"), _byte_ops(st, len(data)))),
                         (1, st.tuples(st.just("drop"), st.sampled_from(names))))
    if container in ("toml", "json"):
        return _weighted(st, (2, _text_ops(st, data, container, lines=True)), (1, _byte_ops(st, len(data), text=True)))
    if container == "npy":
        return _weighted(st, (1, st.tuples(st.just("npy-header"), st.sampled_from(NPY_HEADERS))),
                         (2, _byte_ops(st, len(data))))
    return _byte_ops(st, len(data))


def _member_ops(st, name: str, data: bytes):
    """A zip member's mutations: bytes; values of a JSON member; the header of an .npy member."""
    container = _member_container(name)
    if container == "json":
        try:
            return _weighted(st, (2, _text_ops(st, data, "json")), (1, _byte_ops(st, len(data), True)))
        except (UnicodeDecodeError, ValueError):
            pass
    if container == "npy":
        return _weighted(st, (2, st.tuples(st.just("npy-header"), st.sampled_from(NPY_HEADERS))),
                         (1, _byte_ops(st, len(data))))
    return _byte_ops(st, len(data))


def _weighted(st, *pairs):
    """One of the strategies, each picked with its weight (hypothesis' one_of is uniform)."""
    strategies = [s for _, s in pairs]
    return st.sampled_from([i for i, (w, _) in enumerate(pairs) for _ in range(w)]).flatmap(lambda i: strategies[i])


def _member_container(name: str) -> str:
    return "json" if name.endswith(".json") else "npy" if name.endswith(".npy") else "bytes"


def _text_ops(st, data: bytes, container: str, lines: bool = False):
    text = data.decode()
    spans = value_spans(text, container)
    if not spans:
        raise ValueError("no values")
    values = TOML_VALUES if container == "toml" else JSON_VALUES
    value = st.tuples(st.just("value"), st.integers(0, len(spans) - 1), st.sampled_from(values))
    if not lines:
        return value
    n = len(text.splitlines())
    pool = TOML_LINES if container == "toml" else JSON_LINES
    return _weighted(st, (3, value),
                     (1, st.tuples(st.just("line-delete"), st.integers(0, n - 1))),
                     (1, st.tuples(st.just("line-dup"), st.integers(0, n - 1))),
                     (2, st.tuples(st.just("line-insert"), st.integers(0, n), st.sampled_from(pool))))


def mutation_strategy(seeds: list[Seed]):
    """Hypothesis strategy of (seed index, file, op) for one kind's seeds."""
    import hypothesis.strategies as st

    per_seed = []
    for i, s in enumerate(seeds):
        files = [f for f, _ in s.mutable]
        weighted = [files[0]] * 3 + files[1:]  # the main file most often
        containers = dict(s.mutable)
        ops = {f: _file_ops(st, s.base / f, containers[f]) for f in files}
        choice = st.sampled_from(weighted).flatmap(
            lambda f, ops=ops: st.tuples(st.just(f), ops[f]))
        if len(files) > 1:  # a folder of samples, or a model with its external data
            choice = _weighted(st, (6, choice), (1, st.tuples(st.sampled_from(files), st.just(("drop-file",)))))
        # a payload seed also runs as it is; its mutants mostly meet the same refusal, so fewer of them
        per_seed.append((1 if s.payload else 3, st.tuples(st.just(i), choice)))
    return _weighted(st, *per_seed)


def generate(seeds: SeedSet, total: int, seed: int = 0) -> list[Mutant]:
    """`total` mutants across every kind (each payload seed once as it is, then hypothesis), seeded."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed

    out = []
    quota = _quotas(total)
    for kind, n in quota.items():
        kind_seeds = seeds.kinds[kind]
        mutants = [Mutant(kind, 0, i, None, None) for i, s in enumerate(kind_seeds) if s.payload][:n]
        drawn: list = []
        want = n - len(mutants)
        if want > 0:
            @settings(max_examples=want, database=None, phases=[Phase.generate], deadline=None,
                      suppress_health_check=list(HealthCheck))
            @hseed(seed * 1000003 + zlib.crc32(kind.encode()))
            @given(mutation_strategy(kind_seeds))
            def collect(example):
                drawn.append(example)

            collect()
        for i, (target, op) in drawn[:want]:
            mutants.append(Mutant(kind, 0, i, target, op))
        out += [Mutant(m.kind, j, m.seed, m.target, m.op) for j, m in enumerate(mutants)]
    return out


def _quotas(total: int) -> dict[str, int]:
    """Mutants per kind: at least 2 each, the rest by KINDS' shares (largest remainders)."""
    base = {k: 2 for k in KINDS}
    rest = max(0, total - sum(base.values()))
    weight = sum(KINDS.values())
    exact = {k: rest * w / weight for k, w in KINDS.items()}
    for k in KINDS:
        base[k] += int(exact[k])
    left = total - sum(base.values())
    for k in sorted(KINDS, key=lambda k: exact[k] - int(exact[k]), reverse=True)[:max(0, left)]:
        base[k] += 1
    return base


def apply_op(data: bytes, op: tuple, container: str, escape: Path) -> tuple[bytes, str]:
    """One mutation of one file's (or zip member's) bytes, and its description."""
    name = op[0]
    if name == "npy-header":
        return _npy_header(data, op[1])
    if name in ("value", "line-delete", "line-dup", "line-insert"):
        text = data.decode()
        if name == "value":
            start, end = value_spans(text, container)[op[1]]
            new = op[2].replace("{escape}", str(escape))
            return (text[:start] + new + text[end:]).encode(), f"value {_short(text[start:end])} → {_short(op[2])}"
        lines = text.splitlines(keepends=True)
        i = min(op[1], len(lines))
        line = repr(lines[i].strip()) if i < len(lines) else "(end)"
        if name == "line-delete":
            del lines[i : i + 1]
            what = f"delete line {i + 1} {line}"
        elif name == "line-dup":
            lines[i:i] = lines[i : i + 1]
            what = f"duplicate line {i + 1} {line}"
        else:
            lines.insert(i, op[2].replace("{escape}", str(escape)) + "\n")
            what = f"insert line {_short(op[2])} before line {i + 1}"
        return "".join(lines).encode(), what
    return apply_bytes(data, op), describe_bytes(op)


NPY_HEADERS = tuple("{'descr': %s, 'fortran_order': %s, 'shape': %s, }" % t for t in (
    ("'<f4'", "False", "(99999999999, {rest})"), ("'<f4'", "False", "(4611686018427387904, {rest})"),
    ("'<f4'", "False", "(-1, {rest})"), ("'<f4'", "False", "(0, {rest})"), ("'<f4'", "False", "()"),
    ("'<f4'", "False", "(2147483648, 2147483648, 8)"), ("'<f4'", "False", "({n}, 1, 1, 1, 1, 8, 8)"),
    ("'<f4'", "False", "({shape_rev})"), ("'<f4'", "True", "{shape}"), ("'>f4'", "False", "{shape}"),
    ("'<f8'", "False", "{shape}"), ("'<f2'", "False", "{shape}"), ("'<i8'", "False", "{shape}"),
    ("'|u1'", "False", "{shape}"), ("'<c8'", "False", "{shape}"), ("'<U1'", "False", "{shape}"),
    ("'|O'", "False", "{shape}"), ("'|V4'", "False", "{shape}"), ("[('a', '<f4')]", "False", "{shape}"),
    ("'<M8[s]'", "False", "{shape}"), ("'bogus'", "False", "{shape}"), ("'<f4'", "1", "{shape}"),
    ("'<f4'", "False", "'x'"), ("'<f4'", "False", "(1.5, 2)"),
)) + ("{'descr': '<f4', 'shape': {shape}, }", "{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, 'x': 1, }",
      "[1, 2, 3]", "__import__('os').getcwd()")


def _npy_header(data: bytes, template: str) -> tuple[bytes, str]:
    """Replace the header of an .npy (v1/v2) with `template` (its shape placeholders filled from the old one)."""
    import ast

    if not data.startswith(b"\x93NUMPY") or len(data) < 12:
        return data, "npy header: not an .npy, left as it is"
    size, at = (struct.unpack("<H", data[8:10])[0], 10) if data[6] == 1 else (struct.unpack("<I", data[8:12])[0], 12)
    try:
        shape = tuple(ast.literal_eval(data[at : at + size].decode("latin1").strip())["shape"])
    except (ValueError, SyntaxError, KeyError, TypeError):
        shape = (1,)
    rest = ", ".join(map(str, shape[1:]))
    text = (template.replace("{shape}", repr(shape)).replace("{rest}", rest).replace("{n}", str(shape[0] if shape else 1))
            .replace("{shape_rev}", ", ".join(map(str, reversed(shape))) + ("," if len(shape) == 1 else "")))
    header = text.encode("latin1")
    pad = (-(10 + len(header) + 1)) % 64
    header += b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + data[at + size:], f"npy header → {text}"


def apply_bytes(data: bytes, op: tuple) -> bytes:
    name, n = op[0], len(data)
    if name == "flip":
        p = min(op[1], n - 1)
        return data[:p] + bytes([data[p] ^ op[2]]) + data[p + 1:] if n else data
    if name == "set":
        p = min(op[1], n)
        return data[:p] + op[2] + data[p + len(op[2]):]
    if name == "truncate":
        return data[: op[1]]
    if name == "insert":
        p = min(op[1], n)
        return data[:p] + op[2] + data[p:]
    if name == "duplicate":
        chunk = data[op[1] : op[1] + op[2]]
        p = min(op[3], n)
        return data[:p] + chunk + data[p:]
    if name == "zero":
        s = min(op[1], n)
        e = min(n, s + op[2])
        return data[:s] + b"\x00" * (e - s) + data[e:]
    raise ValueError(f"unknown byte op {name}")


def describe_bytes(op: tuple) -> str:
    name = op[0]
    if name == "flip":
        return f"flip byte {op[1]} ^ 0x{op[2]:02x}"
    if name == "set":
        return f"set bytes at {op[1]} to {op[2].hex()}"
    if name == "truncate":
        return f"truncate to {op[1]} bytes"
    if name == "insert":
        return f"insert {op[2].hex()} at {op[1]}"
    if name == "duplicate":
        return f"copy bytes {op[1]}..{op[1] + op[2]} to {op[3]}"
    if name == "zero":
        return f"zero bytes {op[1]}..{op[1] + op[2]}"
    return repr(op)


def _zip_read(path: Path) -> list[tuple[str, bytes, int]]:
    with zipfile.ZipFile(path) as z:
        return [(i.filename, z.read(i), i.compress_type) for i in z.infolist()]


def _zip_write(path: Path, members) -> None:
    with zipfile.ZipFile(path, "w") as z:
        for name, data, compress in members:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = compress
            z.writestr(info, data)


def materialize(m: Mutant, seeds: SeedSet, dest: Path, escape: Path) -> tuple[Path, str]:
    """Write the mutant's files into `dest`; return the entry path and how it was mutated."""
    s = seeds.kinds[m.kind][m.seed]
    for f in s.files:
        (dest / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(s.base / f, dest / f)
    entry = dest / s.entry
    if m.op is None:
        return entry, f"{s.name}: as it is" + (" (payload)" if s.payload else "")
    target = dest / m.target
    container = dict(s.mutable)[m.target]
    op = m.op
    if op[0] == "drop-file":
        target.unlink()
        return entry, f"{s.name}: remove {m.target}"
    data = target.read_bytes()
    if container == "zip" and op[0] == "raw":
        target.write_bytes(apply_bytes(data, op[1]))
        what = f"whole archive: {describe_bytes(op[1])}"
    elif container == "zip":
        members = _zip_read(target)
        if op[0] == "drop":
            members = [x for x in members if x[0] != op[1]]
            what = f"drop member {op[1]}"
        else:
            changed = []
            for n, b, c in members:
                if n == op[1]:
                    b, what = apply_op(b, op[2], _member_container(n), escape)
                changed.append((n, b, c))
            members = changed
            what = f"member {op[1]}: {what}"
        _zip_write(target, members)
    else:
        new, what = apply_op(data, op, container, escape)
        target.write_bytes(new)
    return entry, f"{s.name} › {m.target}: {what}"


def _short(text: str, limit: int = 60) -> str:
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"…({len(text)} chars)"


# ---------------------------------------------------------------------------------------------
# commands


def command(kind: str, entry: Path, inputs: Path, out: Path, seeds: SeedSet) -> list[str]:
    """The edgekit command line that reads a mutant of `kind` (relative names are under cwd)."""
    e, o = str(entry), str(out)
    stop = ["--out", o, "--eval", STOP_ARG]  # the source is opened and run before eval data is read
    if kind == "source.pt2":
        return ["convert", e, "--target", "onnx", *stop]
    if kind == "source.torchscript":
        return ["convert", e, "--target", "onnx", "--input-shape", "x=1,1,8,8", *stop]
    if kind == "source.pickle":
        return ["convert", e, "--target", "onnx", "--model-class", MODEL_CLASS, "--input-shape", "x=1,1,8,8", *stop]
    if kind == "source.onnx":
        return ["convert", e, "--target", "ort", *stop]
    if kind in ("source.keras", "source.h5", "source.savedmodel"):
        return ["convert", e, "--target", "tflite", *stop]
    if kind.startswith("artifact."):
        return ["report", e, "--json"]
    if kind in ("gate.artifact", "sidecar.io.json"):
        config = inputs / "edgekit-check.toml"
        config.write_text(f'[[models]]\nname = "fuzz"\npath = "{seeds.pt2}"\neval = "{seeds.eval_small}"\n'
                          f'artifacts = ["{entry.relative_to(inputs)}"]\n')
        return ["check", str(config), "--out", o]
    if kind in ("data.calib.npz", "data.calib.npy-folder"):
        return ["convert", str(seeds.pt2), "--target", "onnx", "--int8", "--calib", e, *stop]
    if kind == "data.eval.npz":
        return ["convert", str(seeds.pt2), "--target", "onnx", "--out", o, "--eval", e]
    if kind == "config.toml":
        return ["check", e, "--out", o]
    raise ValueError(f"no command for kind {kind}")


# ---------------------------------------------------------------------------------------------
# the worker: edgekit imported once, one mutant after another


def worker_main(job_fd: int, result_fd: int) -> None:
    import importlib

    cli = importlib.import_module("edgekit.cli.app")  # the module (edgekit.cli.app is also the Typer app's name)
    jobs = os.fdopen(job_fd, "r")
    results = os.fdopen(result_fd, "w", buffering=1)
    home = os.getcwd()
    results.write(json.dumps({"ready": os.getpid()}) + "\n")
    for line in jobs:
        job = json.loads(line)
        results.write(json.dumps(_run_job(job, cli, home)) + "\n")


def _run_job(job: dict, cli, home: str) -> dict:
    saved_env, saved_path, saved_tempdir = dict(os.environ), list(sys.path), tempfile.tempdir
    os.chdir(job["cwd"])
    os.environ["TMPDIR"] = tempfile.tempdir = job["tmp"]
    sys.stdout.flush()
    sys.stderr.flush()
    saved_fds = os.dup(1), os.dup(2)
    logs = [os.open(job["log"] + suffix, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) for suffix in (".out", ".err")]
    os.dup2(logs[0], 1)
    os.dup2(logs[1], 2)
    started = time.perf_counter()
    cause = None
    try:
        cli.app(args=job["args"], prog_name="edgekit")
        code: int | str = 0
    except SystemExit as e:
        code = 0 if e.code is None else e.code if isinstance(e.code, int) else 1
        cause = _cause(e) if code == 70 else None
    except BaseException as e:  # noqa: BLE001 — escaped the CLI's own handling: a finding
        code = f"escaped {type(e).__name__}"
        traceback.print_exc()
        cause = e
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:  # noqa: BLE001
            pass
        os.dup2(saved_fds[0], 1)
        os.dup2(saved_fds[1], 2)
        for fd in (*saved_fds, *logs):
            os.close(fd)
        os.chdir(home)
        os.environ.clear()
        os.environ.update(saved_env)
        tempfile.tempdir = saved_tempdir
        sys.path[:] = saved_path
        cli._state["debug"] = False
        for name, module in list(sys.modules.items()):  # modules imported from the mutant's folder
            if str(getattr(module, "__file__", None) or "").startswith(job["root"]):
                del sys.modules[name]
    return {"id": job["id"], "exit": code, "seconds": round(time.perf_counter() - started, 3),
            "cause": _describe_cause(cause) if cause is not None else None}


def _cause(exc: BaseException) -> BaseException | None:
    """The exception behind an exit: SystemExit ← click's Exit ← the original error (its context)."""
    import click
    import typer

    seen = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if not isinstance(e, (SystemExit, click.exceptions.Exit, typer.Exit)):
            return e
        e = e.__context__ or e.__cause__
    return None


def _describe_cause(e: BaseException) -> dict:
    frames = traceback.extract_tb(e.__traceback__)
    ours = [f for f in frames if _project_file(f.filename)]
    message = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
    return {
        "type": type(e).__name__, "message": message,
        "where": _frame(ours[-1]) if ours else None,
        "origin": _frame(frames[-1]) if frames else None,
        "traceback": "".join(traceback.format_exception(type(e), e, e.__traceback__))[-3000:],
    }


def _project_file(filename: str) -> bool:
    return filename.startswith(str(REPO)) and "site-packages" not in filename and "/tests/" not in filename


def _frame(f) -> str:
    name = f.filename
    if name.startswith(str(REPO)) and "site-packages" not in name:
        name = os.path.relpath(name, REPO)
    elif "site-packages/" in name:
        name = name.split("site-packages/", 1)[1]
    return f"{name}:{f.lineno} in {f.name}"


# ---------------------------------------------------------------------------------------------
# the driver: workers, checks, findings


@dataclass
class Outcome:
    mutant: Mutant
    mutation: str
    args: list[str]
    exit: int | str  # an exit code, or "crash (...)"/"hang"
    seconds: float
    output: str  # the last lines of stdout and stderr
    cause: dict | None = None
    findings: list[tuple[str, str]] = field(default_factory=list)  # (check, detail)
    kept: str | None = None  # where the mutant's inputs were kept


class Worker:
    def __init__(self, index: int, root: Path, timeout: float):
        self.dir = root / f"w{index}"
        self.logs = self.dir / ".logs"
        self.home = self.dir / ".home"
        for d in (self.logs, self.home / "tmp"):
            d.mkdir(parents=True, exist_ok=True)
        self.timeout = timeout
        self.proc: subprocess.Popen | None = None
        self.jobs_done = 0

    def start(self) -> None:
        job_r, job_w = os.pipe()
        res_r, res_w = os.pipe()
        env = {k: v for k, v in os.environ.items()
               if k not in ("GITHUB_STEP_SUMMARY", "EDGEKIT_DEBUG", "PYTEST_CURRENT_TEST")}
        env.update(PYTHONPATH=os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
                   TMPDIR=str(self.home / "tmp"), PYTHONHASHSEED="0", OMP_NUM_THREADS="1",
                   TF_CPP_MIN_LOG_LEVEL="2", PYTHONFAULTHANDLER="1", PYTHONDONTWRITEBYTECODE="1")
        with open(self.logs / "worker.log", "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.fuzzing", "--worker", str(job_r), str(res_w)], cwd=self.home,
                env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=(job_r, res_w),
                start_new_session=True)
        os.close(job_r)
        os.close(res_w)
        self.jobs = os.fdopen(job_w, "w", buffering=1)
        self.results = res_r
        self.buffer = b""
        self.jobs_done = 0
        ready = self._read(120)
        if not isinstance(ready, dict):
            raise RuntimeError(f"the fuzz worker did not start: {self.log_tail()}")

    def _read(self, timeout: float):
        """The next JSON line, or "eof" (the worker died) or "timeout"."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout"
            ready, _, _ = select.select([self.results], [], [], left)
            if not ready:
                continue
            chunk = os.read(self.results, 65536)
            if not chunk:
                return "eof"
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def run(self, job: dict) -> dict | str:
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        try:
            self.jobs.write(json.dumps(job) + "\n")
        except BrokenPipeError:
            return self._died()
        got = self._read(self.timeout)
        if got == "timeout":
            self.stop()
            return "hang"
        if got == "eof":
            return self._died()
        self.jobs_done += 1
        return got

    def _died(self) -> str:
        rc = self.proc.wait(timeout=30)
        self._close()
        how = f"signal {signal.Signals(-rc).name}" if rc < 0 else f"exit status {rc}"
        return f"crash ({how})"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=30)
        self._close()

    def _close(self) -> None:
        if self.proc is not None:
            for f in (self.jobs,):
                try:
                    f.close()
                except OSError:
                    pass
            try:
                os.close(self.results)
            except OSError:
                pass
        self.proc = None

    def log_tail(self) -> str:
        try:
            return (self.logs / "worker.log").read_text(errors="replace")[-2000:]
        except OSError:
            return ""


def _snapshot(bases, skip=()) -> set[str]:
    seen = set()
    for base in bases:
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames if os.path.join(dirpath, d) not in skip]
            seen.update(os.path.join(dirpath, n) for n in dirnames + filenames)
    return seen


def _missing_modules_really_missing(output: str) -> bool:
    import importlib.util

    m = re.search(r"\(missing: ([^)]*)\)", output)
    if not m:
        return False
    names = [n.strip() for n in m.group(1).split(",") if n.strip()]
    return bool(names) and all(importlib.util.find_spec(n.split(".")[0]) is None for n in names)


def check_outcome(o: Outcome, created: list[str], canary_ran: bool) -> None:
    """The checks every mutant must pass; each failed one is a finding."""
    code = o.exit
    if isinstance(code, str):
        o.findings.append(("crash" if code.startswith("crash") else "hang" if code == "hang" else "escaped", code))
    elif code == EXIT_MISSING_DEPENDENCY:
        if not _missing_modules_really_missing(o.output):
            o.findings.append(("exit-code", "exit 4 (missing dependency) although the modules are installed"))
    elif code not in ALLOWED_EXITS:
        o.findings.append(("exit-code", f"exit {code}"))
    if TRACEBACK in o.output:
        o.findings.append(("traceback", "a Python traceback in the output"))
    if created:
        o.findings.append(("files-outside-out", ", ".join(created[:8]) + (" …" if len(created) > 8 else "")))
    if canary_ran:
        o.findings.append(("payload-ran", "the payload's canary file was created"))


class Fuzz:
    def __init__(self, seeds: SeedSet, work: Path, *, jobs: int = 2, timeout: float = 90.0, recycle: int = 400,
                 keep: Path | None = None, progress=None):
        self.seeds = seeds
        self.work = Path(work)
        self.jobs = max(1, jobs)
        self.timeout = timeout
        self.recycle = recycle
        self.keep = Path(keep) if keep else None
        self.progress = progress
        self.lock = threading.Lock()
        self.outcomes: list[Outcome] = []

    def run(self, mutants: list[Mutant]) -> list[Outcome]:
        todo = collections.deque(mutants)
        workers = [Worker(i, self.work, self.timeout) for i in range(min(self.jobs, len(mutants)))]
        errors: list[BaseException] = []

        def loop(w: Worker):
            try:
                while True:
                    with self.lock:
                        if not todo:
                            return
                        m = todo.popleft()
                    o = self._one(w, m)
                    with self.lock:
                        self.outcomes.append(o)
                        if self.progress:
                            self.progress(len(self.outcomes), len(mutants), o)
                    if w.jobs_done >= self.recycle:
                        w.stop()
            except BaseException as e:  # noqa: BLE001 — a harness error, raised below
                errors.append(e)
            finally:
                w.stop()

        threads = [threading.Thread(target=loop, args=(w,), daemon=True) for w in workers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        order = {m.id: i for i, m in enumerate(mutants)}
        return sorted(self.outcomes, key=lambda o: order[o.mutant.id])

    def _one(self, w: Worker, m: Mutant) -> Outcome:
        before = w.jobs_done if w.proc is not None and w.proc.poll() is None else 0
        o = self._attempt(w, m)
        if before and isinstance(o.exit, str) and o.exit.startswith("crash"):
            again = self._attempt(w, m)  # the worker died with the crash: this runs in a fresh one
            again.output = (f"{o.exit} in a worker that had run {before} other mutants first; in a fresh "
                            f"worker: {again.exit}\n{again.output}").strip()
            return again
        return o

    def _attempt(self, w: Worker, m: Mutant) -> Outcome:
        d = w.dir / re.sub(r"[^\w.-]", "_", m.id)
        shutil.rmtree(d, ignore_errors=True)
        inputs, cwd, tmp, escape = d / "in", d / "cwd", d / "tmp", d / "escape"
        for p in (inputs, cwd, tmp):
            p.mkdir(parents=True)
        out = cwd / "out"
        entry, mutation = materialize(m, self.seeds, inputs, escape)
        args = command(m.kind, entry, inputs, out, self.seeds)
        watched = [w.dir, self.seeds.root / "seeds"]
        skip = {str(w.logs), str(w.home), str(out)}
        before = _snapshot(watched, skip) | set(os.listdir(self.work))
        log = str(w.logs / "job")
        started = time.perf_counter()
        got = w.run({"id": m.id, "args": args, "cwd": str(cwd), "tmp": str(tmp), "log": log, "root": str(d)})
        seconds = time.perf_counter() - started
        after = _snapshot(watched, skip) | set(os.listdir(self.work))
        created = sorted(p.replace(str(d), "<mutant>") for p in after - before
                         if not p.startswith(str(out) + os.sep))
        canary_ran = self.seeds.canary.exists()
        if canary_ran:
            self.seeds.canary.unlink()
        output = "\n".join(_tail(Path(log + s), 15) for s in (".out", ".err")).strip()
        if isinstance(got, str) and got.startswith("crash"):
            output = (output + "\n" + w.log_tail()[-1500:]).strip()
        o = Outcome(m, mutation, [_display(a, d, self.seeds.root) for a in args],
                    got["exit"] if isinstance(got, dict) else got, round(seconds, 2), output,
                    got.get("cause") if isinstance(got, dict) else None)
        check_outcome(o, created, canary_ran)
        if o.findings and self.keep is not None:
            dest = self.keep / re.sub(r"[^\w.-]", "_", m.id)
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(inputs, dest)
            o.kept = str(dest)
        shutil.rmtree(d, ignore_errors=True)
        return o


def _tail(path: Path, n: int) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(line[:300] for line in lines[-n:])


def _display(arg: str, mutant_dir: Path, root: Path) -> str:
    return (arg.replace(str(mutant_dir / "cwd" / "out"), "<out>").replace(str(mutant_dir / "in"), "<in>")
            .replace(str(root / "seeds"), "<seeds>"))


# ---------------------------------------------------------------------------------------------
# summary and findings


def root_cause(o: Outcome, check: str, detail: str) -> tuple:
    """What findings share: the check, and the exception and where it was raised when known."""
    if o.cause and check in ("exit-code", "escaped"):
        where = re.sub(r":\d+ in ", ":", o.cause["where"] or o.cause["origin"] or "?")
        return (check, o.cause["type"], where)
    if check == "traceback":
        frames = re.findall(r'File "([^"]+)", line \d+, in (\S+)', o.output)
        last = [ln for ln in o.output.splitlines() if re.match(r"^\w[\w.]*(Error|Exception|Exit)\b", ln)]
        where = f"{_short_path(frames[-1][0])}:{frames[-1][1]}" if frames else "?"
        return (check, last[-1].split(":")[0] if last else "?", where)
    if check in ("crash", "hang", "escaped"):
        return (check, detail, o.mutant.kind)
    if check == "files-outside-out":
        return (check, re.sub(r"\d+", "N", detail)[:200])
    if check == "payload-ran":
        return (check, o.mutation.split(" › ")[0].split(":")[0])
    return (check, detail, o.mutant.kind)


def _short_path(name: str) -> str:
    if "site-packages/" in name:
        return name.split("site-packages/", 1)[1]
    return os.path.relpath(name, REPO) if name.startswith(str(REPO)) else name


def group_findings(outcomes: list[Outcome]) -> dict[tuple, list[tuple[Outcome, str]]]:
    groups: dict[tuple, list] = collections.OrderedDict()
    for o in outcomes:
        for check, detail in o.findings:
            groups.setdefault(root_cause(o, check, detail), []).append((o, detail))
    return groups


def summary(outcomes: list[Outcome], *, seed: int, total: int, seconds: float | None = None,
            examples: int = 1) -> str:
    kinds = collections.Counter(o.mutant.kind for o in outcomes)
    codes = collections.Counter(str(o.exit) if not isinstance(o.exit, str) else o.exit.split(" (")[0]
                                for o in outcomes)
    time_by_kind = collections.defaultdict(float)
    for o in outcomes:
        time_by_kind[o.mutant.kind] += o.seconds
    lines = [f"edgekit fuzz: {len(outcomes)} mutants, seed {seed}"
             + (f", {seconds:.1f} s" if seconds is not None else "")]
    lines.append("mutants per kind:")
    for k in KINDS:
        if kinds[k]:
            mine = [o for o in outcomes if o.mutant.kind == k]
            per = collections.Counter(str(o.exit) for o in mine)
            # a model or calibration set read in full stops at the missing eval data (exit 2)
            read = sum(STOP in o.output for o in mine)
            lines.append(f"  {k:<24}{kinds[k]:>5}  {time_by_kind[k]:7.1f} s   exits "
                         + ", ".join(f"{c}×{n}" for c, n in sorted(per.items()))
                         + (f"  (read in full, then stopped at the missing eval data: {read})"
                            if any(STOP_ARG in o.args for o in mine) else ""))
    lines.append("exit codes: " + ", ".join(f"{c}: {n}" for c, n in sorted(codes.items(), key=lambda kv: kv[0])))
    groups = group_findings(outcomes)
    bad = sum(1 for o in outcomes if o.findings)
    lines.append(f"findings: {len(groups)} distinct, in {bad} of {len(outcomes)} mutants")
    for i, (key, items) in enumerate(groups.items(), 1):
        per_kind = collections.Counter(o.mutant.kind for o, _ in items)
        first, detail = items[0]
        head = f"[{i}] {key[0]}"
        if first.cause and key[0] in ("exit-code", "escaped"):
            c = first.cause
            head += f" — {c['type']} at {c['where'] or '?'} (raised in {c['origin']}): {c['message']}"
        else:
            head += f" — {' · '.join(str(k) for k in key[1:])}"
        lines.append(head)
        lines.append("    kinds: " + ", ".join(f"{k} ×{n}" for k, n in per_kind.most_common()))
        for o, det in items[:examples]:
            lines.append(f"    e.g. {o.mutant.id}: {o.mutation}")
            lines.append(f"      $ edgekit {' '.join(_quote(a) for a in o.args)}")
            lines.append(f"      exit {o.exit}; {det}"
                         f"; reproduce: python -m tests.fuzzing --mutants {total} --seed {seed} "
                         f"--only '{o.mutant.id}' --keep DIR" + (f"; inputs kept in {o.kept}" if o.kept else ""))
            for line in o.output.splitlines()[-6:]:
                lines.append(f"      | {line[:240]}")
        rest = items[examples:]
        for o, _ in rest[:20]:
            lines.append(f"    also {o.mutant.id} (exit {o.exit}): {o.mutation[:140]}")
        if len(rest) > 20:
            lines.append(f"    … and {len(rest) - 20} more")
    return "\n".join(lines)


def _quote(arg: str) -> str:
    if len(arg) > 120:
        arg = arg[:60] + f"…({len(arg)} chars)"
    return arg if re.fullmatch(r"[\w./<>:=,#@+-]+", arg) else repr(arg)


# ---------------------------------------------------------------------------------------------
# command line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzzing", description=__doc__.split("\n\n")[0])
    parser.add_argument("--mutants", type=int, default=2000, help="how many mutants in all (split across kinds)")
    parser.add_argument("--seed", type=int, default=0, help="the seed of the mutations")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds a mutant may take (past it: a hang)")
    parser.add_argument("--only", action="append", default=[], help="run only these mutant ids (KIND#N)")
    parser.add_argument("--kind", action="append", default=[], help="run only mutants of these kinds")
    parser.add_argument("--keep", type=Path, help="copy the inputs of every mutant with a finding here")
    parser.add_argument("--work", type=Path, help="scratch folder (default: a new temporary folder, removed)")
    parser.add_argument("--examples", type=int, default=1, help="examples shown per finding")
    parser.add_argument("--json", type=Path, help="also write every outcome as JSON here")
    parser.add_argument("--worker", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker_main(*args.worker)
        return 0
    work = args.work or Path(tempfile.mkdtemp(prefix="edgekit-fuzz-"))
    work.mkdir(parents=True, exist_ok=True)
    say = lambda msg: print(f"fuzz: {msg}", file=sys.stderr, flush=True)  # noqa: E731
    try:
        started = time.perf_counter()
        seeds = build_seeds(work, say=say)
        say(f"seeds ready in {time.perf_counter() - started:.1f} s")
        mutants = generate(seeds, args.mutants, args.seed)
        if args.only:
            mutants = [m for m in mutants if m.id in args.only]
        if args.kind:
            mutants = [m for m in mutants if m.kind in args.kind]
        keep = args.keep
        if keep is not None and args.only:
            keep.mkdir(parents=True, exist_ok=True)

        def progress(done, total, o):
            if done % 50 == 0 or done == total or o.findings:
                flag = f"  FINDING {o.mutant.id} exit {o.exit}: {o.findings[0][0]}" if o.findings else ""
                say(f"{done}/{total}{flag}")

        fuzz = Fuzz(seeds, work / "run", jobs=args.jobs, timeout=args.timeout, keep=keep, progress=progress)
        started = time.perf_counter()
        outcomes = fuzz.run(mutants)
        elapsed = time.perf_counter() - started
        print(summary(outcomes, seed=args.seed, total=args.mutants, seconds=elapsed, examples=args.examples))
        if args.json:
            args.json.write_text(json.dumps([{
                "id": o.mutant.id, "kind": o.mutant.kind, "mutation": o.mutation, "args": o.args, "exit": o.exit,
                "seconds": o.seconds, "findings": o.findings, "cause": o.cause, "output": o.output[-2000:],
            } for o in outcomes], indent=1))
        if args.only and keep is not None:
            for m in mutants:  # the inputs of the mutants asked for, findings or not
                d = keep / re.sub(r"[^\w.-]", "_", m.id)
                if not d.exists():
                    dest = d
                    dest.mkdir(parents=True)
                    materialize(m, seeds, dest, dest / "escape")
                    print(f"kept {m.id} in {dest}", file=sys.stderr)
        return 1 if any(o.findings for o in outcomes) else 0
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
