"""int8 on real pretrained models from pip packages, with real photos and sentences.

EfficientNet-Lite0 (ReLU6, depthwise convs) on tflite, executorch and onnx; the all-MiniLM-L6-v2
sentence encoder where the raw library calls failed (executorch, onnx); a YOLOv8n detector
shipped as ONNX with dynamic batch/height/width, whose class scores sit beside pixel boxes in
one output. See sample_models/real_models.py for where each comes from.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

from edgekit.calibration.sources import CalibrationSpec
from edgekit.sources.loading import SourceOptions
from edgekit.engine.request import build_request
from edgekit.engine.pipeline import convert, verify_artifacts
from tests.conftest import REPO

pytestmark = pytest.mark.slow


def _real_models():
    spec = importlib.util.spec_from_file_location("real_models", REPO / "sample_models" / "real_models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    return _real_models(), tmp_path_factory.mktemp("real-models")


def _int8(model, targets, out: Path, **options):
    return convert(build_request(str(model.source), tuple(targets), str(out), precision="int8",
                                  eval_data=str(model.eval), calibration=CalibrationSpec(str(model.calib)),
                                  **options))


def _fp32_weight_bytes(pt2: Path) -> int:
    import torch

    program = torch.export.load(str(pt2))
    tensors = {**program.state_dict, **program.constants}
    return sum(t.numel() * 4 for t in tensors.values() if t.is_floating_point())


def test_efficientnet_lite0_int8_on_tflite_and_onnx(real, tmp_path):
    """With bias correction: without it the logits' cosine is 0.9915 on every target (see the README). ExecuTorch
    shares tflite's PT2E bias correction and is measured by `make bench-int8`."""
    module, work = real
    model = module.efficientnet_lite0(work, n_calib=32, n_eval=24)
    result = _int8(model, ("tflite", "onnx"), tmp_path, bias_correction=True)
    fp32_bytes = _fp32_weight_bytes(model.source)
    for r in result.artifacts:
        v, m = r.verdict, r.verdict.metrics["output_0"]
        assert v.status == "pass", (r.target, v.reasons)
        assert m["cosine"] >= 0.995 and m["cosine_min"] >= 0.98, (r.target, m)
        assert m["top1_agreement"] >= 0.9, (r.target, m)
        assert r.artifact.meta.quantization.bias_correction is True
        assert v.inspection.int8_weight_share >= 0.8, (r.target, v.inspection.weight_bytes_by_dtype)
        assert r.artifact.bytes <= 0.35 * fp32_bytes, (r.target, r.artifact.bytes, fp32_bytes)


def test_minilm_encoder_int8_converts_where_the_raw_calls_failed(real, tmp_path):
    """The raw calls stop here: XNNPACKQuantizer turns the integer position ids into floats
    (IndexError), onnxruntime's symbolic shape inference gives up (TypeError). The default recipe smooths
    its linears (SmoothQuant, on where a model has linears reading a LayerNorm): without it the embedding's
    cosine is 0.993-0.994 (see the README)."""
    module, work = real
    model = module.minilm_l6(work, n_calib=40, n_eval=20)
    result = _int8(model, ("executorch", "onnx"), tmp_path)
    for r in result.artifacts:
        v, m = r.verdict, r.verdict.metrics["output_0"]
        assert v.status == "pass", (r.target, v.reasons)
        assert m["cosine"] >= 0.995, (r.target, m)
        assert r.artifact.meta.quantization.smooth_quant is True
        assert v.inspection.int8_weight_share >= 0.8, (r.target, v.inspection.weight_bytes_by_dtype)


def test_detector_scores_survive_int8_and_a_collapsed_quantization_fails(real, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # onnxruntime's own calls below write beside the current folder
    module, work = real
    model = module.detector(work, n_calib=16, n_eval=8)
    options = dict(source_options=SourceOptions(input_shapes=(model.input_shape,)))
    result = _int8(model, ("onnx",), tmp_path / "edgekit", **options)
    verdict = result.artifacts[0].verdict
    assert verdict.status == "pass", verdict.reasons
    assert verdict.metrics["output_0"]["channel_cosine"] >= 0.5

    # What quantize_static does on its own: the output Concat shares one scale between pixel
    # boxes and class scores, so every score becomes 0 or a step of about 1.28.
    from onnxruntime.quantization import QuantFormat, QuantType, quant_pre_process, quantize_static
    from onnxruntime.tools.onnx_model_utils import make_input_shape_fixed
    import onnx

    fixed, pre, raw = tmp_path / "fixed.onnx", tmp_path / "pre.onnx", tmp_path / "detector.int8.onnx"
    proto = onnx.load(str(model.source))
    name, _, dims = model.input_shape.partition("=")
    make_input_shape_fixed(proto.graph, name, [int(d) for d in dims.split(",")])
    onnx.save(proto, str(fixed))
    quant_pre_process(str(fixed), str(pre), skip_symbolic_shape=True)
    calib = np.load(model.calib)[name]

    class Reader:
        def __init__(self):
            self.i = 0

        def get_next(self):
            self.i += 1
            return {name: calib[self.i - 1][None]} if self.i <= len(calib) else None

    quantize_static(str(pre), str(raw), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    request = build_request(str(model.source), ("onnx",), str(tmp_path), eval_data=str(model.eval), **options)
    collapsed = verify_artifacts(request, [str(raw)]).artifacts[0].verdict
    assert collapsed.metrics["output_0"]["cosine"] > 0.99  # the whole-output cosine is fooled by the boxes
    assert collapsed.status == "fail"
    assert any(r.startswith("output_0 channel_cosine") for r in collapsed.reasons), collapsed.reasons


def test_int8_onnx_writes_nothing_outside_out(real, tmp_path):
    """The dynamic-shape detector takes every ONNX fallback; its run leaves the working folder
    and the temporary folder as empty as it found them."""
    module, work = real
    model = module.detector(work, n_calib=16, n_eval=8)
    cwd, tmp = tmp_path / "cwd", tmp_path / "tmp"
    cwd.mkdir()
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "edgekit", "convert", str(model.source), "-t", "onnx", "--int8",
                           "--input-shape", model.input_shape, "--calib", str(model.calib), "--eval",
                           str(model.eval), "--out", "out"], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in cwd.iterdir()) == ["out"]
    assert sorted(p.name for p in (cwd / "out").iterdir()) == [f"{model.source.stem}.int8.onnx"]
    assert list(tmp.iterdir()) == []
