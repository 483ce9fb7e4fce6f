"""The Python API: the README's example run as written, `edgekit.check` on a config of its own, bad keywords."""

from __future__ import annotations

import ast
import inspect
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import edgekit
from tests.conftest import DIGITS, DIGITS_EVAL, REPO, SAMPLES, run_cli

README = REPO / "README.md"


def python_api_blocks() -> list[str]:
    """The ```python blocks of the README's "Python API" section, in order."""
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Python API\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_readme_calls_the_api_with_keywords_it_takes():
    """Every edgekit.convert/check/bench call the README shows uses keywords the functions have (their `**unknown`
    only refuses)."""
    called = set()
    for block in python_api_blocks():
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "edgekit":
                fn = getattr(edgekit, node.func.attr)
                params = {n for n, p in inspect.signature(fn).parameters.items() if p.kind != p.VAR_KEYWORD}
                assert {k.arg for k in node.keywords} <= params, (node.func.attr, {k.arg for k in node.keywords} - params)
                called.add(node.func.attr)
    assert called == {"convert", "check", "bench"}


@pytest.mark.slow
def test_the_readme_example_runs_as_written(tmp_path):
    """The README's first Python API block, in a fresh interpreter, from a folder holding the samples."""
    (tmp_path / "sample_models").symlink_to(SAMPLES)
    proc = subprocess.run([sys.executable, "-c", python_api_blocks()[0]], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    first, _, rest = proc.stdout.partition("\n")
    target, precision, status, cosine, path = first.split()
    assert (target, precision, status) == ("tflite", "int8", "pass"), first
    assert float(cosine.removeprefix("cosine=")) >= 0.995
    doc = json.loads(rest)
    assert doc["schema"] == "edgekit.convert/1" and doc["source"]["format"] == "torch-export"
    [artifact] = doc["artifacts"]
    assert artifact["path"] == path and artifact["precision"] == "int8"
    assert artifact["verification"]["status"] == "pass" and artifact["verification"]["thresholds"]["cosine"] == 0.995
    assert artifact["calibration"]["samples"] > 0 and "task_accuracy" in artifact["verification"]
    placed = (tmp_path / path).resolve()
    assert placed.is_relative_to(tmp_path / "edgekit-out") and placed.stat().st_size == artifact["bytes"]
    assert sorted(os.listdir(tmp_path)) == ["edgekit-out", "sample_models"]  # nothing written outside out


@pytest.mark.slow
def test_check_returns_the_cases_the_command_line_reports(tmp_path):
    config = tmp_path / "edgekit.toml"
    model = f'path = "{DIGITS}"\neval = "{DIGITS_EVAL}"\ntargets = ["onnx"]\nprecisions = ["fp32"]\n'
    config.write_text(f'[[models]]\nname = "digits"\n{model}\n'
                      f'[[models]]\nname = "digits_tiny"\n{model}\n[models.budgets]\nmax_bytes = 1000\n')
    lines: list[str] = []
    result = edgekit.check(config, out=tmp_path / "out", cache=True, progress=lines.append)
    assert isinstance(result, edgekit.CheckResult)
    assert [c.name for c in result.cases] == ["digits onnx fp32", "digits_tiny onnx fp32"]
    assert [c.name for c in result.passed] == ["digits onnx fp32"] and not result.ok
    [tiny] = result.failed
    assert any(re.fullmatch(r"size \d+ bytes > budget 1000", r) for r in tiny.reasons), tiny.reasons
    assert Path(result.passed[0].path).is_file() and Path(result.passed[0].path).is_relative_to(tmp_path / "out")
    assert any("onnx" in line for line in lines), lines  # the steps reached the callable
    suite = ET.fromstring(result.to_junit())
    assert suite.get("tests") == "2" and suite.get("failures") == "1"
    assert "edgekit check: ❌ 1 failed (2 cases)" in result.to_markdown()
    # The command line on the same config (its cases placed from the cache the call filled): the same document.
    proc = run_cli("check", config, "--json", "-o", tmp_path / "out")
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout) == result.to_json()


@pytest.mark.parametrize("call, says", [
    (lambda: edgekit.convert(DIGITS, "onnx", eval=DIGITS_EVAL), "takes no keyword 'eval' — did you mean eval_data=?"),
    (lambda: edgekit.convert(DIGITS, "onnx", threshold={"cosine": 0.9}), "did you mean thresholds=?"),
    (lambda: edgekit.convert(DIGITS, "onnx", thresholds={"cosin": 0.9}), "unknown metric 'cosin'"),
    (lambda: edgekit.convert(DIGITS, "onnx", int8=True, precision="fp16"), "--int8 contradicts --precision fp16"),
    (lambda: edgekit.convert(DIGITS, "onnx", precision="int4"), "unknown precision 'int4'"),
    (lambda: edgekit.convert(DIGITS, "onnx", calib_samples=10), "need --calib"),
    (lambda: edgekit.convert(DIGITS, "onnx", out=DIGITS), "is a file, not a folder"),
    (lambda: edgekit.check("edgekit.toml", job=2), "takes no keyword 'job' — did you mean jobs=?"),
    (lambda: edgekit.check("edgekit.toml", junit="check.xml"), "write result.to_junit() to a file"),
    (lambda: edgekit.check("edgekit.toml", jobs=0), "jobs=0: at least one worker is needed"),
    (lambda: edgekit.check("edgekit.toml", attribution="some"), "attribution='some'"),
    (lambda: edgekit.check(REPO / "no-such.toml"), "check config not found"),
])
def test_what_cannot_be_used_is_bad_input_before_any_work(call, says, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(edgekit.BadInput) as raised:
        call()
    assert says in str(raised.value)
    assert os.listdir(tmp_path) == []  # refused before anything was written
