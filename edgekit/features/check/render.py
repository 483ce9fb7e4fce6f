"""A check's cases as JSON, JUnit XML and Markdown."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from edgekit.core.drift import SHOWN
from edgekit.features.check.case import Case
from edgekit.core.quant import PASSES
from edgekit.core.verify import Status

SCHEMA = "edgekit.check/1"


def to_json(cases: list[Case]) -> dict:
    return {"schema": SCHEMA, "passed": sum(c.status == Status.PASS for c in cases),
            "failed": sum(c.status == Status.FAIL for c in cases),
            "cases": [{"model": c.model, "target": c.target, "precision": c.precision, "status": str(c.status),
                       "reasons": list(c.reasons), "bytes": c.bytes, "path": c.path, "metrics": c.metrics,
                       "task_accuracy": c.task_accuracy, "sha256": c.hashes, "tool_versions": c.tool_versions,
                       "changes": list(c.changes), "layers": [d.to_json() for d in c.layers],
                       "layers_note": c.layers_note, "overrides": [o.to_json() for o in c.overrides],
                       "bias_correction": c.bias_correction, "smooth_quant": c.smooth_quant,
                       "int16_stem": c.int16_stem, "int16_activations": c.int16_activations,
                       "search": c.search.to_json() if c.search else None,
                       **({"latency": c.latency} if c.latency is not None else {})}
                      for c in cases]}


def to_junit(cases: list[Case]) -> str:
    """JUnit XML: one test case per model × target × precision."""
    suite = ET.Element("testsuite", name="edgekit check", tests=str(len(cases)),
                       failures=str(sum(c.status == Status.FAIL for c in cases)))
    for c in cases:
        case = ET.SubElement(suite, "testcase", classname=f"edgekit.{c.model}", name=f"{c.target} {c.precision}",
                             time=f"{c.seconds:.3f}")
        if c.status == Status.FAIL:
            failure = ET.SubElement(case, "failure", message="; ".join(c.reasons))
            failure.text = "\n".join([*c.reasons, *_search_lines(c),
                                      *(f"layer {i}: {d.text()}" for i, d in enumerate(c.layers[:5], 1))])
        elif c.search:
            ET.SubElement(case, "system-out").text = "\n".join(_search_lines(c))
    return ET.tostring(ET.ElementTree(suite).getroot(), encoding="unicode", xml_declaration=True)


def _search_lines(c: Case) -> list[str]:
    """The accuracy-aware search of a case, in lines: why it stopped, then each layer kept back."""
    if not c.search:
        return []
    s = c.search
    lines = [f"search: {s.why} ({s.conversions} conversions, {s.seconds:.1f} s; int8 share {s.int8_share:.3f})"]
    for k in s.kept:
        gains = ", ".join(f"{m} {d:+.4g}" for m, d in k.contribution.items() if d is not None)
        lines.append(f"kept back: {k.layer} at {k.precision} ({k.bytes:+d} bytes; {gains})")
    for name, label in PASSES.items():
        if s.contributions.get(name):
            gains = ", ".join(f"{m} {d:+.4g}" for m, d in s.contributions[name].items() if d is not None)
            lines.append(f"{label} kept ({gains})")
    return lines


def to_markdown(cases: list[Case]) -> str:
    failed = [c for c in cases if c.status == Status.FAIL]
    head = (f"### edgekit check: {'❌ ' + str(len(failed)) + ' failed' if failed else '✅ all passed'} "
            f"({len(cases)} cases)\n\n")
    rows = ["| model | target | precision | status | size | cosine | accuracy src → artifact |",
            "|---|---|---|---|---:|---:|---|"]
    for c in cases:
        m = c.metrics.get("output_0", {})
        acc = c.task_accuracy
        acc_text = f"{acc['reference'] * 100:.2f}% → {acc['artifact'] * 100:.2f}%" if acc else "—"
        rows.append(f"| {c.model} | {c.target} | {c.precision} | {'✅ pass' if c.status == Status.PASS else '❌ fail'} | "
                    f"{c.bytes:,} B | {m.get('cosine', float('nan')):.6f} | {acc_text} |")
    details = "".join(f"\n- **{c.name}**: " + "; ".join(c.reasons) for c in failed)
    changed = "".join(f"\n- {change}" for c in cases for change in c.changes)
    return (head + "\n".join(rows) + "\n" + (f"\n#### Broken budgets{details}\n" if failed else "")
            + "".join(_search_markdown(c) for c in cases if c.search)
            + "".join(_layers_markdown(c) for c in cases if c.layers or c.layers_note)
            + (f"\n#### Changes since the baseline{changed}\n" if changed else ""))


def _search_markdown(c: Case) -> str:
    s = c.search
    rows = ["| layer kept back | at | bytes | contribution |", "|---|---|---:|---|"]
    for k in s.kept:
        gains = ", ".join(f"{m} {d:+.4g}" for m, d in k.contribution.items() if d is not None)
        rows.append(f"| `{k.layer}` | {k.precision} | {k.bytes:+,} | {gains} |")
    table = "\n" + "\n".join(rows) + "\n" if s.kept else ""
    return (f"\n#### Accuracy-aware int8: {c.name}\n{s.why} — {s.conversions} conversions, {s.seconds:.1f} s, "
            f"{s.int8_share * 100:.1f}% of weight bytes int8\n{table}")


def _layers_markdown(c: Case) -> str:
    """The layers of one int8 case that lose the most SQNR, as a table."""
    if not c.layers:
        return f"\n#### Layers of {c.name}\n{c.layers_note}\n"
    rows = ["| layer | op | SQNR lost | output SQNR | weight SQNR |", "|---|---|---:|---:|---:|"]
    for d in c.layers[:SHOWN]:
        w = f"{d.weight_sqnr_db:.1f} dB" if d.weight_sqnr_db is not None else "—"
        rows.append(f"| `{d.layer}` | {d.op} | {d.loss_db:.1f} dB | {d.sqnr_db:.1f} dB | {w} |")
    return f"\n#### Layers of {c.name} losing the most (SQNR vs. float, per layer)\n" + "\n".join(rows) + "\n"
