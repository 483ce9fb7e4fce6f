"""TensorFlow SavedModel directories and Keras files as sources; TF/Keras is the reference.

TF models are NHWC: the signature records the layout, and calibration and eval data follow it.
A Keras input whose batch dimension is undefined is converted for a batch of 1.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile

import numpy as np

from edgekit.core.artifact import ModelArtifact
from edgekit.core.deps import require
from edgekit.core.errors import BadInput, first_line
from edgekit.core.quiet import passing_through
from edgekit.core.signature import Signature, TensorSpec
from edgekit.sources import tf_legacy
from edgekit.sources.tf_safety import check_keras_file, check_saved_model

_TF_DTYPES = {"float32", "float16", "int64", "int32", "int8", "uint8", "bool"}


class TfSource:
    """A Keras model or a SavedModel's serving signature, run in TensorFlow as the reference.

    `loader` names what read it (edgekit.sources.tf_legacy: V2, SIGNATURES, V1 for a SavedModel; "keras" or
    KERAS2 for a Keras file) and `said` what was said about the loaders tried; the converters read `loader`."""

    def __init__(self, artifact: ModelArtifact, fn, keras_model=None, *, loader: str = tf_legacy.V2,
                 said: tuple[str, ...] = (), exported: str | None = None, output_keys: tuple[str, ...] = ()):
        self.artifact = artifact
        self._fn = fn  # feeds dict → list of arrays
        self.keras_model = keras_model  # set for Keras 3 sources
        self.loader = loader
        self.said = said
        self._exported = exported  # a SavedModel traced from a Keras 2 model
        self.output_keys = output_keys  # a SavedModel's serving output keys, in the order of the outputs

    @property
    def signature_only(self) -> bool:
        """Whether TF 2's object loader could not read this SavedModel, so that converters must read its serving
        signature's graph alone (TF's v1 converters, a graph frozen in a v1 session)."""
        return self.loader in (tf_legacy.SIGNATURES, tf_legacy.V1)

    def serving_tags(self) -> list[str]:
        """The tags of the MetaGraph holding the serving signature (what TF's v1 loaders are given)."""
        return list(tf_legacy.serving_meta_graph(self.artifact.path).meta_info_def.tags)

    @property
    def input_keys(self) -> tuple[str, ...]:
        """A SavedModel's serving input keys, in the signature's order."""
        return tuple(self.signature.input_names)

    @property
    def signature(self) -> Signature:
        """The signature, layout NHWC: a Keras input's undefined batch is 1, other dynamic dims are
        --input-shape's."""
        return self.artifact.signature

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """One sample (input name → array, NHWC) through TensorFlow, fresh copies fed; the outputs in order."""
        return self._fn({s.name: np.array(feeds[s.name], copy=True) for s in self.signature.inputs})

    def saved_model(self, folder) -> str:
        """A SavedModel of this source: the source itself, or a Keras export into `folder` (its recurrent layers
        unrolled: `unrolled`)."""
        if self._exported is not None:
            return self._exported
        if self.keras_model is None:
            return self.artifact.path
        path = os.path.join(str(folder), "saved_model")
        if not os.path.isdir(path):
            import tensorflow as tf

            # Keep the signature's fixed shapes (export alone leaves the batch undefined).
            specs = [tf.TensorSpec(s.shape, s.dtype, name=s.name) for s in self.signature.inputs]
            unrolled(self.keras_model).export(path, verbose=False, input_signature=specs if len(specs) == 1 else [specs])
        return path


def unrolled(model):
    """`model`, or a copy of it with the same weights whose recurrent layers (LSTM, GRU, SimpleRNN) run unrolled
    over their fixed number of steps. Keras 3 exports a recurrent layer as a TF while loop, on which TFLite's int8
    calibrator crashes the process (a segmentation fault in its calibration interpreter) and which tf2onnx writes as
    an ONNX Loop that nothing quantizes; unrolled, each step is the cell's matmuls and activations, which both
    quantize. The outputs are the same computation."""
    import keras

    recurrent = (keras.layers.LSTM, keras.layers.GRU, keras.layers.SimpleRNN)
    if not any(isinstance(layer, recurrent) and not layer.unroll for layer in model.layers):
        return model

    def clone(layer):
        if not isinstance(layer, recurrent):
            return layer.__class__.from_config(layer.get_config())
        return layer.__class__.from_config({**layer.get_config(), "unroll": True})

    copy = keras.models.clone_model(model, clone_function=clone)
    copy.set_weights(model.get_weights())
    return copy


def open_tf(fmt: str, location: str, declared: tuple[TensorSpec, ...] | None, *,
            trust_model_code: bool = False, say=None) -> TfSource:
    """The Keras file or SavedModel at `location`; `say` hears which loader read it when the first one could not."""
    require("tf", f"reading {location}")
    say = say or (lambda _msg: None)
    if not passing_through():  # --verbose: TensorFlow's C++ INFO and WARNING lines too
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if fmt == "keras":
        return _open_keras(location, declared, trust_model_code, say)
    return _open_saved_model(location, declared, trust_model_code, say)


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


def _open_keras(location: str, declared, trust_model_code: bool = False, say=lambda _msg: None) -> TfSource:
    _hdf5_finishes(location)
    check_keras_file(location)  # before Keras: a config that would load files from outside the model
    import keras

    try:
        model = keras.models.load_model(location, compile=False, safe_mode=True)  # no Lambda, no arbitrary code
    except Exception as e:
        # Keras nests the cause ("Could not locate class 'X'") deep inside a long config dump.
        cause = re.search(r"(Could not locate (?:class|function) '[^']+')", str(e))
        why = cause.group(1) if cause else first_line(e)
        fix = ("if it uses custom layers, register them (keras.saving.register_keras_serializable) "
               "and export a SavedModel with model.export(dir), then convert that directory")
        if _keras2_may_read(location, why):
            return _open_keras2(location, declared, trust_model_code, say, why, fix)
        if _keras2_layer(why) and not tf_legacy.tf_keras_available():
            import tensorflow as tf

            fix = f"a Keras 2 file: {tf_legacy.TF_KERAS_FIX.format(tf=tf.__version__)} lets edgekit read it"
        raise BadInput(f"{location} cannot be loaded as a Keras model: {why}", fix=fix) from None
    specs = _keras_specs(model, declared, location)

    def fn(feeds):
        args = [feeds[s.name] for s in specs]
        return _listed(model(args if len(args) > 1 else args[0], training=False))

    sig = _with_outputs(Signature(tuple(specs), layout="NHWC"), fn, location)
    return TfSource(ModelArtifact("keras", location, sig, "fp32"), fn, model, loader="keras")


def _keras_specs(model, declared, location: str) -> list[TensorSpec]:
    """A Keras model's inputs: an undefined batch is 1, other dynamic dims --input-shape's."""
    specs = []
    for i, t in enumerate(model.inputs):
        name = getattr(t, "name", None) or f"input_{i}"
        shape = [1 if (k == 0 and d is None) else d for k, d in enumerate(t.shape)]
        specs.append(_spec(name, shape, str(getattr(t.dtype, "name", t.dtype)), declared, i, location))
    return specs


# What Keras 3 says of a layer only Keras 2 has (TFOpLambda: a TF function called on Keras tensors).
_KERAS2_LAYERS = re.compile(r"(Unknown layer: |Could not locate class )'(TFOpLambda|SlicingOpLambda)'")


def _keras2_layer(why: str) -> bool:
    return bool(_KERAS2_LAYERS.search(why))


def _keras2_may_read(location: str, why: str) -> bool:
    """Whether to try tf_keras: it is installed, the file is HDF5 (Keras 2's format; a .keras zip is Keras 3's own)
    and Keras 3 failed on something other than its own safety refusal."""
    return tf_legacy.tf_keras_available() and not zipfile.is_zipfile(location) and "safe_mode" not in why


def _open_keras2(location: str, declared, trust_model_code: bool, say, keras3_error: str, fix: str) -> TfSource:
    try:
        model, exported, loaded = tf_legacy.open_keras2(
            location, lambda m: _keras_specs(m, declared, location), trust_model_code, say, keras3_error)
    except BadInput:
        raise
    except Exception as e:  # noqa: BLE001 - both Keras versions' errors are the message
        raise BadInput(f"{location} cannot be loaded as a Keras model: {keras3_error} (Keras 3); "
                       f"{first_line(e)} ({tf_legacy.KERAS2}, Keras 2)", fix=fix) from None
    specs = [_spec(n, shape, dtype, declared, i, location) for i, (n, shape, dtype) in enumerate(loaded.inputs)]
    sig = _with_outputs(Signature(tuple(specs), layout="NHWC"), loaded.fn, location)
    return TfSource(ModelArtifact("keras", location, sig, "fp32"), loaded.fn, None, loader=loaded.loader,
                    said=loaded.said, exported=exported, output_keys=loaded.outputs)


def _open_saved_model(location: str, declared, trust_model_code: bool = False, say=lambda _msg: None) -> TfSource:
    if not trust_model_code:
        # Loading runs initializers and calling runs the serving graph: refuse file, process and
        # Python ops before TensorFlow runs anything of the model.
        check_saved_model(location)
    loaded = tf_legacy.load_saved_model(location, say)  # tf.saved_model.load, else TF's older loaders
    specs = [_spec(name, shape, dtype, declared, i, location) for i, (name, shape, dtype) in enumerate(loaded.inputs)]
    sig = _with_outputs(Signature(tuple(specs), layout="NHWC"), loaded.fn, location)
    files = tuple(os.path.join(root, f) for root, _, names in os.walk(location) for f in sorted(names))
    return TfSource(ModelArtifact("tf-savedmodel", location, sig, "fp32", files), loaded.fn, loader=loaded.loader,
                    said=loaded.said, output_keys=loaded.outputs)


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


_natural = tf_legacy.natural


def _dtype(a: np.ndarray) -> str:
    name = np.dtype(a.dtype).name
    return name if name in _TF_DTYPES else "float32"
