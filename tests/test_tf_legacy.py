"""SavedModels that tf.saved_model.load cannot read, and Keras 2 files Keras 3 cannot read (edgekit.sources.tf_legacy).

The SavedModel class: an optimizer with slot variables in the object graph, which TF's object loader recreates
through `add_slot` on an object it revives as a plain `_UserObject` (a Keras 2 optimizer without tf_keras; here
a tf.compat.v1 Adam saved on a tf.Module, which no installed package revives). Built in the test, small.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from edgekit.core.errors import BadInput
from edgekit.core.signature import TensorSpec
from edgekit.sources import tf_legacy
from edgekit.sources.tf_source import open_tf
from tests.conftest import run_cli

pytest.importorskip("tensorflow")

# Writes a SavedModel whose object graph holds a trained optimizer: two outputs, NHWC input of batch 1.
_WRITE_LEGACY = """
import sys
import numpy as np
import tensorflow as tf

class Net(tf.Module):
    def __init__(self):
        self.kernel = tf.Variable(tf.random.stateless_normal([3, 3, 3, 48], seed=[1, 2]) * 0.3)
        self.w = tf.Variable(tf.random.stateless_normal([48, 40], seed=[3, 4]) * 0.3)
        self.b = tf.Variable(tf.zeros([40]))

    @tf.function(input_signature=[tf.TensorSpec([1, 8, 8, 3], tf.float32, name="image")])
    def serve(self, image):
        h = tf.nn.relu(tf.nn.conv2d(image, self.kernel, 1, "SAME"))
        logits = tf.matmul(tf.reduce_mean(h, axis=[1, 2]), self.w) + self.b
        return {"logits": logits, "features": tf.reduce_mean(h, axis=3)}

net = Net()
optimizer = tf.compat.v1.train.AdamOptimizer(0.01)
with tf.GradientTape() as tape:
    loss = tf.reduce_sum(net.serve(tf.ones([1, 8, 8, 3]))["logits"] ** 2)
variables = [net.kernel, net.w, net.b]
optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))  # Adam's m and v slots now exist
net.optimizer = optimizer
tf.saved_model.save(net, sys.argv[1], signatures={"serving_default": net.serve})
x = np.random.default_rng(0).random((12, 1, 8, 8, 3), dtype=np.float32)
np.savez(sys.argv[2], image=x)
out = [net.serve(tf.constant(s)) for s in x]
np.savez(sys.argv[3], features=np.stack([o["features"].numpy() for o in out]),
         logits=np.stack([o["logits"].numpy() for o in out]))
"""

# The same class through Keras 2 itself (tf_keras, its legacy Adam): TF's loader then needs tf_keras to read it.
_V2_FAILS = """
import sys
import tensorflow as tf
try:
    tf.saved_model.load(sys.argv[1])
except Exception as e:
    print(type(e).__name__, e)
else:
    print("loaded")
"""


@pytest.fixture(scope="module")
def legacy(tmp_path_factory):
    """(SavedModel dir, samples .npz, reference outputs): written in a child process, as another program would."""
    d = tmp_path_factory.mktemp("legacy")
    paths = d / "legacy_savedmodel", d / "samples.npz", d / "reference.npz"
    subprocess.run([sys.executable, "-c", _WRITE_LEGACY, *map(str, paths)], check=True, capture_output=True)
    return paths


def test_tf_saved_model_load_fails_on_the_class(legacy):
    """The class this file is about: TF's own v2 loader fails on it here, on the optimizer's slot variables."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved, _, _ = legacy
    proc = subprocess.run([sys.executable, "-c", _V2_FAILS, str(saved)], capture_output=True, text=True, check=True)
    assert "'_UserObject' object has no attribute 'add_slot'" in proc.stdout
    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((saved / "saved_model.pb").read_bytes())
    nodes = proto.meta_graphs[0].object_graph_def.nodes
    assert {n.slot_variables[0].slot_name for n in nodes if n.slot_variables} == {"m"}


