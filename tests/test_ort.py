"""onnx → ort: ONNX Runtime's mobile format, proven in ONNX Runtime against the torch model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgekit.core import io_params
from edgekit.calibration.sources import CalibrationSpec
from edgekit.core.formats import detect
from edgekit.engine.graph import Graph
from edgekit.engine.request import build_request
from edgekit.engine.pipeline import convert
from tests.conftest import DIGITS, DIGITS_CALIB, DIGITS_EVAL, run_cli

pytestmark = pytest.mark.slow

EP_KEYS = {"suitability", "partitions", "supported_nodes", "nodes", "unsupported_ops"}


def _convert(tmp_path_factory, precision: str):
    out = tmp_path_factory.mktemp(f"ort-{precision}")
    calibration = CalibrationSpec(str(DIGITS_CALIB)) if precision == "int8" else None
    (r,) = convert(build_request(str(DIGITS), ("ort",), str(out), precision=precision, eval_data=str(DIGITS_EVAL),
                                  calibration=calibration)).artifacts
    return r


@pytest.fixture(scope="module")
def fp32(tmp_path_factory):
    return _convert(tmp_path_factory, "fp32")


@pytest.fixture(scope="module")
def int8(tmp_path_factory):
    return _convert(tmp_path_factory, "int8")


def _config_ops(r) -> set[str]:
    """The op names listed in the required-operators config beside the .ort."""
    ort_path = Path(r.artifact.path)
    config = ort_path.with_name(ort_path.name.removesuffix(".ort") + ".required_operators.config")
    assert config.is_file() and str(config) in r.artifact.files
    lines = [ln for ln in config.read_text().splitlines() if ln and not ln.startswith("#")]
    assert f"# - {ort_path.name}" in config.read_text()  # names the .ort beside it, not a temporary path
    return {op for ln in lines for op in ln.split(";")[2].split(",")}


def _check_mobile_package(mobile: dict) -> None:
    assert mobile["fits"] is True and mobile["unsupported_ops"] == []
    assert mobile["package"].startswith("onnxruntime-android") and mobile["ops"] > 0
    for ep in ("nnapi", "coreml_mlprogram", "coreml_neuralnetwork"):
        assert EP_KEYS <= set(mobile[ep]), (ep, mobile[ep])
        assert mobile[ep]["suitability"] in ("YES", "MAYBE", "NO")
    assert isinstance(mobile["try_nnapi_or_coreml"], bool)


def test_planned_through_onnx_keeping_the_precision():
    graph = Graph()
    assert graph.route("torch-export", "ort").formats == ["torch-export", "onnx", "ort"]
    plan = graph.route("torch-export", "ort", "int8")
    assert [(s.converter.name, s.precision) for s in plan.steps] == [
        ("torch_to_onnx", "fp32"), ("onnx_quantize", "int8"), ("onnx_to_ort", "int8")]


def test_fp32_ort_matches_torch(fp32):
    r, v = fp32, fp32.verdict
    assert v.status == "pass", v.reasons
    assert v.metrics["output_0"]["cosine"] >= 0.9999
    assert abs(v.task_accuracy["artifact"] - v.task_accuracy["reference"]) <= 0.001
    assert list(r.artifact.meta.route) == ["torch-export", "onnx", "ort"]  # the fp32 .onnx had external data
    assert r.artifact.files[0] == r.artifact.path and detect(r.artifact.path) == "ort"
    assert r.artifact.meta.ort_format["optimization_style"] == "Fixed"
    assert {"Conv", "FusedConv"} & _config_ops(r)  # Fixed style: Conv+Relu already fused
    _check_mobile_package(r.artifact.meta.mobile_package)
    assert r.artifact.meta.mobile_package["nnapi"]["suitability"] == "YES"  # plain float CNN
    insp = v.inspection
    assert insp.format == "ort" and insp.int8_weight_share == 0.0 and insp.compute_ops > 0


def test_int8_ort_is_int8_and_keeps_accuracy(int8, fp32):
    r, v = int8, int8.verdict
    assert v.status == "pass", v.reasons
    assert r.artifact.precision == "int8"
    assert list(r.artifact.meta.route) == ["torch-export", "onnx", "onnx", "ort"]
    assert abs(v.task_accuracy["artifact"] - v.task_accuracy["reference"]) <= 0.01
    assert v.metrics["output_0"]["cosine"] >= 0.99
    insp = v.inspection
    assert insp.int8_weight_share >= 0.9, insp.weight_bytes_by_dtype
    assert insp.int8_heavy_op_share == 1.0, insp.float_ops
    assert insp.io_dtypes == {"inputs": ["float32"], "outputs": ["float32"]}
    assert "QLinearConv" in _config_ops(r)  # QDQ groups fused ahead of time
    assert r.artifact.bytes <= 0.4 * fp32.artifact.bytes
    _check_mobile_package(r.artifact.meta.mobile_package)


def test_int8_io_ort_from_the_cli_json(tmp_path):
    proc = run_cli("convert", DIGITS, "-t", "ort", "--int8", "--int8-io", "--calib", DIGITS_CALIB,
                   "--eval", DIGITS_EVAL, "--json", "-o", tmp_path)
    assert proc.returncode == 0, proc.stderr
    (a,) = json.loads(proc.stdout)["artifacts"]
    assert a["target"] == "ort" and a["format"] == "ort" and a["files"][0].endswith(".int8.ort")
    v = a["verification"]
    assert v["status"] == "pass", v
    io = a["int8_types"]["activations"]  # the type edgekit chose for this CPU (edgekit.converters.onnx_int8_types)
    assert io in ("uint8", "int8") and v["inspection"]["io_dtypes"] == {"inputs": [io], "outputs": [io]}
    assert abs(v["task_accuracy"]["artifact"] - v["task_accuracy"]["reference"]) <= 0.01
    _check_mobile_package(a["mobile_package"])
    assert str(io_params.sidecar(a["path"])) in a["files"]
    (x,) = io_params.read(a["path"])["inputs"]
    assert x["name"] == "x" and x["dtype"] == io and 0 < x["scale"] < 0.01
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(Path(f).name for f in a["files"])


def test_onnx_and_ort_at_int8_share_one_export_and_one_calibration(tmp_path):
    """`--target onnx --target ort --int8`: torch → onnx and the ONNX calibration run once, for both: the default
    recipe's two candidates (minmax, mean-minmax) are quantized once each, for onnx, and the ort target reuses them."""
    proc = run_cli("convert", DIGITS, "-t", "onnx", "-t", "ort", "--int8", "--calib", DIGITS_CALIB, "--eval", DIGITS_EVAL,
                   "-o", tmp_path / "out", "--json", "--no-cache")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("converting torch-export → onnx at fp32") == 1, proc.stderr
    assert proc.stderr.count("converting onnx → onnx at int8 (onnx_quantize") == 2, proc.stderr
    for method in ("minmax", "mean-minmax"):
        assert f"onnx: converting onnx → onnx at int8 (onnx_quantize, {method} calibration" in proc.stderr
    assert "ort: reusing the int8 onnx model built for onnx (onnx_quantize)" in proc.stderr
    onnx, ort = json.loads(proc.stdout)["artifacts"]
    assert "reused" not in onnx
    assert ort["route"] == ["torch-export", "onnx", "onnx", "ort"]
    assert [(r["converter"], r["precision"], r["built_for"]) for r in ort["reused"]] == [
        ("torch_to_onnx", "fp32", "onnx"), ("onnx_quantize", "int8", "onnx")]
    assert ort["verification"]["status"] == "pass"


