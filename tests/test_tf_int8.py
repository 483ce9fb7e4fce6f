"""TensorFlow/Keras sources at int8 on tflite get the recipe's tools (edgekit.converters.tflite_int8): the default
recipe's choice of calibration, layers kept at int16, and artifacts LiteRT runs in a default app, on small Keras
models built for each class of failure the real ones met."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import KERAS, KERAS_CALIB, KERAS_EVAL, run_cli

pytest.importorskip("tensorflow")


def _artifact(proc) -> dict:
    assert proc.returncode == 0, proc.stderr[-3000:]
    [artifact] = json.loads(proc.stdout)["artifacts"]
    return artifact


def _run_signature(path, feeds: dict) -> dict:
    """The artifact's outputs through its signature, as an app calls it (LiteRT's default op resolver)."""
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_path=str(path)).get_signature_runner()
    return runner(**feeds)


@pytest.mark.slow
def test_a_keras_layer_kept_at_int16_runs_with_int16_activations(tmp_path):
    proc = run_cli("convert", KERAS, "-t", "tflite", "--int8", "--calib", KERAS_CALIB, "--eval", KERAS_EVAL,
                   "--keep", "conv1=int16", "--out", tmp_path / "out", "--json")
    artifact = _artifact(proc)
    assert artifact["verification"]["status"] == "pass", artifact["verification"].get("reasons")
    assert artifact["quantization"]["overrides"] == [{"layer": "conv1", "precision": "int16"}]
    modes = artifact["verification"]["inspection"]["ops_by_mode"]
    assert modes.get("int16", 0) >= 1 and modes.get("int8", 0) >= 1, modes  # conv1 int16, conv2 still int8


@pytest.mark.slow
def test_the_default_recipe_takes_mean_minmax_where_a_loud_sample_spoils_the_extremes(tmp_path):
    """Two calibration samples 40× louder than the rest (a clipped recording, a flash in a photo), past the first
    ones the recipe measures its choice on, set every tensor's extremes: minmax leaves the usual inputs a few
    levels of int8."""
    calib = dict(np.load(KERAS_CALIB))
    [name] = calib
    loud = calib[name].copy()
    loud[[100, 150]] *= 40
    np.savez(tmp_path / "calib.npz", **{name: loud})
    proc = run_cli("convert", KERAS, "-t", "tflite", "--int8", "--calib", tmp_path / "calib.npz", "--eval", KERAS_EVAL,
                   "--out", tmp_path / "out", "--json")
    artifact = _artifact(proc)
    calibration = artifact["calibration"]
    assert calibration["method"] == "mean-minmax", calibration
    tried = {c["method"]: c["sqnr_db"] for c in calibration["candidates"]}
    assert tried["mean-minmax"] >= tried["minmax"] + 1.0, tried
    assert artifact["verification"]["status"] == "pass", artifact["verification"].get("reasons")


@pytest.fixture(scope="module")
def padded_lstm(tmp_path_factory):
    """(.keras: an LSTM over 12 steps of digit rows, the last 4 steps zero padding, as a word embedder pads its
    characters; calibration .npz; eval .npz). Unrolled, each padded step's input projection is zero on every
    sample: a zero range."""
    import keras
    from sklearn.datasets import load_digits

    d = tmp_path_factory.mktemp("padded")
    keras.utils.set_random_seed(0)
    digits = load_digits()
    rows = np.zeros((len(digits.images), 12, 8), np.float32)
    rows[:, :8] = digits.images / 16.0
    x = keras.Input((12, 8), name="rows")
    h = keras.layers.LSTM(32, name="lstm")(x)
    model = keras.Model(x, keras.layers.Dense(10, name="head")(h))
    model.compile("adam", "sparse_categorical_crossentropy")
    model.fit(rows[:512], digits.target[:512], epochs=3, verbose=0)
    model.save(d / "padded.keras")
    np.savez(d / "calib.npz", rows=rows[512:576])
    np.savez(d / "eval.npz", rows=rows[576:608])
    return d / "padded.keras", d / "calib.npz", d / "eval.npz"


@pytest.mark.slow
def test_a_padded_recurrence_converts_to_int8_that_xnnpack_runs(padded_lstm, tmp_path):
    model, calib, evals = padded_lstm
    proc = run_cli("convert", model, "-t", "tflite", "--int8", "--calib", calib, "--eval", evals,
                   "--out", tmp_path / "out", "--json")
    artifact = _artifact(proc)  # XNNPACK failed to prepare it: a zero scale, a float SPLIT output
    assert artifact["verification"]["status"] == "pass", artifact["verification"].get("reasons")
    assert artifact["verification"]["inspection"]["int8_weight_share"] >= 0.9
    [scores] = _run_signature(artifact["path"], {"rows": np.load(evals)["rows"][:1]}).values()
    assert np.isfinite(scores).all() and scores.dtype == np.float32


@pytest.mark.slow
def test_a_signature_output_left_on_an_int8_tensor_moves_to_the_float_output(tmp_path):
    """basic-pitch's contour output also feeds its note head: ai-edge-quantizer dequantizes it once for both and
    leaves the signature's `contour` on the int8 tensor inside the graph, so an app reading the signature got int8
    numbers, or nothing once the I/O was made float. The same happens to this small model's `contour`."""
    import keras
    import tensorflow as tf
    from ai_edge_litert.tools import flatbuffer_utils

    from edgekit.calibration.data import SampleSet
    from edgekit.calibration.tflite_io import float_io
    from edgekit.converters import tflite_int8
    from edgekit.core.signature import Signature, TensorSpec

    keras.utils.set_random_seed(0)
    x = keras.Input((8, 8, 1), name="image")
    features = keras.layers.Flatten()(keras.layers.Conv2D(8, 3, activation="relu", name="conv")(x))
    contour = keras.layers.Dense(16, activation="sigmoid", name="contour")(features)
    notes = keras.layers.Flatten()(keras.layers.Conv1D(4, 3, name="note_conv")(keras.ops.expand_dims(contour, -1)))
    keras.Model(x, {"contour": contour, "notes": keras.layers.Dense(10, name="notes")(notes)}).export(
        tmp_path / "saved", verbose=False)
    float_model = tf.lite.TFLiteConverter.from_saved_model(str(tmp_path / "saved")).convert()
    [images] = np.load(KERAS_CALIB).values()
    samples = SampleSet("digits", {"image": images[:16, None]})
    signature = Signature((TensorSpec("image", (1, 8, 8, 1)),), layout="NHWC")
    quantized = tflite_int8.quantize(float_model, tflite_int8.ranges(
        tflite_int8.statistics(float_model, samples, signature), "minmax"))

    model = flatbuffer_utils.read_model_from_bytearray(bytearray(quantized))
    assert {e.name: e.tensorIndex in model.subgraphs[0].outputs for e in model.signatureDefs[0].outputs} == {
        b"contour": True, b"notes": True}
    (tmp_path / "int8.tflite").write_bytes(float_io(quantized))  # as the converter gives it float I/O
    feeds = {"image": images[:1]}
    outputs = _run_signature(tmp_path / "int8.tflite", feeds)
    assert {k: v.dtype for k, v in outputs.items()} == {"contour": np.float32, "notes": np.float32}
    (tmp_path / "float.tflite").write_bytes(float_model)
    expected = _run_signature(tmp_path / "float.tflite", feeds)["contour"]
    assert np.abs(outputs["contour"] - expected).max() < 0.05  # the sigmoid's values, not int8 codes