def test_the_signatures_only_loader_reads_it_and_says_so(legacy):
    saved, samples, reference = legacy
    said: list[str] = []
    source = open_tf("tf-savedmodel", str(saved), None, say=said.append)
    assert source.loader == tf_legacy.SIGNATURES
    assert said == [f"SavedModel: tf.saved_model.load failed ('_UserObject' object has no attribute 'add_slot'); "
                    f"loaded with {tf_legacy.SIGNATURES} (serving_default)"]
    assert source.said == tuple(said)
    assert source.signature.describe() == "image=1,8,8,3 (float32)" and source.signature.layout == "NHWC"
    assert [o.shape for o in source.signature.outputs] == [(1, 8, 8), (1, 40)]  # features, logits: sorted keys
    assert source.output_keys == ("features", "logits")
    x, ref = np.load(samples)["image"], np.load(reference)
    for i in range(3):
        features, logits = source.run({"image": x[i]})
        np.testing.assert_allclose(features, ref["features"][i], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(logits, ref["logits"][i], rtol=1e-5, atol=1e-6)


def test_the_v1_session_loader_is_the_last_step(legacy, monkeypatch):
    saved, samples, reference = legacy

    def fails(_location):
        raise RuntimeError("no signatures here")

    monkeypatch.setattr(tf_legacy, "_load_signatures", fails)
    said: list[str] = []
    source = open_tf("tf-savedmodel", str(saved), None, say=said.append)
    assert source.loader == tf_legacy.V1
    assert said == [f"SavedModel: tf.saved_model.load failed ('_UserObject' object has no attribute 'add_slot'); "
                    f"{tf_legacy.SIGNATURES} failed (no signatures here); loaded with TF's v1 loader (serving_default)"]
    x, ref = np.load(samples)["image"], np.load(reference)
    features, logits = source.run({"image": x[4]})
    np.testing.assert_allclose(logits, ref["logits"][4], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(features, ref["features"][4], rtol=1e-5, atol=1e-6)


def test_bad_input_only_when_no_loader_reads_it_naming_each(legacy, monkeypatch):
    saved, _, _ = legacy
    def broken(name):
        def load(_location):
            raise RuntimeError(f"{name} broke")
        return load

    for name in ("_load_signatures", "_load_v1"):
        monkeypatch.setattr(tf_legacy, name, broken(name))
    with pytest.raises(BadInput) as e:
        open_tf("tf-savedmodel", str(saved), None)
    assert e.value.exit_code == 2
    assert str(e.value).startswith(f"{saved} cannot be loaded as a SavedModel: tf.saved_model.load failed "
                                   "('_UserObject' object has no attribute 'add_slot'); "
                                   f"{tf_legacy.SIGNATURES} failed (_load_signatures broke); "
                                   f"{tf_legacy.V1} failed (_load_v1 broke)")


def test_the_safety_check_still_runs_first(legacy, monkeypatch):
    import edgekit.sources.tf_source as tf_source

    saved, _, _ = legacy
    seen = []
    monkeypatch.setattr(tf_source, "check_saved_model", lambda location: seen.append(location))
    def after(*_args):
        raise RuntimeError("after")

    monkeypatch.setattr(tf_legacy, "load_saved_model", after)
    with pytest.raises(RuntimeError, match="after"):
        open_tf("tf-savedmodel", str(saved), None)
    assert seen == [str(saved)]


def _converted(out, *args, said: str | None = None) -> dict:
    """The artifacts `edgekit convert ARGS` made, by (target, precision); `said`: a line its progress must show."""
    proc = run_cli("convert", *args, "--json", "--out", str(out), "--no-cache")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert said is None or said in proc.stderr, proc.stderr[-3000:]
    return {(a["target"], a["precision"]): a for a in json.loads(proc.stdout)["artifacts"]}


FELL_BACK = "SavedModel: tf.saved_model.load failed ('_UserObject' object has no attribute 'add_slot'); loaded with"


@pytest.mark.slow
def test_convert_to_tflite_and_onnx_at_fp32(legacy, tmp_path):
    saved, samples, _ = legacy
    done = _converted(tmp_path / "out", str(saved), "-t", "tflite", "-t", "onnx", "--eval", str(samples), said=FELL_BACK)
    assert set(done) == {("tflite", "fp32"), ("onnx", "fp32")}
    for a in done.values():
        v = a["verification"]
        assert v["status"] == "pass", v
        assert min(m["cosine"] for m in v["metrics"].values()) >= 0.9999
        assert a["route"] == ["tf-savedmodel", a["format"]]


@pytest.mark.slow
def test_convert_to_int8_tflite_with_calibration(legacy, tmp_path):
    saved, samples, _ = legacy
    done = _converted(tmp_path / "out", str(saved), "-t", "tflite", "--int8", "--calib", str(samples))
    a = done[("tflite", "int8")]
    assert a["verification"]["status"] == "pass", a["verification"]
    assert a["verification"]["inspection"]["int8_weight_share"] >= 0.8  # the rest: int32 biases


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp16", "int8-dynamic"])
def test_convert_to_tflite_at_the_other_precisions(legacy, tmp_path, precision):
    saved, samples, _ = legacy
    done = _converted(tmp_path / "out", str(saved), "-t", "tflite", "--precision", precision, "--eval", str(samples))
    v = done[("tflite", precision)]["verification"]
    assert v["status"] == "pass", v


# --- Keras 2 files ---------------------------------------------------------------------------------------------

_WRITE_KERAS2 = """
import sys
import tensorflow as tf
import tf_keras
kind = sys.argv[2]
image = tf_keras.Input((8, 8, 3), name="image")
x = tf_keras.layers.Conv2D(4, 3)(image)
if kind == "tfop":
    x = tf.nn.relu6(x) * 0.5 + 1.0  # TFOpLambda layers: Keras 2 only
else:
    x = tf_keras.layers.Lambda(lambda t: t * 2.0)(x)  # Python bytecode in the file
x = tf_keras.layers.GlobalAveragePooling2D()(x)
tf_keras.Model(image, tf_keras.layers.Dense(5, name="logits")(x)).save(sys.argv[1])
"""


def _keras2_file(tmp_path, kind: str):
    pytest.importorskip("tf_keras")
    path = tmp_path / f"{kind}.h5"
    subprocess.run([sys.executable, "-c", _WRITE_KERAS2, str(path), kind], check=True, capture_output=True)
    return path


def test_a_keras2_h5_keras3_cannot_read_is_read_with_tf_keras(tmp_path):
    import keras

    path = _keras2_file(tmp_path, "tfop")
    with pytest.raises(Exception, match="TFOpLambda"):
        keras.models.load_model(path, compile=False, safe_mode=True)
    said: list[str] = []
    source = open_tf("keras", str(path), None, say=said.append)
    assert source.loader == tf_legacy.KERAS2
    assert said == ["Keras: Keras 3 cannot read it (Unknown layer: 'TFOpLambda'); loaded with tf_keras (Keras 2) and "
                    "traced into a SavedModel"]
    assert source.signature.describe() == "image=1,8,8,3 (float32)"
    assert source.saved_model(tmp_path) != str(path)  # the converters read the traced SavedModel
    x = np.random.default_rng(1).random((1, 8, 8, 3), dtype=np.float32)
    (logits,) = source.run({"image": x})
    assert logits.shape == (1, 5)


def test_a_keras2_lambda_layer_is_refused_without_trust(tmp_path):
    path = _keras2_file(tmp_path, "lambda")
    with pytest.raises(BadInput, match="Lambda"):
        open_tf("keras", str(path), None)


@pytest.mark.slow
def test_convert_a_keras2_h5(tmp_path):
    path = _keras2_file(tmp_path, "tfop")
    done = _converted(tmp_path / "out", str(path), "-t", "tflite", "-t", "onnx",
                      said="Keras: Keras 3 cannot read it (Unknown layer: 'TFOpLambda'); loaded with tf_keras")
    for a in done.values():
        assert a["verification"]["status"] == "pass", a["verification"]


def test_a_keras2_tf_function_that_is_no_op_is_refused(tmp_path):
    """A TFOpLambda may name any TF API function; one that acts when called (not an op builder) is refused."""
    import h5py

    path = _keras2_file(tmp_path, "tfop")
    with h5py.File(path, "r+") as f:
        config = f.attrs["model_config"]
        config = config.decode() if isinstance(config, bytes) else config
        f.attrs["model_config"] = config.replace("nn.relu6", "io.gfile.rmtree")
    with pytest.raises(BadInput, match=r"calls tf.io.gfile.rmtree \(tensorflow.python.lib.io.file_io\), which is not"):
        open_tf("keras", str(path), None)
