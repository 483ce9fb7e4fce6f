from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_models"
DIGITS = SAMPLES / "digits_cnn.pt2"
DIGITS_EVAL = SAMPLES / "digits_eval.npz"
DIGITS_CALIB = SAMPLES / "digits_calib.npz"


def run_cli(*args: str, cwd: Path = REPO, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run the real `edgekit` command line in a child process, as a user would."""
    return subprocess.run([sys.executable, "-m", "edgekit", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="session")
def converted_digits(tmp_path_factory):
    """The bundled digits CNN converted to every target and verified on its eval split (once per run)."""
    from edgekit.pipeline import ConvertRequest, convert

    out = tmp_path_factory.mktemp("digits")
    result = convert(ConvertRequest(str(DIGITS), ("all",), str(out), eval_data=str(DIGITS_EVAL)))
    return result, out
