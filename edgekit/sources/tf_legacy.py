"""SavedModels and Keras files that TensorFlow 2's object loader or Keras 3 cannot read, read another way.

A SavedModel holds a TF1-style MetaGraph (graph, variables, signatures) and, written by TF 2, an object
graph of the Python objects it was saved from. `tf.saved_model.load` revives that object graph, and a
node it cannot revive stops it even when the serving signature needs none of it. The common case: a
model saved by TF 2.x with Keras 2 after `compile()` and training carries its Keras 2 optimizer (an
`optimizer` user object listing `slot_variables`, Adam's `m` and `v`); TF's loader recreates the slots
through the optimizer's `add_slot`, which only Keras 2's RestoredOptimizer has (registered by `tf_keras`).
Without `tf_keras` the optimizer revives as a plain `_UserObject` and loading fails with
"'_UserObject' object has no attribute 'add_slot'". The same holds for any optimizer-like object with
slot variables (a `tf.compat.v1.train.Optimizer` saved on a `tf.Module`).

`load_saved_model` tries, in order, each step said through `say`:

1. `tf.saved_model.load` (V2), the object graph revived;
2. TF's loader for TF1 SavedModels (`load_v1_in_v2`, what `tf.saved_model.load` itself uses for a
   SavedModel without an object graph): the MetaGraph imported and its signatures wrapped as functions,
   no object revived (SIGNATURES);
3. TF's v1 loader in a `tf.compat.v1` Graph and Session, the serving signature's tensors run (V1).

The converters follow: `tf_to_tflite` uses `tf.compat.v1.lite.TFLiteConverter.from_saved_model` and
`tf_to_onnx` tf2onnx on a graph frozen in a v1 Session when the source needed step 2 or 3.

A Keras 2 file Keras 3 cannot read (a `.h5` with `TFOpLambda` layers: `x * 2`, `tf.nn.relu6(x)` on
Keras tensors) is read with `tf_keras` when it is installed (`open_keras2`): Lambda layers refused
without --trust-model-code (tf_keras's own `safe_mode` does not cover `.h5`), the model traced into a
SavedModel whose graph `check_saved_model` scans before any of it runs, and that SavedModel is the source.
"""

from __future__ import annotations

import importlib.util
import os
import re
import tempfile
from dataclasses import dataclass
from typing import Callable

import numpy as np

from edgekit.core.errors import BadInput, first_line
from edgekit.sources.tf_safety import _configs, _keras_config, _parse, check_saved_model

SERVING = "serving_default"

# The loaders, as the source records and the converters read them.
V2 = "tf.saved_model.load"
SIGNATURES = "TF's signatures-only loader"  # tensorflow.python.saved_model.load_v1_in_v2
V1 = "TF's v1 loader"  # tf.compat.v1.saved_model.loader in a Graph and Session
KERAS2 = "tf_keras"

# tf-keras requires the `tensorflow` distribution, which edgekit's extra does not install (it has
# tensorflow-cpu: the two write the same files); --no-deps keeps the installed TensorFlow.
TF_KERAS_FIX = "pip install --no-deps tf-keras=={tf} (the tf_keras matching the installed TensorFlow)"


@dataclass(frozen=True)
class Loaded:
    """A serving signature ready to run: `fn` takes input name → array and gives the outputs in `outputs`' order."""

    fn: Callable[[dict], list]
    inputs: tuple[tuple[str, list, str], ...]  # (name, shape with None for dynamic dims, dtype name), sorted by name
    outputs: tuple[str, ...]  # output keys, in the order fn gives them
    loader: str  # V2, SIGNATURES or V1
    said: tuple[str, ...]  # what was said about the steps tried


def natural(key: str):
    """output_2 before output_10."""
    m = re.search(r"(\d+)$", key)
    return (re.sub(r"\d+$", "", key), int(m.group(1)) if m else -1)


def load_saved_model(location: str, say: Callable[[str], None]) -> Loaded:
    """The serving signature of the SavedModel at `location` through the first loader that reads it (the
    safety check has run). BadInput naming every step's error when none does; a model that loads but has no
    serving signature is BadInput at once."""
    failures: list[str] = []
    for label, step in ((V2, _load_v2), (SIGNATURES, _load_signatures), (V1, _load_v1)):
        try:
            fn, inputs, outputs = step(location)
        except _NoServing:
            raise BadInput(f"{location} has no '{SERVING}' signature",
                           fix="export it with a serving signature (keras: model.export(dir))") from None
        except Exception as e:  # noqa: BLE001 - every loader's failure is said, then the next one tried
            failures.append(f"{label} failed ({first_line(e)})")
            continue
        said = ()
        if failures:
            said = (f"SavedModel: {'; '.join(failures)}; loaded with {label} ({SERVING})",)
            say(said[0])
        return Loaded(fn, inputs, outputs, label, said)
    raise BadInput(f"{location} cannot be loaded as a SavedModel: {'; '.join(failures)}",
                   fix="re-export it with the TensorFlow it was written with (tf.saved_model.save, or keras "
                       "model.export(dir)) and convert that directory")


class _NoServing(Exception):
    pass


def _load_v2(location: str):
    import tensorflow as tf

    loaded = tf.saved_model.load(location)
    if SERVING not in loaded.signatures:
        raise _NoServing
    return _wrap_function(loaded.signatures[SERVING], keep=loaded)


def _load_signatures(location: str):
    from tensorflow.python.saved_model import load_v1_in_v2  # the loader tf.saved_model.load uses for TF1 models

    meta = serving_meta_graph(location)
    loaded = load_v1_in_v2.load(location, list(meta.meta_info_def.tags))
    return _wrap_function(loaded.signatures[SERVING], keep=loaded)