def test_a_savedmodels_layers_are_found_by_the_names_the_ranking_gives():
    """A SavedModel that is not a Keras model has its layers named by the part of an op's fused tensor name that
    `edgekit layers` reports ("model_1/cq_t2010v2_1/conv1d_16", basic-pitch's); the search's `--keep` of such a
    name was "no layer named …" on tflite, every ranked layer skipped."""
    from edgekit.converters.tf_to_tflite import _layer_of

    scope = "model_1/cq_t2010v2_1/conv1d_16;model_1/cq_t2010v2_1/conv1d_16/BiasAdd;"
    assert _layer_of(scope, set(), ["model_1/cq_t2010v2_1/conv1d_16"]) == "model_1/cq_t2010v2_1/conv1d_16"
    assert _layer_of("digits/conv1_1/BiasAdd;digits/conv1_1/Conv2D;", {"conv1", "conv2"}, ["conv1"]) == "conv1"
    assert _layer_of("model_1/other/Relu;", set(), ["model_1/cq_t2010v2_1/conv1d_16"]) == "model_1/other/Relu"


@pytest.mark.slow
def test_a_batch_norm_after_its_activation_stays_float(tmp_path):
    """tempocnn's Keras CNN puts each BatchNormalization after its ELU (or a pool), where TFLiteConverter cannot fold
    it into a conv: a MUL and an ADD by per-channel constants, whose int8 output shares one scale over channels the
    norm sets far apart. Those two ops stay float by default, as the ELU before them does, on tflite and on onnx
    (tf2onnx writes the same Mul and Add); the convs stay int8."""
    import keras
    from sklearn.datasets import load_digits

    keras.utils.set_random_seed(0)
    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[..., None]
    x = keras.Input((8, 8, 1), name="image")
    h = x
    for k in (1, 2):
        h = keras.layers.Conv2D(16, 3, padding="same", activation="elu", name=f"conv{k}")(h)
        h = keras.layers.BatchNormalization(name=f"norm{k}")(h)
    model = keras.Model(x, keras.layers.Dense(10, name="head")(keras.layers.GlobalAveragePooling2D()(h)))
    model.compile("adam", "sparse_categorical_crossentropy")
    model.fit(images[:512], digits.target[:512], epochs=3, verbose=0)
    for k in (1, 2):  # channels the norm sets far apart, as a trained one does
        norm = model.get_layer(f"norm{k}")
        gamma, beta, mean, var = norm.get_weights()
        norm.set_weights([gamma * np.geomspace(0.05, 5, 16), beta, mean, var])
    model.save(tmp_path / "norm_after_elu.keras")
    np.savez(tmp_path / "calib.npz", image=images[512:576, None])
    np.savez(tmp_path / "eval.npz", image=images[576:640, None])
    proc = run_cli("convert", tmp_path / "norm_after_elu.keras", "-t", "tflite", "-t", "onnx", "--int8", "--calib",
                   tmp_path / "calib.npz", "--eval", tmp_path / "eval.npz", "--out", tmp_path / "out", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    artifacts = {a["target"]: a for a in json.loads(proc.stdout)["artifacts"]}
    for target, names in {"tflite": ("MUL", "ADD", "CONV_2D"), "onnx": ("Mul", "Add", "Conv")}.items():
        verification = artifacts[target]["verification"]
        assert verification["status"] == "pass", (target, verification.get("reasons"))
        ops = verification["inspection"]["ops"]
        mul, add, conv = names
        assert {(o["type"], o["mode"]) for o in ops if o["type"] in names} == {
            (mul, "float"), (add, "float"), (conv, "int8")}, (target, ops)
