"""The MobileNet sample at int8 on tflite, executorch and onnx: small, really int8, accurate, and its damaged
layer found by attribution through its branching blocks. One module, so its one int8 conversion is made once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import damage
from tests.conftest import MOBILENET, MOBILENET_CALIB, MOBILENET_EVAL, convert_sample, run_cli

pytestmark = pytest.mark.slow
COMPACT = ("tflite", "executorch", "onnx")


@pytest.fixture(scope="module")
def mobilenet_int8(tmp_path_factory):
    """The MobileNet sample at int8 on tflite, executorch and onnx (once for the module)."""
    return convert_sample(tmp_path_factory, MOBILENET, MOBILENET_CALIB, MOBILENET_EVAL, "int8", COMPACT)


def by_target(result) -> dict:
    return {r.target: r for r in result.artifacts}


def test_mobilenet_int8_is_small_really_int8_and_accurate(tmp_path_factory, mobilenet_int8):
    fp32 = by_target(convert_sample(tmp_path_factory, MOBILENET, MOBILENET_CALIB, MOBILENET_EVAL, targets=COMPACT))
    int8 = by_target(mobilenet_int8)
    assert set(int8) == set(COMPACT)
    for target, r in int8.items():
        v = r.verdict
        assert fp32[target].verdict.status == "pass"
        assert v.status == "pass", (target, v.reasons)
        assert v.task_accuracy["reference"] > 0.95
        assert abs(v.task_accuracy["artifact"] - v.task_accuracy["reference"]) <= 0.01
        assert v.inspection.int8_weight_share >= 0.9, (target, v.inspection.weight_bytes_by_dtype)
        assert r.artifact.bytes <= 0.4 * fp32[target].artifact.bytes, (target, r.artifact.bytes, fp32[target].artifact.bytes)
    # what the runtimes run: LiteRT every op int8 inside one XNNPACK partition (its SiLU, hardsigmoid and hardswish
    # spelled in ops XNNPACK takes), ONNX Runtime every conv as its int8 kernel (the integer types it fuses)
    tflite = int8["tflite"].verdict.inspection
    assert tflite.float_ops == () and tflite.executed["outside_delegate"] == [], tflite.executed
    assert tflite.executed["delegate_partitions"] == 1
    assert int8["onnx"].verdict.inspection.executed["int8_heavy_op_share"] == 1.0
    # ExecuTorch: one delegate call, nothing outside it; the hardsigmoid gates' add, clamp and div (float-only in
    # its XNNPACK delegate) spelled as int8 add, clamp and mul; hardswish and SiLU's sigmoid stay XNNPACK's float
    pte = int8["executorch"].verdict.inspection.executed
    assert pte["delegate_partitions"] == 1 and pte["outside_delegate"] == [], pte
    floats = {f.split(" ×")[0] for f in pte["float_ops"]}
    assert floats <= {"xnnpack:XNNHardswish", "xnnpack:XNNSigmoid", "xnnpack:XNNMultiply"}, pte["float_ops"]
    # every conv/matmul multiply-accumulate runs int8, and the three readers count the same model's MACs alike
    onnx = int8["onnx"].verdict.inspection.executed
    assert pte["int8_mac_share"] == tflite.executed["int8_mac_share"] == onnx["int8_mac_share"] == 1.0
    assert pte["heavy_macs"] == tflite.executed["heavy_macs"] == onnx["heavy_macs"] > 3_000_000


@pytest.mark.parametrize("target", ["tflite", "onnx"])
def test_attribution_finds_a_damaged_layer_in_a_branching_model(mobilenet_int8, tmp_path, target):
    """MobileNet blocks branch (squeeze-and-excitation gates, residual adds) and fold BatchNorm into
    their convs: the damaged depthwise conv in the middle of block 3 still comes first."""
    (r,) = [r for r in mobilenet_int8.artifacts if r.target == target]
    healthy, layer = Path(r.artifact.path), "features.3.block.1.0"
    perturb = damage.perturb_tflite_weights if target == "tflite" else damage.perturb_onnx_weights
    damaged = perturb(healthy, tmp_path / healthy.name, layer)
    ranked = []
    for path in (healthy, damaged):
        proc = run_cli("layers", path, "--source", MOBILENET, "--eval", MOBILENET_EVAL, "--json")
        assert proc.returncode == 0, proc.stderr
        ranked.append(json.loads(proc.stdout)["layers"])
    assert ranked[0][0]["layer"] != layer and ranked[1][0]["layer"] == layer, (ranked[0][:3], ranked[1][:3])
    assert ranked[1][0]["loss_db"] > ranked[1][1]["loss_db"] + 6  # by a clear margin
