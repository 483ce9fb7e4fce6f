from __future__ import annotations

import collections
import subprocess
import sys
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_models"
DIGITS = SAMPLES / "digits_cnn.pt2"
DIGITS_EVAL = SAMPLES / "digits_eval.npz"
DIGITS_CALIB = SAMPLES / "digits_calib.npz"


# The modules that take longest in all, started first: `make test` hands whole modules to its two processes in
# this order (--no-loadscope-reorder), and a long module handed out last is the run's tail. The summary at the end
# of a run (`pytest_terminal_summary`) gives each module's seconds.
FIRST = ("test_lm.py", "test_real_models.py", "test_pte_recurrent.py", "test_failure_classes.py", "test_bench.py",
         "test_search.py", "test_mobilenet.py", "test_check.py", "test_quantize.py", "test_zoo.py")
_SECONDS: collections.Counter = collections.Counter()


def pytest_collection_modifyitems(items):
    """The modules of FIRST first, in that order; the rest, and every module's own tests, as collected."""
    rank = {name: i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(Path(item.nodeid.split("::")[0]).name, len(FIRST)))


def pytest_runtest_logreport(report):
    _SECONDS[report.nodeid.split("::")[0]] += report.duration


def pytest_terminal_summary(terminalreporter):
    """Each module's seconds (setup, call and teardown of its tests, summed), the slowest 15."""
    if _SECONDS:
        terminalreporter.write_sep("=", "slowest modules (their tests' seconds, summed)")
        for module, seconds in _SECONDS.most_common(15):
            terminalreporter.write_line(f"{seconds:8.1f}s {module}")


@pytest.fixture(autouse=True)
def own_artifact_cache(tmp_path_factory, monkeypatch):
    """Every test starts with an empty artifact cache of its own, beside its tmp_path (the command lines
    it runs inherit it)."""
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path_factory.mktemp("edgekit-cache")))


def run_cli(*args: str, cwd: Path = REPO, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run the real `edgekit` command line in a child process, as a user would."""
    return subprocess.run([sys.executable, "-m", "edgekit", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="session")
def converted_digits(tmp_path_factory):
    """The bundled digits CNN converted to every target and verified on its eval split (once per run)."""
    from edgekit.engine.request import build_request
    from edgekit.engine.pipeline import convert

    out = tmp_path_factory.mktemp("digits")
    result = convert(build_request(str(DIGITS), ("all",), str(out), eval_data=str(DIGITS_EVAL)))
    return result, out

MOBILENET = SAMPLES / "digits_mobilenet.pt2"
MOBILENET_CALIB = SAMPLES / "digits32_calib.npz"
MOBILENET_EVAL = SAMPLES / "digits32_eval.npz"


def convert_sample(tmp_path_factory, model, calib, eval_data, precision="fp32", targets=("all",), **options):
    """Convert a bundled sample model to `targets` at `precision`, verified on its eval split."""
    from edgekit.calibration.sources import CalibrationSpec
    from edgekit.engine.request import build_request
    from edgekit.engine.pipeline import convert

    out = tmp_path_factory.mktemp(f"{model.stem}-{precision}")
    calibration = CalibrationSpec(str(calib)) if precision == "int8" else None
    request = build_request(str(model), tuple(targets), str(out), precision=precision, eval_data=str(eval_data),
                             calibration=calibration, **options)
    return convert(request)


@pytest.fixture(scope="session")
def digits_int8_auto(tmp_path_factory):
    """The digits CNN at int8 on every target, each backend trying all its calibration methods."""
    return convert_sample(tmp_path_factory, DIGITS, DIGITS_CALIB, DIGITS_EVAL, "int8", calib_method="auto")

KERAS = SAMPLES / "digits_keras.keras"
KERAS_CALIB = SAMPLES / "digits_keras_calib.npz"
KERAS_EVAL = SAMPLES / "digits_keras_eval.npz"

