"""The baseline: what every case measured, for later runs to report change against and to seed searches."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from edgekit.features.check.case import Case
from edgekit.core.errors import BadInput
from edgekit.core.quant import PASSES

BASELINE_SCHEMA = "edgekit.baseline/1"
COMPARED = ("cosine", "sqnr_db", "max_abs", "top1_agreement")


def write_baseline(cases: list[Case], path: str | Path) -> None:
    """Record what every case measured, for later runs to report change against."""
    doc = {"schema": BASELINE_SCHEMA, "cases": {c.name: c.baseline_entry() for c in cases}}
    Path(path).write_text(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")


def baseline_seeds(path: str | Path) -> dict:
    """Case name → {"overrides": the layer overrides, and each whole-model pass (PASSES) by name: bool} the
    baseline at `path` recorded (only cases that kept layers back or used a whole-model pass); {} when
    there is no readable baseline."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict) or doc.get("schema") != BASELINE_SCHEMA or not isinstance(doc.get("cases"), dict):
        return {}
    out = {}
    for name, entry in doc["cases"].items():
        if not isinstance(entry, dict):
            continue
        rows = entry.get("overrides")
        rows = rows if isinstance(rows, list) and all(isinstance(o, dict) and isinstance(o.get("layer"), str)
                                                      and o.get("precision") in ("float", "int16") for o in rows) else []
        passes = {p: entry.get(p) is True for p in PASSES}
        if rows or any(passes.values()):
            out[name] = {"overrides": rows, **passes}
    return out


def compare_baseline(cases: list[Case], path: str | Path) -> list[Case]:
    """Each case with the changes since the baseline ("tflite int8 cosine 0.995 → 0.981, budget 0.99")."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise BadInput(f"cannot read baseline {path}: {e}", fix="write one with --update-baseline") from None
    if doc.get("schema") != BASELINE_SCHEMA:
        raise BadInput(f"{path} is not an edgekit baseline ({BASELINE_SCHEMA})")
    out = []
    for c in cases:
        old = doc["cases"].get(c.name)
        if old is None:
            out.append(replace(c, changes=("new: not in the baseline",)))
            continue
        changes, budget = [], c.budget
        now = c.baseline_entry()
        for key in COMPARED:
            a, b = old["metrics"].get(key), now["metrics"].get(key)
            if a is not None and b is not None and abs(a - b) > 1e-6 * max(1.0, abs(a)):
                limit = f", budget {budget[key]:g}" if key in budget else ""
                changes.append(f"{c.target} {c.precision} {key} {a:.6g} → {b:.6g}{limit}")
        if old["bytes"] != now["bytes"]:
            limit = f", budget {int(budget['max_bytes'])}" if "max_bytes" in budget else ""
            changes.append(f"{c.target} {c.precision} bytes {old['bytes']} → {now['bytes']}{limit}")
        for what in ("model", "calibration"):
            if old["sha256"].get(what) != now["sha256"].get(what):
                changes.append(f"the {what} changed since the baseline")
        out.append(replace(c, changes=tuple(changes)))
    return out
