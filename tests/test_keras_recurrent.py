"""Keras recurrent layers reach int8: Keras 3 exports an LSTM or GRU as a TF while loop, on which TFLite's int8
calibrator crashes the whole process and which tf2onnx writes as an ONNX Loop that nothing quantizes; edgekit
exports the model with its recurrences unrolled (edgekit.sources.tf_source.unrolled)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import run_cli

pytest.importorskip("tensorflow")

STEPS, FEATURES = 6, 8
# Unrolled, each step's linears carry their own int32 bias (their input scales differ), and a bias of 4 × hidden
# values per step outweighs the int8 weights, (inputs + hidden) × 4 × hidden, over a long sequence of a small cell:
# short here, so the weights dominate as in a real model's cell.


def _sequences(n: int, seed: int) -> np.ndarray:
    """n sequences of STEPS × FEATURES: sines of random frequency and phase per feature, with noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(STEPS)[None, :, None]
    f, phase = rng.uniform(0.05, 0.4, (n, 1, FEATURES)), rng.uniform(0, 6.3, (n, 1, FEATURES))
    return (np.sin(2 * np.pi * f * t + phase) + rng.normal(0, 0.1, (n, STEPS, FEATURES))).astype(np.float32)


@pytest.fixture(scope="module")
def recurrent(tmp_path_factory):
    """(.keras with an LSTM over the sequence, then a GRU, then a Dense head, trained for a few steps to tell a
    sequence's mean frequency; calibration .npz; eval .npz)."""
    import keras

    d = tmp_path_factory.mktemp("recurrent")
    keras.utils.set_random_seed(0)
    x = keras.Input((STEPS, FEATURES), name="sequence")
    h = keras.layers.LSTM(96, return_sequences=True, name="lstm")(x)
    h = keras.layers.GRU(64, name="gru")(h)
    model = keras.Model(x, keras.layers.Dense(4, name="head")(h))
    train = _sequences(256, 1)
    labels = np.clip((np.abs(np.fft.rfft(train, axis=1)).argmax(1).mean(1) / 2).astype(int), 0, 3)
    model.compile("adam", "sparse_categorical_crossentropy")
    model.fit(train, labels, epochs=3, verbose=0)
    model.save(d / "recurrent.keras")
    np.savez(d / "calib.npz", sequence=_sequences(64, 2))
    np.savez(d / "eval.npz", sequence=_sequences(32, 3))
    return d / "recurrent.keras", d / "calib.npz", d / "eval.npz"


@pytest.mark.slow
def test_a_keras_lstm_and_gru_convert_to_int8_tflite_and_onnx(recurrent, tmp_path):
    model, calib, evals = recurrent
    proc = run_cli("convert", model, "-t", "tflite", "-t", "onnx", "--int8", "--calib", calib, "--eval", evals,
                   "--json", "--no-cache", "--out", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr[-3000:]  # it was -11, the calibrator's segmentation fault
    done = {a["target"]: a for a in json.loads(proc.stdout)["artifacts"]}
    for target in ("tflite", "onnx"):
        v = done[target]["verification"]
        assert v["status"] == "pass", (target, v.get("reasons"))
        assert v["inspection"]["int8_weight_share"] >= 0.5, target  # the Loop kept every recurrent weight float
        ops = " ".join(v["inspection"]["op_counts"])
        assert "WHILE" not in ops and "Loop" not in ops, (target, ops)
