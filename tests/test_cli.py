"""The command line as a user meets it: exit codes, one-line errors, JSON on stdout only."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import DIGITS, DIGITS_EVAL, REPO, run_cli

HEAVY = ("torch", "tensorflow", "executorch", "litert_torch", "ai_edge_litert", "onnxruntime", "onnx", "jax", "keras")


def _heavy_modules_after(code: str) -> list[str]:
    probe = (
        "import sys, json\n"
        f"{code}\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_import_and_help_load_no_framework():
    assert _heavy_modules_after("import edgekit") == []
    help_run = ("from edgekit.cli import app\n"
                "try:\n    app(['--help'], prog_name='edgekit')\nexcept SystemExit as e:\n    assert e.code == 0\n"
                "try:\n    app(['convert', '--help'], prog_name='edgekit')\nexcept SystemExit as e:\n    assert e.code == 0")
    assert _heavy_modules_after(help_run) == []


def test_graph_lists_edges_with_availability():
    proc = run_cli("graph", "--json")
    assert proc.returncode == 0, proc.stderr
    edges = {e["name"]: e for e in json.loads(proc.stdout)["edges"]}
    assert {(e["source"], e["target"]) for e in edges.values()} >= {("torch", "tflite"), ("torch", "pte"), ("torch", "onnx")}
    assert all(e["available"] for e in edges.values())
    human = run_cli("graph")
    assert "torch_to_tflite" in human.stdout and "LiteRT interpreter" in human.stdout


@pytest.mark.slow
def test_json_contract_on_stdout_and_nothing_else(tmp_path):
    proc = run_cli("convert", DIGITS, "--target", "all", "--eval", DIGITS_EVAL, "--json", "--out", tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)  # the whole of stdout is one JSON document
    assert doc["schema"] == "edgekit.convert/1"
    assert doc["source"]["format"] == "torch-export" and len(doc["source"]["sha256"]) == 64
    assert [a["target"] for a in doc["artifacts"]] == ["tflite", "executorch", "ptl", "onnx", "ort"]
    for a in doc["artifacts"]:
        assert set(a) >= {"target", "precision", "format", "path", "bytes", "sha256", "route", "tool_versions",
                          "seconds", "verification"}
        v = a["verification"]
        assert v["status"] == "pass" and v["samples"] == 360
        assert v["metrics"]["output_0"]["cosine"] >= 0.9999
        assert set(v["metrics"]["output_0"]) >= {"max_abs", "mean_abs", "rmse", "cosine", "sqnr_db", "top1_agreement"}
        assert v["thresholds"] == {"cosine": 0.9999, "cosine_min": 0.999, "channel_cosine": 0.999}
        assert abs(v["task_accuracy"]["artifact"] - v["task_accuracy"]["reference"]) <= 0.005
    # Human output and progress went to stderr.
    assert "verifying in LiteRT interpreter" in proc.stderr and "pass" in proc.stderr


@pytest.mark.slow
def test_human_output_shows_size_verdict_and_metrics(tmp_path):
    proc = run_cli("convert", DIGITS, "-t", "onnx", "--eval", DIGITS_EVAL, "-o", tmp_path)
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if line.startswith("│ onnx"))
    cells = [c.strip() for c in row.strip("│").split("│")]
    assert cells[1] == "fp32" and cells[2].endswith("KiB") and cells[3] == "pass"
    assert float(cells[4]) >= 0.9999


def _assert_one_line_error(proc, code: int, message: str, out_dir=None):
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("edgekit: error:")]
    assert len(errors) == 1 and message in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
    if out_dir is not None:
        assert not out_dir.exists() or list(out_dir.iterdir()) == []


def test_bad_inputs_get_one_clear_line_and_exit_2(tmp_path):
    out = tmp_path / "out"
    empty = tmp_path / "empty.pt2"
    empty.write_bytes(b"")
    truncated = tmp_path / "truncated.pt2"
    truncated.write_bytes(DIGITS.read_bytes()[:50_000])
    text = tmp_path / "model.pt"
    text.write_text("hello\n")
    cases = [
        ((tmp_path / "missing.pt2",), "model not found"),
        ((empty,), "is empty (0 bytes)"),
        ((truncated,), "damaged or truncated zip archive"),
        ((text,), "is not a PyTorch model: its content is text"),
        ((DIGITS, "--target", "coreml"), "unknown target 'coreml' — fix: use one of: tflite, executorch (alias pte), ptl, onnx, ort, or all"),
        ((DIGITS, "--target", "tflite", "--input-shape", "x=1,3,32,32"), "does not fit the model: it takes x=1,1,8,8"),
    ]
    for args, message in cases:
        extra = () if "--target" in args else ("--target", "tflite")
        _assert_one_line_error(run_cli("convert", *args, *extra, "--out", out), 2, message, out)


def test_pickled_module_without_trust_is_refused_and_never_run(tmp_path):
    marker = tmp_path / "created-by-pickle"
    evil = tmp_path / "model.pt"
    code = (f"import pickle\nclass P:\n    def __reduce__(self):\n        return (open, ({str(marker)!r}, 'w'))\n"
            f"open({str(evil)!r}, 'wb').write(pickle.dumps(P(), protocol=2))")
    subprocess.run([sys.executable, "-c", code], check=True)
    proc = run_cli("convert", evil, "--target", "onnx", "--input-shape", "x=1,16", "--out", tmp_path / "out")
    _assert_one_line_error(proc, 2, "pickled Python object, and unpickling it could run arbitrary code; refused",
                           tmp_path / "out")
    assert "--trust-pickle" in proc.stderr
    assert not marker.exists()


def test_debug_shows_the_traceback(tmp_path):
    proc = run_cli("--debug", "convert", tmp_path / "missing.pt2", "-t", "tflite")
    assert proc.returncode == 2 and "Traceback" in proc.stderr


def test_debug_and_verbose_work_after_the_command_too(tmp_path):
    proc = run_cli("convert", tmp_path / "missing.pt2", "-t", "tflite", "--debug")
    assert proc.returncode == 2 and "Traceback" in proc.stderr and "No such option" not in proc.stderr
    proc = run_cli("inspect", tmp_path / "missing.tflite", "--verbose")
    assert proc.returncode == 2 and "missing.tflite" in proc.stderr and "No such option" not in proc.stderr


@pytest.mark.slow
def test_conversion_failure_exits_3(tmp_path):
    proc = run_cli("convert", "tests.models:unlowerable", "-t", "tflite", "--input-shape", "x=1,8,8", "-o", tmp_path / "o")
    _assert_one_line_error(proc, 3, "torch_to_tflite: RuntimeError: Lowering not found: aten._linalg_svd", tmp_path / "o")


def test_missing_dependency_exits_4(tmp_path):
    """A machine without litert-torch: simulated by making the module unimportable in the child."""
    code = ("import sys\nsys.modules['litert_torch'] = None\nfrom edgekit.cli import app\n"
            f"app(['convert', {str(DIGITS)!r}, '-t', 'tflite', '-o', {str(tmp_path / 'o')!r}], prog_name='edgekit')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    _assert_one_line_error(proc, 4, "needs the 'tflite' extra (missing: litert_torch) — fix: pip install 'edgekit[tflite]'",
                           tmp_path / "o")


def test_python_m_edgekit_works():
    proc = run_cli("--help")
    assert proc.returncode == 0 and "convert" in proc.stdout and "graph" in proc.stdout
