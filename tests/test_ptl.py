"""The legacy PyTorch Mobile target: .ptl at fp32 and int8 (FX, qnnpack), run in the lite interpreter."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

from edgekit.calibration.sources import CalibrationSpec
from edgekit.core.errors import ConversionFailed
from edgekit.engine.graph import Graph
from edgekit.sources.loading import SourceOptions
from edgekit.engine.request import build_request
from edgekit.engine.pipeline import convert
from edgekit.engine.plan import resolve_targets
from edgekit.core.signature import Signature, TensorSpec
from tests.conftest import (DIGITS, DIGITS_CALIB, DIGITS_EVAL, MOBILENET, MOBILENET_CALIB, MOBILENET_EVAL,
                            run_cli)

pytestmark = pytest.mark.slow


def to_ptl(out, model, eval_data, precision="fp32", calib=None):
    calibration = CalibrationSpec(str(calib)) if precision == "int8" else None
    (r,) = convert(build_request(str(model), ("ptl",), str(out), precision=precision, eval_data=str(eval_data),
                                  calibration=calibration)).artifacts
    return r


@pytest.fixture(scope="module")
def digits_ptl(tmp_path_factory):
    out = tmp_path_factory.mktemp("ptl")
    return {p: to_ptl(out, DIGITS, DIGITS_EVAL, p, DIGITS_CALIB) for p in ("fp32", "int8")}


def test_fp32_is_exact_in_the_lite_interpreter(digits_ptl):
    r = digits_ptl["fp32"]
    v, insp = r.verdict, r.verdict.inspection
    assert r.target == "ptl" and r.artifact.format == "ptl" and r.artifact.path.endswith("digits_cnn.ptl")
    assert v.status == "pass", v.reasons
    assert v.metrics["output_0"]["cosine"] >= 0.9999
    assert v.task_accuracy["artifact"] == v.task_accuracy["reference"]
    assert list(r.artifact.meta.route) == ["torch-export", "ptl"]
    assert insp.int8_weight_share == 0 and insp.int8_heavy_op_share == 0 and insp.int8_compute_share == 0
    assert list(insp.weight_bytes_by_dtype) == ["float32"]
    assert "aten::linear ×2" in insp.float_ops


def test_int8_runs_qnnpack_kernels_and_keeps_accuracy(digits_ptl):
    r, fp32 = digits_ptl["int8"], digits_ptl["fp32"]
    v, insp = r.verdict, r.verdict.inspection
    assert v.status == "pass", v.reasons
    assert abs(v.task_accuracy["artifact"] - v.task_accuracy["reference"]) <= 0.01
    assert v.metrics["output_0"]["cosine"] >= 0.99
    assert insp.int8_weight_share >= 0.9, insp.weight_bytes_by_dtype
    assert insp.int8_heavy_op_share == 1.0, insp.float_ops
    assert {"quantized::conv2d_relu", "quantized::linear"} <= set(insp.op_counts)
    assert insp.io_dtypes == {"inputs": ["float32"], "outputs": ["float32"]}
    assert r.artifact.meta.calibration.to_json() == {"source": str(DIGITS_CALIB), "samples": 200, "method": "minmax"}
    assert r.artifact.bytes <= 0.45 * fp32.artifact.bytes


def test_the_runner_keeps_the_deprecation_warning_quiet(digits_ptl):
    from edgekit.targets.ptl.runner import PtlRunner

    x = np.load(DIGITS_EVAL)["x"][:1].reshape(1, 1, 8, 8)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        runner = PtlRunner(digits_ptl["fp32"].artifact.path, Signature((TensorSpec("x", (1, 1, 8, 8)),)))
        (y,) = runner.run({"x": x})
    assert y.shape == (1, 10)
    assert not [w for w in seen if issubclass(w.category, DeprecationWarning)]


def test_ptl_is_legacy_reachable_from_torch_only():
    graph = Graph()
    assert "ptl" in [t.name for t in resolve_targets(("all",), "torch-export", "int8", graph)]
    assert "ptl" not in [t.name for t in resolve_targets(("all",), "torch-export", "fp16", graph)]
    assert "ptl" not in [t.name for t in resolve_targets(("all",), "keras", "fp32", graph)]
    assert [t.name for t in resolve_targets(("ptl",), "torch-export", "fp32", graph)] == ["ptl"]
    proc = run_cli("graph")
    assert proc.returncode == 0, proc.stderr
    assert "ptl [legacy]" in proc.stdout and "torch_to_ptl" in proc.stdout


def test_cli_converts_to_ptl(tmp_path):
    proc = run_cli("convert", DIGITS, "-t", "ptl", "--int8", "--calib", DIGITS_CALIB, "--eval", DIGITS_EVAL,
                   "--json", "-o", tmp_path)
    assert proc.returncode == 0, proc.stderr
    (a,) = json.loads(proc.stdout)["artifacts"]
    assert a["target"] == "ptl" and a["precision"] == "int8" and a["verification"]["status"] == "pass"
    assert (tmp_path / "digits_cnn.int8.ptl").is_file()
    assert "ptl (legacy)" in proc.stderr
    assert "deprecated" not in proc.stderr.lower() and "Traceback" not in proc.stderr


def test_mobilenet_int8(tmp_path):
    # Half of the eval split keeps this test short (the runtimes run one sample at a time).
    with np.load(MOBILENET_EVAL) as data:
        half = {k: data[k][:180] for k in data.files}
    np.savez(tmp_path / "eval-half.npz", **half)
    r = to_ptl(tmp_path / "out", MOBILENET, tmp_path / "eval-half.npz", "int8", MOBILENET_CALIB)
    v, insp = r.verdict, r.verdict.inspection
    assert v.status == "pass", v.reasons
    assert v.task_accuracy["reference"] > 0.95
    assert abs(v.task_accuracy["artifact"] - v.task_accuracy["reference"]) <= 0.01
    assert insp.int8_weight_share >= 0.9, insp.weight_bytes_by_dtype
    assert insp.int8_heavy_op_share == 1.0, insp.float_ops
    assert insp.float_ops == ("aten::silu ×4",)  # qnnpack has no int8 SiLU: the only ops left in float


class Branchy(torch.nn.Module):
    """Data-dependent control flow: torch.export turns it into torch.cond, which FX cannot quantize."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return torch.relu(self.fc(x))
        return self.fc(x)


def test_control_flow_is_fp32_only_with_a_clear_error(tmp_path):
    model = tmp_path / "branchy.pt"
    torch.jit.script(Branchy().eval()).save(str(model))
    options = SourceOptions(input_shapes=("x=1,16",))
    (r,) = convert(build_request(str(model), ("ptl",), str(tmp_path / "fp32"), source_options=options)).artifacts
    assert r.verdict.status == "pass", r.verdict.reasons
    assert r.verdict.inspection.op_counts["aten::linear"] == 2  # both branches are in the file
    with pytest.raises(ConversionFailed, match="FX quantization cannot take control flow") as info:
        convert(build_request(str(model), ("ptl",), str(tmp_path / "int8"), precision="int8", source_options=options,
                               calibration=CalibrationSpec("random")))
    assert info.value.exit_code == 3 and "ptl at fp32" in info.value.fix
