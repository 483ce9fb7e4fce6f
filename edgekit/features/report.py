"""`edgekit report`: how big every artifact is, and why.

For each artifact (a file, or every .tflite/.pte/.ptl/.onnx/.ort under a folder; the format is
detected by content) the report gives:

- its total bytes, side files included: ONNX external data, the `<stem>.required_operators.config`
  beside an .ort, and `<artifact>.io.json` integer-I/O sidecars;
- its precision: from the name edgekit gives non-fp32 artifacts (`<stem>.<precision>.<ext>`), else
  from the inspection (int8 when int8 weights are at least half the weight bytes, fp16 when
  float16 weights are, otherwise fp32);
- its ratio to the fp32 artifact of the same stem and format (beside it), when there is one;
- its ratio to the lower bound set by the parameter count: parameters (weight elements, from the
  weight bytes by dtype) × bytes per element of its precision (4 fp32, 2 fp16, 1 int8);
- its weight bytes by dtype, its op counts and its largest tensors (`inspect_artifact`).

Renderers: `to_json` (schema "edgekit.report/1"), `to_markdown` (a PR comment), `to_html` (one
self-contained page: inline CSS and an inline SVG bar chart, no scripts, no external resources)
and `to_rich` (the terminal table). Importing this module imports no framework.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from edgekit.core.errors import BadInput, reading
from edgekit.core.formats import NAME_PRECISIONS, artifact_files, split_name
from edgekit.core.quiet import captured
from edgekit.targets import TARGETS
from edgekit.targets.inspection import precision_from_inspection

SCHEMA = "edgekit.report/1"
ARTIFACT_FORMATS = {t.format: t.extension for t in TARGETS.values()}  # in the targets' order
SCAN_EXTENSIONS = frozenset(ARTIFACT_FORMATS.values())
BYTES_PER_PARAM = {"fp32": 4, "fp16": 2, "int8": 1, "int8-dynamic": 1}
DTYPE_BYTES = {
    "float64": 8, "double": 8, "float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2,
    "int64": 8, "uint64": 8, "int32": 4, "uint32": 4, "int16": 2, "uint16": 2, "int8": 1, "uint8": 1,
    "bool": 1, "int4": 0.5, "uint4": 0.5, "complex64": 8, "complex128": 16,
}
TOP_OPS = 6  # op types shown in the compact (table, Markdown) views


@dataclass(frozen=True)
class ArtifactSize:
    path: str
    format: str
    precision: str
    precision_source: str  # "name" or "inspection"
    inspected_precision: str
    stem: str
    files: tuple[tuple[str, int], ...]  # (path, bytes), the artifact first
    parameters: int
    weight_bytes_by_dtype: dict[str, int]
    int8_weight_share: float
    op_counts: dict[str, int]
    largest_tensors: tuple[dict, ...]
    fp32_path: str | None = None
    fp32_bytes: int | None = None
    notes: tuple[str, ...] = ()

    @property
    def bytes(self) -> int:
        return sum(n for _, n in self.files)

    @property
    def weight_bytes(self) -> int:
        return sum(self.weight_bytes_by_dtype.values())

    @property
    def lower_bound_bytes(self) -> int:
        return self.parameters * BYTES_PER_PARAM.get(self.precision, 4)

    @property
    def ratio_to_lower_bound(self) -> float | None:
        return round(self.bytes / self.lower_bound_bytes, 4) if self.lower_bound_bytes else None

    @property
    def ratio_to_fp32(self) -> float | None:
        return round(self.bytes / self.fp32_bytes, 4) if self.fp32_bytes else None

    def to_json(self) -> dict:
        return {
            "path": self.path, "format": self.format, "precision": self.precision,
            "precision_source": self.precision_source, "inspected_precision": self.inspected_precision,
            "stem": self.stem, "bytes": self.bytes,
            "files": [{"path": p, "bytes": n} for p, n in self.files],
            "parameters": self.parameters, "lower_bound_bytes": self.lower_bound_bytes,
            "ratio_to_lower_bound": self.ratio_to_lower_bound,
            "fp32": {"path": self.fp32_path, "bytes": self.fp32_bytes} if self.fp32_path else None,
            "ratio_to_fp32": self.ratio_to_fp32,
            "weight_bytes": self.weight_bytes, "weight_bytes_by_dtype": dict(self.weight_bytes_by_dtype),
            "int8_weight_share": self.int8_weight_share, "op_counts": dict(self.op_counts),
            "largest_tensors": [{**t, "shape": list(t["shape"])} for t in self.largest_tensors],
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class Report:
    artifacts: tuple[ArtifactSize, ...]
    skipped: tuple[dict, ...] = ()  # {"path", "reason"}: files found in a folder that are not artifacts
    notes: tuple[str, ...] = field(default=())

    @property
    def total_bytes(self) -> int:
        return sum(a.bytes for a in self.artifacts)


# ---------------------------------------------------------------------------------------------
# building


def build_report(paths) -> Report:
    """Size report over `paths`: artifact files, or folders scanned (recursively) for artifacts."""
    from edgekit.core.formats import detect

    if isinstance(paths, (str, Path)):
        paths = [paths]
    found: list[tuple[Path, str]] = []
    skipped: list[dict] = []
    seen: set[Path] = set()
    for given in paths:
        p = Path(given)
        if p.is_dir():
            candidates = sorted(q for q in p.rglob("*") if q.is_file() and q.suffix.lower() in SCAN_EXTENSIONS
                                and not any(part.startswith(".") for part in q.relative_to(p).parts))
            for q in candidates:
                if q.resolve() in seen:
                    continue
                try:
                    fmt = detect(q)
                except BadInput as e:
                    skipped.append({"path": str(q), "reason": e.message})
                    continue
                if fmt not in ARTIFACT_FORMATS:
                    skipped.append({"path": str(q), "reason": f"a {fmt} file, not an edge artifact"})
                    continue
                seen.add(q.resolve())
                found.append((q, fmt))
        elif p.exists():
            fmt = detect(p)  # a clear BadInput for a damaged or unrecognised file
            if fmt not in ARTIFACT_FORMATS:
                raise BadInput(f"{p} is a {fmt} model, not an edge artifact",
                               fix="give .tflite, .pte, .ptl, .onnx or .ort files, or folders holding them")
            if p.resolve() not in seen:
                seen.add(p.resolve())
                found.append((p, fmt))
        else:
            raise BadInput(f"not found: {p}", fix="give artifact files or folders holding them")
    notes = []
    if not found:
        notes.append("no artifacts found (.tflite, .pte, .ptl, .onnx, .ort)")
    sizes = sorted((_measure(p, fmt) for p, fmt in found), key=_order)
    return Report(tuple(_link_fp32(sizes)), tuple(skipped), tuple(notes))


def _order(a: "ArtifactSize") -> tuple:
    rank = {p: i for i, p in enumerate(NAME_PRECISIONS)}
    return (str(Path(a.path).parent), a.stem, list(ARTIFACT_FORMATS).index(a.format), rank.get(a.precision, 9), a.path)


def parameter_count(weight_bytes_by_dtype: dict[str, int]) -> int:
    total = 0.0
    for dtype, n in weight_bytes_by_dtype.items():
        total += n / _dtype_size(dtype)
    return int(round(total))


def _dtype_size(dtype: str) -> float:
    d = dtype.lower().removeprefix("torch.")
    if d in DTYPE_BYTES:
        return DTYPE_BYTES[d]
    bits = re.search(r"(\d+)", d)
    return max(int(bits.group(1)) / 8, 0.125) if bits else 1


def _measure(path: Path, fmt: str) -> ArtifactSize:
    from edgekit.targets.inspection import inspect_artifact

    with reading(path, f"the .{fmt} artifact"), captured():  # the frameworks' import chatter stays off stderr
        files = tuple((f, Path(f).stat().st_size) for f in artifact_files(fmt, path))  # refuses data outside
        ins = inspect_artifact(fmt, str(path))
    stem, named = split_name(path)
    inspected = precision_from_inspection(ins.weight_bytes_by_dtype, ins.int8_weight_share)
    notes = []
    if named is not None:
        precision, source = named, "name"
        base = "int8" if named.startswith("int8") else named
        if base != inspected:
            notes.append(f"named {named} but its weights look {inspected}")
    else:
        precision, source = inspected, "inspection"
    return ArtifactSize(
        path=str(path), format=fmt, precision=precision, precision_source=source, inspected_precision=inspected,
        stem=stem, files=files, parameters=parameter_count(ins.weight_bytes_by_dtype),
        weight_bytes_by_dtype=dict(ins.weight_bytes_by_dtype), int8_weight_share=ins.int8_weight_share,
        op_counts=dict(ins.op_counts), largest_tensors=tuple(ins.largest_tensors), notes=tuple(notes),
    )


def _link_fp32(sizes: list[ArtifactSize]) -> list[ArtifactSize]:
    """Attach to each non-fp32 artifact the fp32 artifact of the same folder, stem and format."""
    from dataclasses import replace

    from edgekit.core.formats import detect

    fp32 = {(str(Path(a.path).resolve().parent), a.stem, a.format): a for a in sizes if a.precision == "fp32"}
    out = []
    for a in sizes:
        if a.precision == "fp32":
            out.append(a)
            continue
        key = (str(Path(a.path).resolve().parent), a.stem, a.format)
        ref = fp32.get(key)
        if ref is not None:
            out.append(replace(a, fp32_path=ref.path, fp32_bytes=ref.bytes))
            continue
        # not in the report: edgekit's fp32 artifact beside it, <stem>.<ext> (fp32 by its name)
        sibling = Path(a.path).with_name(a.stem + ARTIFACT_FORMATS[a.format])
        try:
            same = (sibling.is_file() and sibling.resolve() != Path(a.path).resolve()
                    and detect(sibling) == a.format)
        except BadInput:
            same = False
        if same:
            n = sum(Path(f).stat().st_size for f in artifact_files(a.format, sibling))
            out.append(replace(a, fp32_path=str(sibling), fp32_bytes=n))
        else:
            out.append(a)
    return out


# ---------------------------------------------------------------------------------------------
# rendering


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
        "artifacts": [a.to_json() for a in report.artifacts],
        "skipped": [dict(s) for s in report.skipped],
        "notes": list(report.notes),
    }


def to_json_text(report: Report) -> str:
    return json.dumps(to_json(report), indent=2, allow_nan=False) + "\n"


SUMMARY_COLUMNS = ("artifact", "format", "precision", "size", "files", "vs fp32", "vs lower bound",
                   "parameters", "weights by dtype", "ops")


def _summary_row(a: ArtifactSize, name: str | None = None, ops: int = TOP_OPS) -> tuple[str, ...]:
    prec = a.precision + ("" if a.precision_source == "name" or a.precision == "fp32" else " (inspected)")
    return (name or a.path, a.format, prec, size_text(a.bytes), str(len(a.files)), ratio_text(a.ratio_to_fp32),
            ratio_text(a.ratio_to_lower_bound), f"{a.parameters:,}", dtypes_text(a), ops_text(a, ops))


def display_names(report: Report) -> tuple[str, dict[str, str]]:
    """(common folder, {path: path relative to it}) for compact tables."""
    import os

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
    from rich.markup import escape
    from rich.table import Table

    folder, names = display_names(report)
    table = Table(title=f"edgekit size report — {folder}", header_style="bold", show_header=True,
                  caption=f"total {size_text(report.total_bytes)}; vs lower bound = size / (parameters × "
                          "bytes per element: 4 fp32, 2 fp16, 1 int8)")
    right = {"size", "files", "vs fp32", "vs lower bound", "parameters"}
    for col in SUMMARY_COLUMNS[:-1]:
        table.add_column(col, justify="right" if col in right else "left", no_wrap=col != "weights by dtype",
                         min_width=len(col) if col != "weights by dtype" else 12)
    ops = Table(title="ops by type", header_style="bold")
    ops.add_column("artifact", no_wrap=True)
    ops.add_column("ops (count)", overflow="fold")
    for a in report.artifacts:
        row = _summary_row(a, names[a.path], ops=12)
        table.add_row(*(escape(c) for c in row[:-1]))
        ops.add_row(escape(row[0]), escape(row[-1]))
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


_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:0 1.5em 1.5em 0;vertical-align:top}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}
th{background:#f3f3f3}caption{font-weight:bold;text-align:left;padding:4px 0}
.grid{display:flex;flex-wrap:wrap;align-items:flex-start}
.note{color:#666}svg text{font:12px system-ui,sans-serif}
.key{display:inline-block;width:10px;height:10px;margin:0 4px 0 10px}
"""
