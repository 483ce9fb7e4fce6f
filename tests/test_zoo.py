"""A few rows of the zoo (sample_models/zoo.py; `make bench-zoo` runs them all) per backend, at the default int8
recipe (only `--int8 --calib`): real pretrained models from pip wheels that edgekit was not developed on, one
per class of failure they showed — a PReLU after a Linear (MTCNN's R-Net, torch: every torch target), an ONNX
model at opset 11 whose batch is written -1 and whose height and width share one symbol (PP-OCR's text
direction classifier: onnx and ort), a Keras source (fer's mini-Xception: tflite).
"""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from tests.conftest import REPO, run_cli

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    sys.path.insert(0, str(REPO / "sample_models"))
    try:
        spec = importlib.util.spec_from_file_location("zoo", REPO / "sample_models" / "zoo.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["zoo"] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(REPO / "sample_models"))
    return module, tmp_path_factory.mktemp("zoo")


def _int8(zoo, name: str, targets: tuple[str, ...], tmp_path) -> tuple[object, dict]:
    module, work = zoo
    m = module.load(name, work)
    shape = ["--input-shape", m.input_shape] if m.input_shape else []
    proc = run_cli("convert", m.source, *[a for t in targets for a in ("-t", t)], "--int8", "--calib", m.calib,
                   "--eval", m.eval, "-o", tmp_path, "--json", "--no-cache", *shape)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return m, {a["target"]: a for a in json.loads(proc.stdout)["artifacts"]}


def _judged(a: dict, metric: str) -> float:
    """The metric on the output it fits (the first output that reports it)."""
    return next(m[metric] for m in a["verification"]["metrics"].values() if metric in m)


def test_mtcnn_rnet_prelu_after_linear_on_every_torch_target(zoo, tmp_path):
    m, artifacts = _int8(zoo, "mtcnn_rnet", ("tflite", "executorch", "onnx"), tmp_path)
    assert set(artifacts) == {"tflite", "executorch", "onnx"}
    for target, a in artifacts.items():
        v = a["verification"]
        assert v["status"] == "pass", (target, v.get("reasons"))
        assert a["quantization"]["bias_correction"] is True  # the default recipe
        assert v["outputs"]["output_0"]["kind"] == "regression" and v["outputs"]["output_1"]["kind"] == "scores"
        assert _judged(a, "top1_agreement") >= 0.97, target  # face / not face
        assert v["inspection"]["int8_weight_share"] >= 0.8, target
    assert [d["layer"] for d in artifacts["executorch"]["outside_delegate"]] == ["prelu4"]


def test_ppocr_direction_classifier_at_opset_11_on_onnx_and_ort(zoo, tmp_path):
    m, artifacts = _int8(zoo, "ppocr_cls", ("onnx", "ort"), tmp_path)
    for target, a in artifacts.items():
        v = a["verification"]
        assert v["status"] == "pass", (target, v.get("reasons"))
        assert a["opset_upgrade"] == {"from": 11, "to": 13, "why": "per-channel int8 weights need DequantizeLinear's axis"}
        assert _judged(a, "top1_agreement") >= 0.97 and v["metrics"]["output_0"]["cosine"] >= 0.99, target


def test_fer_keras_classifier_on_tflite(zoo, tmp_path):
    m, artifacts = _int8(zoo, "fer_emotion_keras", ("tflite",), tmp_path)
    v = artifacts["tflite"]["verification"]
    assert v["status"] == "pass", v.get("reasons")
    assert artifacts["tflite"]["quantization"]["bias_correction"] is True
    assert v["metrics"]["output_0"]["cosine"] >= 0.99 and v["inspection"]["int8_weight_share"] >= 0.8