def test_the_cpu_an_ort_is_laid_out_for_is_a_named_choice_and_bench_says_which_it_timed(fp32, tmp_path):
    """`--ort-platform arm` (the default, for phones) or `x86`: recorded in the JSON and inside the .ort, where
    `inspect` reads it, and `bench` warns when it times a file laid out for the other kind of CPU than the
    host's (an ARM file's fp32 runs without the x86 layout here: its ratio to int8 is not a phone's)."""
    from edgekit.core.cpu import cpu_kind
    from edgekit.targets.ort.inspect import laid_out_for

    assert fp32.artifact.meta.ort_format["target_platform"] == "arm" and laid_out_for(fp32.artifact.path) == "arm"
    proc = run_cli("convert", DIGITS, "-t", "ort", "--ort-platform", "x86", "--eval", DIGITS_EVAL,
                   "-o", tmp_path / "x86", "--json", "--no-cache")
    assert proc.returncode == 0, proc.stderr[-2000:]
    [x86] = json.loads(proc.stdout)["artifacts"]
    assert x86["verification"]["status"] == "pass" and laid_out_for(x86["path"]) == "x86"
    assert any(n.startswith("laid out for x86 CPUs") for n in x86["verification"]["inspection"]["notes"])
    for path, made_for in ((fp32.artifact.path, "arm"), (x86["path"], "x86")):
        timed = run_cli("bench", path, "--threads", "1", "--min-seconds", "0.05", "--json")
        assert timed.returncode == 0, timed.stderr[-2000:]
        warned = [w for w in json.loads(timed.stdout)["warnings"] if f"is laid out for {made_for} CPUs" in w]
        assert bool(warned) == (cpu_kind() not in (None, made_for)), (made_for, warned)
    bad = run_cli("convert", DIGITS, "-t", "ort", "--ort-platform", "mips", "-o", tmp_path / "bad")
    assert bad.returncode == 2 and "unknown --ort-platform 'mips'" in bad.stderr and "arm, x86" in bad.stderr


def test_check_says_when_an_int8_speedup_was_timed_on_an_ort_laid_out_for_another_cpu(tmp_path):
    """A `min_int8_speedup` budget met by an ARM-laid-out .ort on an x86 host (whose fp32 runs there without the
    x86 layout) passes with a note saying so, in the JSON and on the console."""
    from edgekit.core.cpu import cpu_kind

    config = tmp_path / "edgekit.toml"
    config.write_text(f'[[models]]\nname = "digits"\npath = "{DIGITS}"\ncalibration = "{DIGITS_CALIB}"\n'
                      f'eval = "{DIGITS_EVAL}"\ntargets = ["ort"]\nprecisions = ["fp32", "int8"]\n'
                      '[models.budgets.int8]\nmin_int8_speedup = 0.01\n')
    proc = run_cli("check", config, "-o", tmp_path / "out", "--json", "--attribution", "none")
    assert proc.returncode == 0, proc.stderr[-2000:]
    cases = {c["precision"]: c for c in json.loads(proc.stdout)["cases"]}
    warnings = cases["int8"]["latency"]["warnings"]
    laid_out = [w for w in warnings if "is laid out for arm CPUs" in w]
    assert bool(laid_out) == (cpu_kind() == "x86"), warnings
    for w in laid_out:
        assert f"note: {w}" in proc.stderr
