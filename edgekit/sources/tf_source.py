"""TensorFlow SavedModel directories and Keras files as sources; TF/Keras is the reference.

TF models are NHWC: the signature records the layout, and calibration and eval data follow it.
A Keras input whose batch dimension is undefined is converted for a batch of 1.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np

from edgekit.core.artifact import ModelArtifact
from edgekit.core.deps import require
from edgekit.core.errors import BadInput, first_line
from edgekit.core.quiet import passing_through
from edgekit.core.signature import Signature, TensorSpec
from edgekit.sources.tf_safety import check_keras_file, check_saved_model

_TF_DTYPES = {"float32", "float16", "int64", "int32", "int8", "uint8", "bool"}


class TfSource:
    """A Keras model or a SavedModel's serving signature, run in TensorFlow as the reference."""

    def __init__(self, artifact: ModelArtifact, fn, keras_model=None):
        self.artifact = artifact
        self._fn = fn  # feeds dict → list of arrays
        self.keras_model = keras_model  # set for Keras sources

    @property
    def signature(self) -> Signature:
        """The signature, layout NHWC: a Keras input's undefined batch is 1, other dynamic dims are
        --input-shape's."""
        return self.artifact.signature

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """One sample (input name → array, NHWC) through TensorFlow, fresh copies fed; the outputs in order."""
        return self._fn({s.name: np.array(feeds[s.name], copy=True) for s in self.signature.inputs})

    def saved_model(self, folder) -> str:
        """A SavedModel of this source: the source itself, or a Keras export into `folder`."""
        if self.keras_model is None:
            return self.artifact.path
        path = os.path.join(str(folder), "saved_model")
        if not os.path.isdir(path):
            import tensorflow as tf

            # Keep the signature's fixed shapes (export alone leaves the batch undefined).
            specs = [tf.TensorSpec(s.shape, s.dtype, name=s.name) for s in self.signature.inputs]
            self.keras_model.export(path, verbose=False, input_signature=specs if len(specs) == 1 else [specs])
        return path


def open_tf(fmt: str, location: str, declared: tuple[TensorSpec, ...] | None, *,
            trust_model_code: bool = False) -> TfSource:
    require("tf", f"reading {location}")
    if not passing_through():  # --verbose: TensorFlow's C++ INFO and WARNING lines too
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if fmt == "keras":
        return _open_keras(location, declared)
    return _open_saved_model(location, declared, trust_model_code)


# Reads every attribute and dataset of a Keras file's HDF5 content, as loading it will: run in a child
# process first because a damaged HDF5 file can make the HDF5 library spin forever inside one read,
# where neither Ctrl-C nor SIGTERM reaches Python.
_HDF5_PROBE = """
import io, sys, zipfile
from edgekit.core.process import die_with_parent
die_with_parent()
import h5py
path = sys.argv[1]
if zipfile.is_zipfile(path):
    with zipfile.ZipFile(path) as archive:
        files = [io.BytesIO(archive.read(n)) for n in archive.namelist() if n.endswith(".h5")]
else:
    files = [path]
def touch(name, obj):
    for key in obj.attrs:
        obj.attrs[key]
    if isinstance(obj, h5py.Dataset):
        obj[()]
for f in files:
    with h5py.File(f, "r") as h5:
        touch("/", h5)
        h5.visititems(touch)
"""
HDF5_PROBE_SECONDS = 30


