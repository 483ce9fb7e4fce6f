"""Standard error carries edgekit's own lines only (unless --verbose), and progress is timed per step.

The frameworks' noise comes from native code writing to file descriptor 2 (torchao's extension loader,
TensorFlow's and onnxruntime's C++ loggers) as well as from Python warnings and logging, so the command
line runs as a child process here, as a user runs it, and its whole stderr is read.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edgekit.cli.render import OWN_STDERR_LINE, Reporter
from tests.conftest import DIGITS, DIGITS_CALIB, DIGITS_EVAL, run_cli

TIMED = r"\s*\d+\.\d+s .*\(\d+\.\d s\)$"  # a progress line whose step ended: "  12.3s step (4.5 s)"


def not_edgekit(stderr: str) -> list[str]:
    """The lines of `stderr` that edgekit did not write (by render.OWN_STDERR_LINE)."""
    return [line for line in stderr.splitlines() if line.strip() and not OWN_STDERR_LINE.match(line)]


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_long_step_says_it_is_still_running_on_its_line(monkeypatch):
    """In a log (no terminal), a step that runs long appends its seconds so far while it runs, then its time."""
    from edgekit.cli import render

    monkeypatch.setattr(render, "STILL_SECONDS", 0.05)
    out, clock = io.StringIO(), Clock()
    reporter = Reporter(out, style="timed", clock=clock)
    reporter.step("executorch: lowering to XNNPACK")
    clock.now += 31
    time.sleep(0.5)
    reporter.step("executorch: verifying")
    reporter.close()
    time.sleep(0.2)  # a step that ended says nothing more
    first, second = out.getvalue().splitlines()
    assert first.startswith("   0.0s executorch: lowering to XNNPACK … 31 s") and first.endswith(" (31.0 s)"), first
    assert second == "  31.0s executorch: verifying" and not not_edgekit(out.getvalue())


def test_plain_progress_appends_each_steps_seconds_when_it_ends():
    out, clock = io.StringIO(), Clock()
    reporter = Reporter(out, style="timed", clock=clock)
    reporter.step("loading model.pt2")
    clock.now += 2.5
    reporter.step("tflite: converting [1, 1, 8, 8]")  # brackets are text, not rich markup
    clock.now += 12.3
    reporter.step("tflite: pass")
    clock.now += 0.01  # a result, not a step of work: no seconds of its own
    console = reporter.console  # whoever writes through the console ends the step first
    console.print("the table")
    reporter.step("onnx: converting")
    clock.now += 1.0
    reporter.close()
    reporter.close()  # closing twice adds nothing
    assert out.getvalue().splitlines() == [
        "   0.0s loading model.pt2 (2.5 s)",
        "   2.5s tflite: converting [1, 1, 8, 8] (12.3 s)",
        "  14.8s tflite: pass",
        "the table",
        "  14.8s onnx: converting (1.0 s)",
    ]
    assert not_edgekit(out.getvalue()) == ["the table"]


def test_terminal_progress_marks_each_finished_step_with_its_seconds():
    out, clock = io.StringIO(), Clock()
    reporter = Reporter(out, style="live", clock=clock)  # the spinner line itself is transient
    reporter.step("loading model.pt2")
    clock.now += 1.2
    reporter.step("tflite: converting")
    clock.now += 3.0
    reporter.close(ok=False)
    assert out.getvalue().splitlines() == ["✓ loading model.pt2 1.2 s", "✗ tflite: converting 3.0 s"]
    assert not_edgekit(out.getvalue()) == []


def test_verbose_progress_writes_each_line_as_its_step_starts():
    out, clock = io.StringIO(), Clock()
    reporter = Reporter(out, style="lines", clock=clock)
    reporter.step("loading model.pt2")
    assert out.getvalue() == "   0.0s loading model.pt2\n"  # whole at once: library output may follow


def _assert_only_edgekit(proc, code: int = 0) -> None:
    assert proc.returncode == code, proc.stderr
    assert not_edgekit(proc.stderr) == [], proc.stderr


def test_a_native_crash_in_edgekits_process_is_told_while_native_chatter_is_not():
    """Inside a quiet command fd 2 is /dev/null; a segfault must still reach the user, with the stack."""
    code = ("import ctypes, os, sys\n"
            "from edgekit.core.quiet import own_output\n"
            "with own_output(False):\n"
            "    os.write(2, b'native chatter\\n')\n"
            "    print('edgekit: converting', file=sys.stderr)\n"
            "    ctypes.string_at(0)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -11, proc.stderr  # SIGSEGV
    assert "edgekit: converting" in proc.stderr and "native chatter" not in proc.stderr
    assert "Fatal Python error: Segmentation fault" in proc.stderr and 'File "<string>", line 6' in proc.stderr


def test_report_on_every_format_prints_only_edgekits_lines(converted_digits):
    result, _ = converted_digits
    paths = [r.artifact.path for r in result.artifacts]
    assert sorted(Path(p).suffix for p in paths) == [".onnx", ".ort", ".pte", ".ptl", ".tflite"]
    proc = run_cli("report", *paths)
    _assert_only_edgekit(proc)
    assert "edgekit size report" in proc.stdout
    # --verbose lets the frameworks speak; stdout still holds the report alone.
    verbose = run_cli("--verbose", "report", *paths, "--json")
    assert verbose.returncode == 0, verbose.stderr
    doc = json.loads(verbose.stdout)
    assert sorted(a["format"] for a in doc["artifacts"]) == ["onnx", "ort", "pte", "ptl", "tflite"]


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_convert_prints_only_edgekits_lines_with_timed_steps(tmp_path, precision):
    calib = ("--int8", "--calib", DIGITS_CALIB) if precision == "int8" else ()  # int8 imports torchao
    proc = run_cli("convert", DIGITS, "-t", "tflite", "-t", "executorch", "-t", "onnx", *calib,
                   "--eval", DIGITS_EVAL, "-o", tmp_path / "out")
    _assert_only_edgekit(proc)
    progress = proc.stderr.splitlines()
    assert any("converting" in line for line in progress), proc.stderr
    assert any(re.fullmatch(TIMED, line) for line in progress), proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("│ ")]
    assert [r.split("│")[1].strip() for r in rows] == ["tflite", "executorch", "onnx"]
    assert all(r.split("│")[2].strip() == precision for r in rows)


@pytest.mark.slow
def test_convert_verbose_keeps_json_alone_on_stdout(tmp_path):
    proc = run_cli("--verbose", "convert", DIGITS, "-t", "onnx", "--int8", "--calib", DIGITS_CALIB, "--json",
                   "-o", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)  # whatever the libraries printed went to stderr
    assert [(a["target"], a["precision"]) for a in doc["artifacts"]] == [("onnx", "int8")]
    assert "onnx: verifying" in proc.stderr


@pytest.mark.slow
def test_check_prints_only_edgekits_lines_serially_and_in_workers(tmp_path):
    config = tmp_path / "edgekit.toml"
    config.write_text(f'[[models]]\nname = "digits"\npath = "{DIGITS}"\neval = "{DIGITS_EVAL}"\n'
                      f'calibration = "{DIGITS_CALIB}"\ntargets = ["onnx"]\nprecisions = ["fp32", "int8"]\n')
    proc = run_cli("check", config, "-o", tmp_path / "out")
    _assert_only_edgekit(proc)
    assert proc.stdout.count("PASS") == 2, proc.stdout
    # Two worker processes: their progress still reaches stderr, their frameworks' noise does not.
    workers = run_cli("check", config, "--jobs", "2", "--no-cache", "-o", tmp_path / "out")
    _assert_only_edgekit(workers)
    assert "loading" in workers.stderr and workers.stdout.count("PASS") == 2, workers.stderr
