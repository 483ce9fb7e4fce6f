"""`edgekit check`: the CI gate on the example config, broken budgets, and config errors."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from edgekit.check import load_config
from edgekit.errors import BadInput
from tests.conftest import REPO, run_cli

pytestmark = pytest.mark.slow
EXAMPLE = REPO / "edgekit.toml"


def digits_onnx_config(tmp_path, budgets: str):
    """A config checking the digits CNN on onnx at fp32 with the given [models.budgets] lines."""
    config = tmp_path / "edgekit.toml"
    config.write_text(f"""
[[models]]
name = "digits"
path = "{REPO / 'sample_models/digits_cnn.pt2'}"
eval = "{REPO / 'sample_models/digits_eval.npz'}"
targets = ["onnx"]
[models.budgets]
{budgets}
""")
    return config


def test_the_example_config_passes_with_junit_and_markdown(tmp_path):
    junit, summary = tmp_path / "check.xml", tmp_path / "summary.md"
    proc = run_cli("check", EXAMPLE, "--junit", junit, "--markdown", summary, "--json", "-o", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "edgekit.check/1" and doc["failed"] == 0 and doc["passed"] == 4
    suite = ET.parse(junit).getroot()
    assert suite.tag == "testsuite" and suite.get("tests") == "4" and suite.get("failures") == "0"
    assert sorted(c.get("name") for c in suite.iter("testcase")) == ["onnx fp32", "onnx int8", "tflite fp32", "tflite int8"]
    text = summary.read_text()
    assert "edgekit check: ✅ all passed (4 cases)" in text and text.count("| digits_cnn |") == 4


def test_a_broken_size_budget_exits_1_and_is_named(tmp_path):
    config = digits_onnx_config(tmp_path, "max_bytes = 100000\nmax_accuracy_drop = 0.0")
    junit = tmp_path / "check.xml"
    proc = run_cli("check", config, "--junit", junit, "-o", tmp_path / "out")
    assert proc.returncode == 1, proc.stderr
    assert "FAIL digits onnx fp32: size" in proc.stdout and "> budget 100000" in proc.stdout
    failure = ET.parse(junit).getroot().find("testcase/failure")
    assert failure is not None and "> budget 100000" in failure.get("message")


@pytest.mark.parametrize("body, message", [
    ('[[models]]\npath = "m.pt2"\ntargets = ["onnx"]\ncolour = "red"\n', r"unknown key\(s\) \['colour'\]"),
    ('[[models]]\npath = "m.pt2"\ntargets = ["onnx"]\n[models.budgets]\ncosinus = 0.9\n', "unknown budget 'cosinus'"),
    ('[[models]]\npath = "m.pt2"\ntargets = ["onnx"]\nprecisions = ["int4"]\n', r"precisions: unknown \['int4'\]"),
    ('[[models]]\npath = "m.pt2"\ntargets = ["onnx"]\nprecisions = ["int8"]\n', "int8 needs 'calibration'"),
    ('[[models]]\ntargets = ["onnx"]\n', "missing 'path'"),
    ('[[models]]\npath = "m.pt2"\ntargets = ["onnx"]\n[models.budgets]\nmax_bytes = "big"\n', "max_bytes must be a number"),
    ('models = 3\n', r"no \[\[models\]\] listed"),
    ('[[models]\n', "is not valid TOML"),
], ids=["key", "budget", "precision", "calibration", "path", "number", "models", "toml"])
def test_config_errors_name_the_key(tmp_path, body, message):
    config = tmp_path / "edgekit.toml"
    config.write_text(body)
    with pytest.raises(BadInput, match=message):
        load_config(config)


def test_a_config_error_exits_2(tmp_path):
    config = tmp_path / "edgekit.toml"
    config.write_text('[[models]]\npath = "m.pt2"\ntargets = ["onnx"]\ncolour = "red"\n')
    proc = run_cli("check", config)
    assert proc.returncode == 2 and "unknown key(s) ['colour']" in proc.stderr and "Traceback" not in proc.stderr


def test_a_baseline_records_the_run_and_later_runs_report_change(tmp_path):
    config = digits_onnx_config(tmp_path, "cosine = 0.9999")
    first = run_cli("check", config, "--update-baseline", "-o", tmp_path / "out")
    assert first.returncode == 0, first.stderr
    baseline_path = tmp_path / "edgekit.baseline.json"
    baseline = json.loads(baseline_path.read_text())
    entry = baseline["cases"]["digits onnx fp32"]
    assert entry["bytes"] > 100_000 and len(entry["sha256"]["model"]) == 64 and entry["tool_versions"]["onnx"]
    # Pretend the baseline was better, as after a regression.
    entry["metrics"]["cosine"], entry["bytes"] = 1.5, 1000
    baseline_path.write_text(json.dumps(baseline))
    second = run_cli("check", config, "--json", "-o", tmp_path / "out")
    assert second.returncode == 0, second.stderr
    (case,) = json.loads(second.stdout)["cases"]
    assert any(c.startswith("onnx fp32 cosine 1.5 → ") and c.endswith(", budget 0.9999") for c in case["changes"])
    assert any(c.startswith("onnx fp32 bytes 1000 → ") for c in case["changes"])