def _hdf5_finishes(location: str) -> None:
    """BadInput when reading the file's HDF5 content hangs or crashes (in a child process); a plain
    error is left for Keras to report."""
    try:
        proc = subprocess.run([sys.executable, "-c", _HDF5_PROBE, location], capture_output=True,
                              timeout=HDF5_PROBE_SECONDS, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise BadInput(f"{location}: reading its HDF5 content did not finish in {HDF5_PROBE_SECONDS} s; the file "
                       "is damaged", fix="give an intact file (re-save or re-copy it)") from None
    if proc.returncode < 0:
        raise BadInput(f"{location}: reading its HDF5 content crashed (signal {-proc.returncode}); the file is damaged",
                       fix="give an intact file (re-save or re-copy it)")


def _open_keras(location: str, declared) -> TfSource:
    _hdf5_finishes(location)
    check_keras_file(location)  # before Keras: a config that would load files from outside the model
    import keras

    try:
        model = keras.models.load_model(location, compile=False, safe_mode=True)  # no Lambda, no arbitrary code
    except Exception as e:
        # Keras nests the cause ("Could not locate class 'X'") deep inside a long config dump.
        cause = re.search(r"(Could not locate (?:class|function) '[^']+')", str(e))
        raise BadInput(f"{location} cannot be loaded as a Keras model: {cause.group(1) if cause else first_line(e)}",
                       fix="if it uses custom layers, register them (keras.saving.register_keras_serializable) "
                           "and export a SavedModel with model.export(dir), then convert that directory") from None
    specs = []
    for i, t in enumerate(model.inputs):
        name = getattr(t, "name", None) or f"input_{i}"
        shape = [1 if (k == 0 and d is None) else d for k, d in enumerate(t.shape)]
        specs.append(_spec(name, shape, str(t.dtype), declared, i, location))
    def fn(feeds):
        args = [feeds[s.name] for s in specs]
        return _listed(model(args if len(args) > 1 else args[0], training=False))

    sig = _with_outputs(Signature(tuple(specs), layout="NHWC"), fn, location)
    return TfSource(ModelArtifact("keras", location, sig, "fp32"), fn, model)


def _open_saved_model(location: str, declared, trust_model_code: bool = False) -> TfSource:
    if not trust_model_code:
        # Loading runs initializers and calling runs the serving graph: refuse file, process and
        # Python ops before TensorFlow runs anything of the model.
        check_saved_model(location)
    import tensorflow as tf

    try:
        loaded = tf.saved_model.load(location)
        serving = loaded.signatures["serving_default"]
    except KeyError:
        raise BadInput(f"{location} has no 'serving_default' signature",
                       fix="export it with a serving signature (keras: model.export(dir))") from None
    except Exception as e:
        raise BadInput(f"{location} cannot be loaded as a SavedModel: {first_line(e)}") from None
    _, kwargs = serving.structured_input_signature
    specs = [_spec(name, list(spec.shape), spec.dtype.name, declared, i, location)
             for i, (name, spec) in enumerate(sorted(kwargs.items()))]
    output_keys = sorted(serving.structured_outputs, key=_natural)

    def fn(feeds):
        result = serving(**{s.name: tf.constant(feeds[s.name]) for s in specs})
        return [np.asarray(result[k]) for k in output_keys]

    sig = _with_outputs(Signature(tuple(specs), layout="NHWC"), fn, location)
    files = tuple(os.path.join(root, f) for root, _, names in os.walk(location) for f in sorted(names))
    return TfSource(ModelArtifact("tf-savedmodel", location, sig, "fp32", files), fn)


def _spec(name: str, shape: list, dtype: str, declared, index: int, location: str) -> TensorSpec:
    given = {s.name: s for s in declared or ()}
    positional = declared and all(s.name == f"input_{k}" for k, s in enumerate(declared))
    mine = given.get(name) or (declared[index] if positional and index < len(declared) else None)
    if mine is not None:
        if len(mine.shape) != len(shape) or any(d is not None and d != g for d, g in zip(shape, mine.shape)):
            raise BadInput(f"input shape {mine.describe()} does not fit the model: it takes "
                           f"{name}=({', '.join('?' if d is None else str(d) for d in shape)})")
        shape = list(mine.shape)
    if any(d is None for d in shape):
        raise BadInput(f"{location}: input {name!r} has a dynamic shape {tuple(shape)}",
                       fix=f"pass --input-shape {name}=... with the shape to convert for")
    if dtype not in _TF_DTYPES:
        raise BadInput(f"{location}: input {name!r} has dtype {dtype}, which edgekit does not handle")
    return TensorSpec(name, tuple(int(d) for d in shape), dtype)


def _with_outputs(sig: Signature, fn, location: str) -> Signature:
    zeros = {s.name: np.zeros(s.shape, s.dtype) for s in sig.inputs}
    try:
        outs = fn(zeros)
    except Exception as e:
        raise BadInput(f"{location} does not run on inputs {sig.describe()}: {first_line(e)}") from None
    return Signature(sig.inputs, tuple(TensorSpec(f"output_{i}", tuple(o.shape) or (1,), _dtype(o))
                                       for i, o in enumerate(outs)), sig.layout)


def _listed(out) -> list[np.ndarray]:
    if isinstance(out, dict):
        return [np.asarray(out[k]) for k in sorted(out, key=_natural)]
    if isinstance(out, (list, tuple)):
        return [np.asarray(o) for o in out]
    return [np.asarray(out)]


def _natural(key: str):
    m = re.search(r"(\d+)$", key)
    return (re.sub(r"\d+$", "", key), int(m.group(1)) if m else -1)


def _dtype(a: np.ndarray) -> str:
    name = np.dtype(a.dtype).name
    return name if name in _TF_DTYPES else "float32"
