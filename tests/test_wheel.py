"""The wheel as a user gets it: built from a copy of the sources (nothing is written into the checkout),
installed into a fresh virtual environment, run from there.

It installs the base dependencies only: `pip install 'edgekit[all]'` brings torch, TensorFlow, ExecuTorch,
LiteRT and onnxruntime (4.0 GB), which took 3 min 29 s here from the local package index, against about 35 s
for this whole test; `make wheel-check` installs the wheel with `[all]` and checks that every converter is
then available.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.conftest import DIGITS, REPO

# The folders the wheel is built from: pyproject.toml's package-dir (edgekit/, converters/, calibration/, targets/).
PACKAGE_FOLDERS = tuple(dict.fromkeys(
    tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].values()))

pytestmark = pytest.mark.slow


def run(*args, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # nothing but the venv's own packages
    return subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, env=env)


def test_the_wheel_installs_in_a_fresh_venv_and_names_the_missing_extras(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for folder in PACKAGE_FOLDERS:
        shutil.copytree(REPO / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    built = run(sys.executable, "-m", "build", "--wheel", "--outdir", tmp_path / "dist", src, cwd=tmp_path)
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    [wheel] = (tmp_path / "dist").glob("edgekit-*-py3-none-any.whl")

    # Every module of every subpackage, and the command.
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = sorted(f"edgekit/{p.relative_to(src).as_posix()}" if folder != "edgekit" else p.relative_to(src).as_posix()
                     for folder in PACKAGE_FOLDERS for p in (src / folder).rglob("*.py"))
    assert len(modules) > 50 and [m for m in modules if m not in names] == []
    [entry_points] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    assert "edgekit = edgekit.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()

    venv = tmp_path / "venv"
    assert run(sys.executable, "-m", "venv", venv, cwd=tmp_path).returncode == 0
    installed = run(venv / "bin" / "python", "-m", "pip", "install", "--quiet", wheel, cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr[-4000:]
    where = run(venv / "bin" / "python", "-c", "import edgekit; print(edgekit.__file__)", cwd=tmp_path)
    assert Path(where.stdout.strip()).is_relative_to(venv), where  # the wheel's copy, not the checkout

    edgekit = venv / "bin" / "edgekit"
    helped = run(edgekit, "--help", cwd=tmp_path)
    assert helped.returncode == 0, helped.stderr
    assert all(command in helped.stdout for command in ("convert", "check", "report", "graph"))
    graph = run(edgekit, "graph", cwd=tmp_path)
    assert graph.returncode == 0, graph.stderr
    assert "pip install 'edgekit[tflite]'" in graph.stdout and "pip install 'edgekit[onnx]'" in graph.stdout
    edges = json.loads(run(edgekit, "graph", "--json", cwd=tmp_path).stdout)["edges"]
    assert len(edges) >= 8 and not any(e["available"] for e in edges)  # no framework came with the base install
    converted = run(edgekit, "convert", DIGITS, "-t", "onnx", "-o", tmp_path / "out", cwd=tmp_path)
    assert converted.returncode == 4 and "pip install 'edgekit[onnx]'" in converted.stderr, converted.stderr
