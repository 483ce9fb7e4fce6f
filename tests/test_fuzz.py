"""Seeded fuzzing of every input kind edgekit reads (the harness is tests/fuzzing.py; `make fuzz` runs 2,000).

A few hundred mutants of real seeds — source models, artifacts, calibration and eval data, check
configs, integer-I/O sidecars — each run through the edgekit command that reads it: every one
must end with exit 0-3 and one clear line, no traceback, no crash or hang, no file outside its
--out folder, and no payload run.
"""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from tests import fuzzing

MUTANTS = 300
SEED = 0


@pytest.fixture(scope="session")
def fuzz_seeds(tmp_path_factory, converted_digits, digits_int8_auto):
    """Seeds of every kind; the artifacts are the session's digits CNN conversions (fp32 and int8)."""
    _, fp32_dir = converted_digits
    int8_dir = Path(digits_int8_auto.artifacts[0].artifact.path).parent
    return fuzzing.build_seeds(tmp_path_factory.mktemp("fuzz"), fp32_dir=fp32_dir, int8_dir=int8_dir)


def test_mutants_are_seeded_and_cover_every_kind(fuzz_seeds):
    first = fuzzing.generate(fuzz_seeds, MUTANTS, SEED)
    again = fuzzing.generate(fuzz_seeds, MUTANTS, SEED)
    assert [(m.id, m.seed, m.target, m.op) for m in first] == [(m.id, m.seed, m.target, m.op) for m in again]
    per_kind = collections.Counter(m.kind for m in first)
    assert len(first) == MUTANTS and set(per_kind) == set(fuzzing.KINDS) and min(per_kind.values()) >= 2
    payloads = {(m.kind, fuzz_seeds.kinds[m.kind][m.seed].name) for m in first if m.op is None}
    assert {k for k, _ in payloads} >= {"source.pt2", "source.pickle", "source.keras", "source.h5",
                                       "source.savedmodel", "data.calib.npz", "data.eval.npz"}
    ops = {name for m in first if m.op is not None for name in _op_names(m.op)}
    assert {"member", "raw", "value", "line-insert", "npy-header", "flip", "set", "truncate", "insert",
            "duplicate", "zero"} <= ops, ops


def _op_names(op: tuple) -> list[str]:
    nested = [x for x in op[1:] if isinstance(x, tuple)]
    return [op[0], *(n for x in nested for n in _op_names(x))]


def test_every_input_kind_survives_its_mutants(fuzz_seeds, tmp_path):
    mutants = fuzzing.generate(fuzz_seeds, MUTANTS, SEED)
    outcomes = fuzzing.Fuzz(fuzz_seeds, tmp_path / "run", jobs=2, timeout=90, keep=tmp_path / "findings").run(mutants)
    assert len(outcomes) == len(mutants)
    assert not any(o.findings for o in outcomes), fuzzing.summary(outcomes, seed=SEED, total=MUTANTS, examples=3)


PROBE = '''
import os, pathlib, time

def abort():
    os.abort()

def hang():
    time.sleep(600)

def stray():
    pathlib.Path("stray.txt").write_text("left in the working folder")
    raise SystemExit(3)

def canary():
    pathlib.Path({canary!r}).write_text("payload ran")
    raise SystemExit(3)
'''


def test_the_harness_sees_crashes_hangs_stray_files_and_payloads(tmp_path):
    """The checks are not vacuous: a factory of the project's own code aborts, hangs, leaves a file, runs a payload."""
    root = tmp_path / "run"
    worker = fuzzing.Worker(0, root, timeout=120)
    canary = tmp_path / "canary"
    try:
        def run(name: str, timeout: float = 120, label: str = "") -> fuzzing.Outcome:
            d = worker.dir / (label or name)
            cwd, tmp = d / "cwd", d / "tmp"
            for p in (cwd, tmp):
                p.mkdir(parents=True)
            (cwd / "probe.py").write_text(PROBE.format(canary=str(canary)))
            before = fuzzing._snapshot([worker.dir], {str(worker.logs), str(worker.home), str(cwd / "out")})
            args = ["convert", f"probe:{name}", "--target", "onnx", "--input-shape", "x=1,4", "--out", "out",
                    "--eval", "missing.npz"]
            worker.timeout = timeout
            got = worker.run({"id": name, "args": args, "cwd": str(cwd), "tmp": str(tmp),
                              "log": str(worker.logs / d.name), "root": str(d)})
            after = fuzzing._snapshot([worker.dir], {str(worker.logs), str(worker.home), str(cwd / "out")})
            output = "\n".join(fuzzing._tail(worker.logs / f"{d.name}{s}", 20) for s in (".out", ".err"))
            o = fuzzing.Outcome(fuzzing.Mutant("probe", 0, 0, None, None), name, args,
                                got["exit"] if isinstance(got, dict) else got, 0.0, output)
            created = sorted(p.replace(str(d), "<mutant>") for p in after - before if "/cwd/out" not in p)
            fuzzing.check_outcome(o, created, canary.exists())
            return o

        stray = run("stray")
        assert stray.exit == 2 and [c for c, _ in stray.findings] == ["files-outside-out"], stray
        assert "<mutant>/cwd/stray.txt" in stray.findings[0][1]
        payload = run("canary")
        assert [c for c, _ in payload.findings] == ["payload-ran"], payload
        crash = run("abort")
        assert crash.exit == "crash (signal SIGABRT)" and crash.findings[0][0] == "crash", crash
        hang = run("hang", timeout=5)  # a fresh worker after the crash: importing torch counts too
        assert hang.exit == "hang" and hang.findings[0][0] == "hang", hang
        ok = run("stray", label="stray-again")  # and once more after the hang: a fresh worker
        assert ok.exit == 2 and worker.proc is not None
    finally:
        worker.stop()
