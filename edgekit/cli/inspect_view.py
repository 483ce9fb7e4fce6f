"""`edgekit inspect` in the terminal: one table per artifact (edgekit.features.inspect)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from edgekit.features.report.render import lm_texts, short_name, size_text
from edgekit.core.inspection import Inspection, duplicate_text, executed_text, shape_text

TOP_OPS = 12
TOP_TENSORS = 3


def render_inspections(items, console: Console) -> None:
    for item in items:
        console.print(_table(item))


def _share(value: float) -> str:
    return f"{value * 100:.1f}%"


def _io_rows(ins: Inspection) -> list[tuple[str, str]]:
    """("input x", "1×1×8×8 float32, dynamic: 0") per input and output."""
    rows = []
    for side in ("inputs", "outputs"):
        dtypes = ins.io_dtypes.get(side, [])
        for k, e in enumerate(ins.io_shapes.get(side, [])):
            shape = ("≤" if e.get("bounded") else "") + shape_text(e["shape"])
            dtype = f" {dtypes[k]}" if k < len(dtypes) else ""
            if e["dynamic"] is None:
                dynamic = "; shape not recorded" if e["shape"] is None else "; dynamic, which dimensions not recorded"
            else:
                dynamic = f"; dynamic dims {', '.join(map(str, e['dynamic']))}" if e["dynamic"] else ""
            rows.append((f"{side[:-1]} {e['name']}", f"{shape}{dtype}{dynamic}"))
    return rows


def _table(item) -> Table:
    ins = item.inspection
    table = Table(title=escape(item.path), title_justify="left", show_header=False, header_style="bold")
    table.add_column("", style="bold", no_wrap=True)
    table.add_column("", overflow="fold")
    others = len(item.files) - 1
    rows = [
        ("format", item.format),
        ("precision", item.precision + (" (from its weights)" if item.precision_source == "inspection" else "")),
        ("size", size_text(item.bytes) + (f" in {len(item.files)} files" if others else "")),
        ("int8 weights", f"{_share(ins.int8_weight_share)} of the weight bytes"),
        ("int8 compute", f"{_share(ins.int8_compute_share)} of {ins.compute_ops} compute ops; "
                         f"{_share(ins.int8_heavy_op_share)} of conv/matmul ops"),
        ("weights by dtype", ", ".join(f"{d} {size_text(n)}" for d, n in ins.weight_bytes_by_dtype.items()) or "—"),
        ("float ops", ", ".join(ins.float_ops) or "none"),
    ]
    ran = ins.executed
    if ran:
        rows.append(("as it runs", executed_text(ran, delegate=False)))
        if "outside_delegate" in ran:
            rows.append(("outside delegate", f"{', '.join(ran['outside_delegate']) or 'none'}: the delegated graph runs in "
                                             f"{ran['delegate_partitions']} part{'s' if ran['delegate_partitions'] != 1 else ''}"))
    if ins.delegated:
        rows.append(("delegated", ", ".join(
            f"{d}: {v['calls']} call{'s' if v['calls'] != 1 else ''}, " + (f"{v['ops']} ops" if v["ops"] is not None
                                                                            else "ops not readable")
            for d, v in ins.delegated.items())))
    rows.append(("runtime needs", "; ".join(f"{n.what} (for {', '.join(n.ops)})" for n in ins.needs)
                 or "nothing beyond the runtime a default app has"))
    for d in ins.duplicates:
        rows.append(("duplicated", duplicate_text(d)))
    rows += [(f"LM {key}", text) for key, text in lm_texts(ins.lm).items()] if ins.lm else []
    rows += _io_rows(ins)
    ops = list(ins.op_counts.items())
    rows.append(("ops", ", ".join(f"{op} ×{n}" for op, n in ops[:TOP_OPS])
                 + (f", +{len(ops) - TOP_OPS} more" if len(ops) > TOP_OPS else "") or "—"))
    for t in ins.largest_tensors[:TOP_TENSORS]:
        rows.append(("largest tensor", f"{short_name(t['name'], 48)} {t['dtype']} {shape_text(t['shape'])} "
                                       f"{size_text(t['bytes'])}"))
    for note in ins.notes:
        rows.append(("note", note))
    for key, value in rows:
        table.add_row(escape(key), escape(value))
    return table

