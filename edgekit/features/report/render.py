"""`edgekit report`, the renderings of a `Report` (edgekit.features.report.build): `to_json` (schema
"edgekit.report/1"), `to_markdown` (a PR comment), `to_html` (one self-contained page: inline CSS and
an inline SVG bar chart, no scripts, no external resources) and `to_rich` (the terminal table).
Importing this module imports no framework.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from edgekit.features.report.build import ArtifactSize, Report
from edgekit.core.inspection import shape_text, shapes_text
from edgekit.core.quant import Precision

SCHEMA = "edgekit.report/1"
TOP_OPS = 6  # op types shown in the compact (table, Markdown) views


def size_text(n: float | None) -> str:
    if n is None:
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def ratio_text(r: float | None) -> str:
    return "—" if r is None else f"{r:.2f}×"


def dtypes_text(a: ArtifactSize) -> str:
    return ", ".join(f"{d} {size_text(n)}" for d, n in a.weight_bytes_by_dtype.items()) or "—"


def ops_text(a: ArtifactSize, limit: int = TOP_OPS) -> str:
    items = list(a.op_counts.items())
    text = ", ".join(f"{op} ×{n}" for op, n in items[:limit])
    if len(items) > limit:
        text += f", +{len(items) - limit} more"
    return text or "—"


def short_name(name: str, width: int = 60) -> str:
    if len(name) <= width:
        return name
    keep = (width - 1) // 2
    return name[:keep] + "…" + name[-(width - 1 - keep):]


def to_json(report: Report) -> dict:
    return {
        "schema": SCHEMA,
        "total_bytes": report.total_bytes,
        "artifacts": [artifact_json(a) | ({"latency": report.latency[a.path]} if a.path in report.latency else {})
                      for a in report.artifacts],
        "skipped": [dict(s) for s in report.skipped],
        "notes": list(report.notes),
    }


def artifact_json(a: ArtifactSize) -> dict:
    return {
        "path": a.path, "format": a.format, "precision": a.precision,
        "precision_source": a.precision_source, "inspected_precision": a.inspected_precision,
        "stem": a.stem, "bytes": a.bytes,
        "files": [{"path": p, "bytes": n} for p, n in a.files],
        "parameters": a.parameters, "lower_bound_bytes": a.lower_bound_bytes,
        "ratio_to_lower_bound": a.ratio_to_lower_bound,
        "fp32": {"path": a.fp32_path, "bytes": a.fp32_bytes} if a.fp32_path else None,
        "ratio_to_fp32": a.ratio_to_fp32,
        "weight_bytes": a.weight_bytes, "weight_bytes_by_dtype": dict(a.weight_bytes_by_dtype),
        "int8_weight_share": a.int8_weight_share, "op_counts": dict(a.op_counts),
        "largest_tensors": [{**t, "shape": list(t["shape"])} for t in a.largest_tensors],
        "io_shapes": {k: [dict(e) for e in v] for k, v in a.io_shapes.items()},
        "runtime_needs": list(a.runtime_needs),
        "duplicated_bytes": a.duplicated_bytes,
        "executed": a.executed,
        "notes": list(a.notes),
    } | ({"lm": a.lm} if a.lm else {})


def lm_texts(lm: dict) -> dict[str, str]:
    """A decoder LM's facts from its file (`Inspection.lm`) for a user: entry points, cache, weights by group and
    what runs outside the delegate (where the runtime delegates)."""
    calls = ", ".join(("one graph for prefill and decode, " if name == "graph" else f"{name} ")
                      + (f"{n} token{'s' if n != 1 else ''}" if n else "any token count")
                      for name, n in lm["entry_points"].items())
    c = lm["cache"]
    out = {"entry points": calls,
           "cache": f"k and v {'×'.join(map(str, c['shape']))} {c['dtype']} (layers × kv heads × max {lm['max_seq_len']} "
                    f"positions × head size): {size_text(c['bytes'])}, held by the app, which writes each call's new keys and "
                    f"values in; vocabulary {lm['vocab']}",
           "weights": "; ".join(f"{w['group']} {w['dtype']}" + (f" {w['scheme']}" if w["scheme"] else "")
                                + (f" ({w['tensors']} tensors)" if w["tensors"] > 1 else "")
                                + (f" {size_text(w['bytes'])}" if w["bytes"] else "") for w in lm["weights"]) or "—"}
    if "outside_delegate" in lm:
        out["outside delegate"] = ", ".join(lm["outside_delegate"]) or "nothing"
    return out


def to_json_text(report: Report) -> str:
    return json.dumps(to_json(report), indent=2, allow_nan=False) + "\n"


SUMMARY_COLUMNS = ("artifact", "format", "precision", "size", "files", "vs fp32", "vs lower bound",
                   "parameters", "weights by dtype", "I/O shapes", "ops")
SHAPES = SUMMARY_COLUMNS.index("I/O shapes")  # in the terminal, beside the ops (the summary is wide already)


def _summary_row(a: ArtifactSize, name: str | None = None, ops: int = TOP_OPS) -> tuple[str, ...]:
    prec = a.precision + ("" if a.precision_source == "name" or a.precision == Precision.FP32 else " (inspected)")
    return (name or a.path, a.format, prec, size_text(a.bytes), str(len(a.files)), ratio_text(a.ratio_to_fp32),
            ratio_text(a.ratio_to_lower_bound), f"{a.parameters:,}", dtypes_text(a), shapes_text(a.io_shapes),
            ops_text(a, ops))


def display_names(report: Report) -> tuple[str, dict[str, str]]:
    """(common folder, {path: path relative to it}) for compact tables."""
    paths = [a.path for a in report.artifacts]
    if not paths:
        return "", {}
    common = os.path.commonpath([str(Path(p).resolve().parent) for p in paths])
    return common, {p: os.path.relpath(Path(p).resolve(), common) for p in paths}


def _md(cell: str) -> str:
    return str(cell).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def to_markdown(report: Report) -> str:
    """One Markdown table, a row per artifact, fit for a PR comment; largest tensors folded below."""
    lines = ["### edgekit size report", ""]
    if not report.artifacts:
        lines.append("_no artifacts found_")
        return "\n".join(lines) + "\n"
    right = {"size", "files", "vs fp32", "vs lower bound", "parameters"}
    lines.append("| " + " | ".join(SUMMARY_COLUMNS) + " |")
    lines.append("|" + "|".join("---:" if c in right else "---" for c in SUMMARY_COLUMNS) + "|")
    for a in report.artifacts:
        row = list(_summary_row(a))
        row[0] = f"`{row[0]}`"
        lines.append("| " + " | ".join(_md(c) for c in row) + " |")
    lines += ["", f"Total: {size_text(report.total_bytes)} in {len(report.artifacts)} artifact"
              f"{'s' if len(report.artifacts) != 1 else ''}. *vs lower bound*: size over parameters × bytes per "
              "element of the precision (4 fp32, 2 fp16, 1 int8).", ""]
    lines += ["<details><summary>Largest tensors</summary>", "",
              "| artifact | tensor | dtype | shape | size |", "|---|---|---|---|---:|"]
    for a in report.artifacts:
        for t in a.largest_tensors:
            shape = "×".join(str(d) for d in t["shape"]) or "scalar"
            lines.append(f"| `{_md(a.path)}` | `{_md(short_name(t['name']))}` | {_md(t['dtype'])} | {shape} | "
                         f"{size_text(t['bytes'])} |")
    lines += ["", "</details>"]
    for s in report.skipped:
        lines.append(f"\n> skipped `{_md(s['path'])}`: {_md(s['reason'])}")
    return "\n".join(lines) + "\n"


def to_rich(report: Report):
    """Renderables for a rich console: the summary table, then the largest tensors."""
    folder, names = display_names(report)
    table = Table(title=f"edgekit size report — {folder}", header_style="bold", show_header=True,
                  caption=f"total {size_text(report.total_bytes)}; vs lower bound = size / (parameters × "
                          "bytes per element: 4 fp32, 2 fp16, 1 int8)")
    right = {"size", "files", "vs fp32", "vs lower bound", "parameters"}
    for col in SUMMARY_COLUMNS[:SHAPES]:
        table.add_column(col, justify="right" if col in right else "left", no_wrap=col != "weights by dtype",
                         min_width=len(col) if col != "weights by dtype" else 12)
    ops = Table(title="inputs → outputs and ops by type", header_style="bold")
    ops.add_column("artifact", no_wrap=True)
    ops.add_column("I/O shapes (? dynamic)", overflow="fold")
    ops.add_column("ops (count)", overflow="fold")
    for a in report.artifacts:
        row = _summary_row(a, names[a.path], ops=12)
        table.add_row(*(escape(c) for c in row[:SHAPES]))
        ops.add_row(escape(row[0]), escape(row[SHAPES]), escape(row[-1]))
    tensors = Table(title="largest tensors", header_style="bold")
    for col in ("artifact", "tensor", "dtype", "shape", "size"):
        tensors.add_column(col, justify="right" if col == "size" else "left")
    for a in report.artifacts:
        for t in a.largest_tensors[:3]:
            tensors.add_row(escape(names[a.path]), escape(short_name(t["name"], 48)), t["dtype"],
                            "×".join(str(d) for d in t["shape"]), size_text(t["bytes"]))
    out = [table]
    if report.artifacts:
        out += [ops, tensors]
    lms = [a for a in report.artifacts if a.lm]
    if lms:
        lm_table = Table(title="decoder LMs: entry points, cache and weights by group", header_style="bold")
        columns = ("entry points", "cache", "weights", "outside delegate")
        for col in ("artifact",) + columns:
            lm_table.add_column(col, overflow="fold", no_wrap=col == "artifact")
        for a in lms:
            texts = lm_texts(a.lm)
            lm_table.add_row(escape(names[a.path]), *(escape(texts.get(col, "—")) for col in columns))
        out.append(lm_table)
    if report.latency:
        latency = Table(title="host CPU latency in each runtime (edgekit bench): median (p10–p90)", header_style="bold")
        for col in ("artifact", "threads", "median", "p10–p90", "vs fp32"):
            latency.add_column(col, justify="left" if col == "artifact" else "right")
        for a in report.artifacts:
            for t in report.latency.get(a.path, {}).get("timings", ()):
                ratio = report.latency[a.path]["ratio_to_fp32"].get(str(t["threads"]))
                latency.add_row(escape(names[a.path]), str(t["threads"]), f"{t['median_ms']:.3g} ms",
                                f"{t['p10_ms']:.3g}–{t['p90_ms']:.3g} ms", ratio_text(ratio))
        out.append(latency)
    return out


def to_html(report: Report) -> str:
    """A self-contained page: inline CSS, an inline SVG bar chart (one <rect> per artifact), the tables."""
    e = html.escape
    parts = ["<!DOCTYPE html>", "<html lang=\"en\"><head><meta charset=\"utf-8\">",
             "<title>edgekit size report</title>", f"<style>{_CSS}</style></head><body>",
             "<h1>edgekit size report</h1>",
             f"<p>in <code>{e(display_names(report)[0])}</code></p>",
             f"<p>{len(report.artifacts)} artifact{'s' if len(report.artifacts) != 1 else ''}, "
             f"{e(size_text(report.total_bytes))} in total.</p>"]
    parts.append(_svg_chart(report))
    if report.latency:
        parts.append(_svg_latency(report))
    parts.append("<h2>Artifacts</h2><table><thead><tr>"
                 + "".join(f"<th>{e(c)}</th>" for c in SUMMARY_COLUMNS) + "</tr></thead><tbody>")
    for a in report.artifacts:
        parts.append("<tr>" + "".join(f"<td>{e(c)}</td>" for c in _summary_row(a)) + "</tr>")
    parts.append("</tbody></table>")
    parts.append("<p class=\"note\">vs lower bound: size over parameters × bytes per element of the precision "
                 "(4 fp32, 2 fp16, 1 int8). vs fp32: size over the fp32 artifact of the same stem and format.</p>")
    for a in report.artifacts:
        parts.append(f"<h2>{e(a.path)}</h2>")
        parts.append("<p>" + e(f"{a.format}, {a.precision} ({a.precision_source}), {size_text(a.bytes)} "
                               f"({a.bytes:,} bytes), {a.parameters:,} parameters") + "</p>")
        parts.append("<div class=\"grid\">")
        parts.append(_html_table(("file", "bytes"), [(p, f"{n:,}") for p, n in a.files], "Files"))
        parts.append(_html_table(("dtype", "bytes", "share"),
                                 [(d, f"{n:,}", f"{n / a.weight_bytes:.1%}" if a.weight_bytes else "—")
                                  for d, n in a.weight_bytes_by_dtype.items()], "Weights by dtype"))
        parts.append(_html_table(("", "name", "shape", "dynamic dims"), io_rows(a.io_shapes), "Inputs and outputs"))
        parts.append(_html_table(("op", "count"), [(op, str(n)) for op, n in a.op_counts.items()], "Ops"))
        parts.append(_html_table(("tensor", "dtype", "shape", "bytes"),
                                 [(short_name(t["name"], 72), t["dtype"], "×".join(str(d) for d in t["shape"]),
                                   f"{t['bytes']:,}") for t in a.largest_tensors], "Largest tensors"))
        parts.append("</div>")
        for n in a.notes:
            parts.append(f"<p class=\"note\">{e(n)}</p>")
    for s in report.skipped:
        parts.append(f"<p class=\"note\">skipped {e(s['path'])}: {e(s['reason'])}</p>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def io_rows(io_shapes: dict) -> list[tuple[str, str, str, str]]:
    """(input/output, name, shape, its dynamic dimensions) per input and output; ? for what the file does not say."""
    rows = []
    for side in ("inputs", "outputs"):
        for e in io_shapes.get(side, []):
            dynamic = "?" if e["dynamic"] is None else ", ".join(map(str, e["dynamic"])) or "none"
            rows.append((side[:-1], e["name"], ("≤" if e.get("bounded") else "") + shape_text(e["shape"]), dynamic))
    return rows


def _html_table(columns, rows, caption: str) -> str:
    e = html.escape
    head = "".join(f"<th>{e(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><caption>{e(caption)}</caption><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_COLORS = {"fp32": "#4e79a7", "fp16": "#59a14f", "int8": "#f28e2b", "int8-dynamic": "#e15759"}


def _svg_chart(report: Report) -> str:
    """Horizontal bars, one <rect> per artifact; the lower bound as a dashed line on each bar."""
    e = html.escape
    if not report.artifacts:
        return "<p>no artifacts</p>"
    label_w, bar_w, row_h, value_w = 320, 420, 26, 170  # value_w fits "1023.9 MiB int8-dynamic"
    width, height = label_w + bar_w + value_w, row_h * len(report.artifacts) + 10
    top = max(a.bytes for a in report.artifacts) or 1
    _, names = display_names(report)
    out = [f"<svg role=\"img\" aria-label=\"artifact sizes\" width=\"{width}\" height=\"{height}\" "
           f"viewBox=\"0 0 {width} {height}\">"]
    for i, a in enumerate(report.artifacts):
        y = 5 + i * row_h
        w = max(a.bytes / top * bar_w, 1)
        out.append(f"<text x=\"{label_w - 8}\" y=\"{y + 17}\" text-anchor=\"end\">{e(short_name(names[a.path], 44))}</text>")
        out.append(f"<rect x=\"{label_w}\" y=\"{y + 3}\" width=\"{w:.1f}\" height=\"{row_h - 6}\" "
                   f"fill=\"{_COLORS.get(a.precision, '#76b7b2')}\"><title>{e(a.path)}: {a.bytes:,} bytes "
                   f"({e(a.precision)})</title></rect>")
        if a.lower_bound_bytes:
            x = label_w + min(a.lower_bound_bytes / top, 1) * bar_w
            out.append(f"<line x1=\"{x:.1f}\" x2=\"{x:.1f}\" y1=\"{y + 1}\" y2=\"{y + row_h - 1}\" "
                       "stroke=\"#222\" stroke-dasharray=\"3 2\"/>")
        out.append(f"<text x=\"{label_w + w + 6:.1f}\" y=\"{y + 17}\">{e(size_text(a.bytes))} {e(a.precision)}</text>")
    out.append("</svg>")
    legend = " ".join(f"<span class=\"key\" style=\"background:{c}\"></span>{e(p)}" for p, c in _COLORS.items())
    return ("<figure>" + "".join(out) + f"<figcaption>{legend} · dashed line: lower bound (parameters × bytes per "
            "element)</figcaption></figure>")


def _svg_latency(report: Report) -> str:
    """Latency bars beside the size bars: the median at 1 thread, p10–p90 as a whisker, one <rect> per artifact."""
    e = html.escape
    timed = [(a, report.latency[a.path]["timings"][0]) for a in report.artifacts if a.path in report.latency]
    label_w, bar_w, row_h, value_w = 320, 420, 26, 170
    width, height = label_w + bar_w + value_w, row_h * len(timed) + 10
    top = max(t["p90_ms"] for _, t in timed) or 1
    _, names = display_names(report)
    threads = timed[0][1]["threads"]
    out = [f"<svg role=\"img\" aria-label=\"artifact latency\" width=\"{width}\" height=\"{height}\" "
           f"viewBox=\"0 0 {width} {height}\">"]
    for i, (a, t) in enumerate(timed):
        y = 5 + i * row_h
        w = max(t["median_ms"] / top * bar_w, 1)
        lo, hi = (label_w + t[k] / top * bar_w for k in ("p10_ms", "p90_ms"))
        ratio = report.latency[a.path].get("ratio_to_fp32", {}).get(str(threads))
        label = f"{t['median_ms']:.3g} ms" + (f" ({ratio:.2f}× fp32)" if ratio else "")
        out.append(f"<text x=\"{label_w - 8}\" y=\"{y + 17}\" text-anchor=\"end\">{e(short_name(names[a.path], 44))}</text>")
        out.append(f"<rect x=\"{label_w}\" y=\"{y + 3}\" width=\"{w:.1f}\" height=\"{row_h - 6}\" "
                   f"fill=\"{_COLORS.get(a.precision, '#76b7b2')}\"><title>{e(a.path)}: median {t['median_ms']:.4g} ms, "
                   f"p10–p90 {t['p10_ms']:.4g}–{t['p90_ms']:.4g} ms over {t['runs']} runs</title></rect>")
        out.append(f"<line x1=\"{lo:.1f}\" x2=\"{hi:.1f}\" y1=\"{y + row_h - 1.5}\" y2=\"{y + row_h - 1.5}\" "
                   "stroke=\"#222\"/>")  # under the bar, which stays one colour
        out.append(f"<text x=\"{max(label_w + w, hi) + 6:.1f}\" y=\"{y + 17}\">{e(label)}</text>")
    out.append("</svg>")
    return (f"<h2>Latency</h2><figure>{''.join(out)}<figcaption>host CPU latency in each artifact's own runtime: "
            f"median at {threads} thread{'s' if threads > 1 else ''}, the line under each bar p10–p90 (edgekit bench)"
            "</figcaption></figure>")


_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:0 1.5em 1.5em 0;vertical-align:top}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}
th{background:#f3f3f3}caption{font-weight:bold;text-align:left;padding:4px 0}
.grid{display:flex;flex-wrap:wrap;align-items:flex-start}
.note{color:#666}svg text{font:12px system-ui,sans-serif}
.key{display:inline-block;width:10px;height:10px;margin:0 4px 0 10px}
"""
