"""The same conversion gives the same bytes.

The bundled digits CNN is converted twice to every target, at fp32 and at int8: once through the
library in this process, once through the command line in a child process, so neither a
per-process seed (hash maps, address layout) nor the caller (its stack, its paths) can leak into
an artifact unnoticed. Every placed file must hash the same, and so must the sha256 edgekit records.

The command line's JSON documents are also compared with the ones committed in tests/data/golden
(less what differs by run: paths, seconds, tool versions): a change meant to keep behaviour (a
refactoring) must leave them identical. A change meant to alter a result regenerates them with
EDGEKIT_UPDATE_GOLDEN=1 and the diff shows what moved.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from tests.conftest import DIGITS, DIGITS_CALIB, DIGITS_EVAL, REPO, run_cli

pytestmark = pytest.mark.slow

TARGETS = {"tflite", "executorch", "onnx", "ort", "ptl"}
GOLDEN = Path(__file__).parent / "data" / "golden"
BY_RUN = {"path", "files", "seconds", "tool_versions", "cached"}  # what differs by run, host or tool release


def _stable(doc, out: Path):
    """`doc` without what differs by run: those keys dropped, the output folder written as OUT."""
    if isinstance(doc, dict):
        return {k: _stable(v, out) for k, v in doc.items() if k not in BY_RUN}
    if isinstance(doc, list):
        return [_stable(v, out) for v in doc]
    if isinstance(doc, str):
        return doc.replace(str(out), "OUT").replace(str(REPO) + os.sep, "")
    return doc


def _assert_golden(doc: dict, out: Path, name: str) -> None:
    path = GOLDEN / f"{name}.json"
    stable = _stable(doc, out)
    if os.environ.get("EDGEKIT_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(stable, indent=1, sort_keys=True) + "\n")
    golden = json.loads(path.read_text())
    assert stable == golden, (f"`edgekit convert --json` differs from {path.relative_to(REPO)}; if the change is meant "
                              "to move a result, rerun with EDGEKIT_UPDATE_GOLDEN=1 and commit the diff")


def _files(artifacts: list[dict]) -> dict[str, dict]:
    """target -> {"sha256": what edgekit recorded, "files": {file name: sha256 of its bytes}}."""
    return {a["target"]: {"sha256": a["sha256"],
                          "files": {Path(f).name: hashlib.sha256(Path(f).read_bytes()).hexdigest() for f in a["files"]}}
            for a in artifacts}


def _cli(out: Path, golden: str, *options: str) -> dict:
    r = run_cli("convert", DIGITS, "--target", "all", "--out", out, "--eval", DIGITS_EVAL, "--json", *options)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    _assert_golden(doc, out, golden)
    return _files(doc["artifacts"])


def _assert_same(first: dict, second: dict) -> None:
    assert TARGETS <= set(first), f"targets converted: {sorted(first)}"
    assert set(first) == set(second)
    differ = [f"{target}/{name}: {digest[:16]} then {second[target]['files'].get(name, 'missing')[:16]}"
              for target in sorted(first) for name, digest in first[target]["files"].items()
              if second[target]["files"].get(name) != digest]
    assert not differ, "not byte-identical across two conversions: " + "; ".join(differ)
    assert {t: a["files"].keys() for t, a in first.items()} == {t: a["files"].keys() for t, a in second.items()}
    assert {t: a["sha256"] for t, a in first.items()} == {t: a["sha256"] for t, a in second.items()}


def test_fp32_artifacts_are_byte_identical(converted_digits, tmp_path):
    result, _ = converted_digits
    _assert_same(_files([r.to_json() for r in result.artifacts]), _cli(tmp_path / "cli", "convert_digits_fp32"))


def test_int8_artifacts_are_byte_identical(tmp_path):
    from edgekit.calibration.sources import CalibrationSpec
    from edgekit.engine.request import build_request
    from edgekit.engine.pipeline import convert

    result = convert(build_request(str(DIGITS), ("all",), str(tmp_path / "api"), precision="int8",
                                    eval_data=str(DIGITS_EVAL), calibration=CalibrationSpec(str(DIGITS_CALIB))))
    assert not result.failed
    _assert_same(_files([r.to_json() for r in result.artifacts]),
                 _cli(tmp_path / "cli", "convert_digits_int8", "--int8", "--calib", str(DIGITS_CALIB)))