def _wrap_function(serving, keep):
    import tensorflow as tf

    _, kwargs = serving.structured_input_signature
    inputs = tuple((name, list(spec.shape), spec.dtype.name) for name, spec in sorted(kwargs.items()))
    outputs = tuple(sorted(serving.structured_outputs, key=natural))

    def fn(feeds):
        _ = keep  # the loaded object owns the variables the function reads
        result = serving(**{name: tf.constant(feeds[name]) for name, _, _ in inputs})
        return [np.asarray(result[k]) for k in outputs]

    return fn, inputs, outputs


def _load_v1(location: str):
    import tensorflow as tf

    meta = serving_meta_graph(location)
    sig = meta.signature_def[SERVING]
    graph = tf.Graph()
    session = tf.compat.v1.Session(graph=graph)
    with graph.as_default():
        tf.compat.v1.saved_model.loader.load(session, list(meta.meta_info_def.tags), location)
    inputs = tuple((k, _shape(sig.inputs[k]), tf.dtypes.as_dtype(sig.inputs[k].dtype).name) for k in sorted(sig.inputs))
    outputs = tuple(sorted(sig.outputs, key=natural))
    fetches = [sig.outputs[k].name for k in outputs]

    def fn(feeds):
        return [np.asarray(a) for a in session.run(fetches, {sig.inputs[k].name: feeds[k] for k, _, _ in inputs})]

    return fn, inputs, outputs


def _shape(info) -> list:
    if info.tensor_shape.unknown_rank:
        raise ValueError(f"input {info.name} has an unknown rank")
    return [None if d.size < 0 else int(d.size) for d in info.tensor_shape.dim]


def serving_meta_graph(location: str):
    """The MetaGraphDef holding the serving signature (ValueError naming the signatures there are, when none)."""
    saved = _parse(location)
    for meta in saved.meta_graphs:
        if SERVING in meta.signature_def:
            return meta
    found = sorted({k for m in saved.meta_graphs for k in m.signature_def})
    raise _NoServing if not found else ValueError(f"no '{SERVING}' signature (it has {', '.join(found)})")


# --- Keras 2 files through tf_keras ----------------------------------------------------------------------

def tf_keras_available() -> bool:
    """Whether tf_keras is installed (nothing imported)."""
    try:
        return importlib.util.find_spec("tf_keras") is not None
    except (ImportError, ValueError):
        return False


def open_keras2(location: str, specs_of, trust_model_code: bool, say: Callable[[str], None], keras3_error: str):
    """(the tf_keras model, the path of the SavedModel traced from it, its Loaded serving signature).
    `specs_of(model)` gives the input TensorSpecs to trace for. The SavedModel's graph is checked
    (`check_saved_model`) before any of it runs."""
    import tensorflow as tf
    import tf_keras  # local: Keras 2, only for a Keras 2 file Keras 3 cannot read

    if not trust_model_code:
        _refuse_code(location)
    model = tf_keras.models.load_model(location, compile=False, safe_mode=not trust_model_code)
    specs = [tf.TensorSpec(s.shape, s.dtype, name=s.name) for s in specs_of(model)]
    path = os.path.join(tempfile.mkdtemp(prefix="edgekit-keras2-"), "saved_model")
    holder = tf.Module()
    holder.model = model

    @tf.function(input_signature=specs)
    def serve(*args):
        out = model(list(args) if len(args) > 1 else args[0], training=False)
        if isinstance(out, dict):
            return {k: out[k] for k in out}
        return {f"output_{i}": o for i, o in enumerate(out)} if isinstance(out, (list, tuple)) else {"output_0": out}

    tf.saved_model.save(holder, path, signatures={SERVING: serve.get_concrete_function()})
    if not trust_model_code:
        check_saved_model(path)  # what the model's layers made TensorFlow do, before any of it runs
    loaded = load_saved_model(path, lambda _msg: None)
    said = (f"Keras: Keras 3 cannot read it ({keras3_error.split('. ')[0]}); loaded with {KERAS2} (Keras 2) and traced "
            "into a SavedModel",)
    say(said[0])
    return model, path, Loaded(loaded.fn, loaded.inputs, loaded.outputs, KERAS2, said)


def _refuse_code(location: str) -> None:
    """Refuse, before tf_keras reads the file, a Lambda layer (Python bytecode) and a TFOpLambda whose TF function
    is not an op builder of tensorflow.python.ops (one that acts when called, as tf.io.gfile.rmtree would while
    the model is rebuilt); the ops the others build are checked in the traced SavedModel."""
    from tensorflow.python.util.tf_export import get_symbol_from_name  # a lookup in TF's API table, nothing called

    config = _keras_config(location)
    for layer in _configs(config) if config is not None else ():
        kind = layer.get("class_name")
        inner = layer.get("config") if isinstance(layer.get("config"), dict) else {}
        name = inner.get("name") or kind
        if kind == "Lambda":
            raise BadInput(f"{location}: layer '{name}' is a Lambda layer, whose Python code Keras 2 would run",
                           fix="pass --trust-model-code if you trust the model's author")
        if kind in ("TFOpLambda", "SlicingOpLambda"):
            symbol = str(inner.get("function") or "")
            module = getattr(get_symbol_from_name(symbol), "__module__", "") or ""
            if not module.startswith("tensorflow.python.ops.") or module.endswith("script_ops"):
                raise BadInput(f"{location}: layer '{name}' calls tf.{symbol} ({module or 'unknown'}), which is not "
                               "a TensorFlow op", fix="pass --trust-model-code if you trust the model's author")
