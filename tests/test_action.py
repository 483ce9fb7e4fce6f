"""The composite GitHub Action (action.yml): its structure, the README's workflow using it, and the check step's
own script run here as GitHub runs it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from tests.conftest import DIGITS, DIGITS_EVAL, REPO

ACTION = REPO / "action.yml"
INPUT = re.compile(r"\$\{\{\s*inputs\.([\w-]+)\s*\}\}")


def action() -> dict:
    return yaml.safe_load(ACTION.read_text(encoding="utf-8"))


def step(doc: dict, step_id: str) -> dict:
    return next(s for s in doc["runs"]["steps"] if s.get("id") == step_id)


def test_the_action_sets_up_python_installs_edgekit_and_runs_the_check():
    doc = action()
    inputs, steps = doc["inputs"], doc["runs"]["steps"]
    assert doc["runs"]["using"] == "composite"
    assert set(inputs) == {"config", "python-version", "extras", "out", "args"}
    assert inputs["config"]["default"] == "edgekit.toml" and inputs["extras"]["default"] == "all"
    assert inputs["python-version"]["default"] == "3.11" and not any(i.get("required") for i in inputs.values())
    setup, install = steps[0], steps[1]
    assert setup["uses"].startswith("actions/setup-python@")
    assert setup["with"]["python-version"] == "${{ inputs.python-version }}"
    assert 'pip install "${{ github.action_path }}[${EDGEKIT_EXTRAS}]"' in install["run"]
    assert install["env"]["EDGEKIT_EXTRAS"] == "${{ inputs.extras }}"
    check = step(doc, "check")
    assert check is steps[-1] and "edgekit check " in check["run"] and '--junit "${junit}"' in check["run"]
    assert doc["outputs"]["junit"]["value"] == "${{ steps.check.outputs.junit }}"
    assert doc["outputs"]["result"]["value"] == "${{ steps.check.outputs.result }}"
    for s in steps:
        if "run" in s:
            assert s["shell"] == "bash", s  # a composite step must name its shell
            # inputs reach a script through its environment only: pasted in, an input could inject commands
            assert "${{ inputs." not in s["run"], s["run"]
    used = set(INPUT.findall(ACTION.read_text(encoding="utf-8")))
    assert used == set(inputs)  # every input is used, and every input used is declared


def test_the_readme_workflow_uses_the_action_as_declared():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## CI gate\n", 1)[1].split("\n## ", 1)[0]
    workflows = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", section, re.S)]
    steps = [s for w in workflows for job in w["jobs"].values() for s in job["steps"]]
    [uses] = [s for s in steps if re.fullmatch(r"[\w-]+/edgekit@[\w.-]+", s.get("uses", ""))]
    doc = action()
    assert set(uses["with"]) <= set(doc["inputs"])
    for name in re.findall(rf"steps\.{uses['id']}\.outputs\.(\w+)", section):
        assert name in doc["outputs"]


def run_check_step(tmp_path: Path, config: Path, args: str = "", name: str = "run") -> tuple:
    """The action's check step, its inputs substituted as GitHub does, run by bash as GitHub runs a composite
    step's `shell: bash` script; (the process, its outputs as a dict)."""
    check = step(action(), "check")
    values = {"config": str(config), "out": "edgekit-check", "args": args}
    env = {k: INPUT.sub(lambda m: values[m.group(1)], v) for k, v in check["env"].items()}
    assert "${{" not in check["run"]  # nothing left for GitHub to paste into the script
    script, outputs = tmp_path / f"{name}.sh", tmp_path / f"{name}.outputs"
    script.write_text(check["run"], encoding="utf-8")
    proc = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=tmp_path, capture_output=True,
        text=True, timeout=600, stdin=subprocess.DEVNULL,
        env={**os.environ, **env, "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"), "GITHUB_OUTPUT": str(outputs),
             "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"})
    written = outputs.read_text(encoding="utf-8").splitlines() if outputs.exists() else []
    return proc, dict(line.split("=", 1) for line in written)


def digits_config(path: Path, budgets: str = "") -> Path:
    path.write_text(f'[[models]]\nname = "digits"\npath = "{DIGITS}"\neval = "{DIGITS_EVAL}"\n'
                    f'targets = ["onnx"]\nprecisions = ["fp32"]\n{budgets}', encoding="utf-8")
    return path


@pytest.mark.slow
def test_the_check_step_writes_junit_the_summary_and_its_outputs(tmp_path):
    config = digits_config(tmp_path / "edgekit.toml")
    proc, outputs = run_check_step(tmp_path, config, args="--attribution none --jobs 1")
    assert proc.returncode == 0, proc.stderr
    assert "PASS digits onnx fp32" in proc.stdout
    assert outputs == {"junit": "edgekit-check/junit.xml", "result": "pass"}
    suite = ET.parse(tmp_path / outputs["junit"]).getroot()
    assert suite.get("tests") == "1" and suite.get("failures") == "0"
    assert [c.get("name") for c in suite.iter("testcase")] == ["onnx fp32"]
    summary = (tmp_path / "summary.md").read_text(encoding="utf-8")
    assert "edgekit check: ✅ all passed (1 cases)" in summary and "| digits | onnx | fp32 |" in summary
    # A broken budget fails the step, says so in its outputs and adds to the summary.
    small = digits_config(tmp_path / "small.toml", "[models.budgets]\nmax_bytes = 1000\n")
    proc, outputs = run_check_step(tmp_path, small, name="small")
    assert proc.returncode == 1, proc.stderr
    assert outputs["result"] == "fail" and "budget 1000" in (tmp_path / outputs["junit"]).read_text(encoding="utf-8")
    summary = (tmp_path / "summary.md").read_text(encoding="utf-8")
    assert "✅ all passed (1 cases)" in summary and "edgekit check: ❌ 1 failed (1 cases)" in summary


def test_the_check_step_says_error_when_the_check_cannot_run(tmp_path):
    proc, outputs = run_check_step(tmp_path, tmp_path / "missing.toml")
    assert proc.returncode == 2 and "check config not found" in proc.stderr
    assert outputs["result"] == "error"
