"""A target that runs past its time budget stops with a message naming its step; the run keeps the other targets."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from pathlib import Path

import pytest

from edgekit.engine.deadline import TimeBudgetExceeded, time_budget


def test_the_budget_interrupts_python_work_and_says_the_step():
    step = ["lowering to XNNPACK"]
    started = time.perf_counter()
    with pytest.raises(TimeBudgetExceeded, match=r"tflite: stopped after 0 s, past its time budget of 0.2 s, while "
                                                 r"lowering to XNNPACK") as info:
        with time_budget(0.2, "tflite", step):
            while time.perf_counter() - started < 10:
                sum(range(1000))
    assert time.perf_counter() - started < 2
    assert info.value.exit_code == 3 and "--time-budget" in info.value.fix
    with time_budget(5, "onnx", step):  # work within the budget is untouched, and the timer is gone after it
        time.sleep(0.01)
    time.sleep(0.05)


@pytest.mark.slow
def test_a_target_past_its_budget_stops_with_its_step_named_and_leaves_nothing(tmp_path):
    """torch.export traces the model for 10 minutes; the target's budget is 10 s."""
    out = tmp_path / "out"
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "edgekit", "convert", "tests.models:slow_to_export", "-t", "onnx",
                           "--input-shape", "x=1,16", "--time-budget", "10", "--out", out],
                          capture_output=True, text=True, timeout=300)
    assert time.perf_counter() - started < 120
    assert proc.returncode == 3, proc.stderr
    assert "edgekit: error: onnx: stopped after 1" in proc.stderr, proc.stderr
    assert ("past its time budget of 10 s, while converting torch-python → onnx at fp32 (torch_to_onnx) — fix: give it "
            "more time (--time-budget 40)") in proc.stderr, proc.stderr
    assert not out.exists() or not any(out.iterdir())  # nothing of the stopped target is left


@pytest.mark.slow
def test_a_target_that_fails_leaves_the_other_targets_artifacts(tmp_path):
    """Singular values lower to neither .onnx nor .tflite, and run in the lite interpreter: of three targets the
    .ptl is kept, placed and verified; the command exits 3 with both errors, and its JSON has all three."""
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "edgekit", "convert", "tests.models:unlowerable", "-t", "onnx", "-t", "ptl",
                           "-t", "tflite", "--input-shape", "x=1,8,8", "--out", out, "--json"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 3, proc.stderr
    doc = json.loads(proc.stdout)
    [ptl] = doc["artifacts"]
    assert ptl["target"] == "ptl" and ptl["verification"]["status"] == "pass" and Path(ptl["path"]).is_file()
    assert [(f["target"], f["exit_code"]) for f in doc["failures"]] == [("onnx", 3), ("tflite", 3)]
    assert "edgekit: error: torch_to_onnx: DispatchError" in proc.stderr
    assert "edgekit: error: torch_to_tflite: RuntimeError: Lowering not found: aten._linalg_svd" in proc.stderr
    assert sorted(p.suffix for p in out.iterdir()) == [".ptl"]
