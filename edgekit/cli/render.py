"""Human-readable output: progress lines, result tables, the graph."""

from __future__ import annotations

import time

from rich.console import Console
from rich.table import Table

from edgekit.core.quant import PASSES
from edgekit.targets import TARGETS

STATUS_STYLE = {"pass": "bold green", "fail": "bold red", "skipped": "yellow"}


class Reporter:
    """Progress on standard error: one line per step, with the time since the run started."""

    def __init__(self, stream):
        self.console = _console(stream)
        self.started = time.perf_counter()

    def step(self, message: str) -> None:
        self.console.print(f"[dim]{time.perf_counter() - self.started:6.1f}s[/dim] {message}")


def _console(stream=None) -> Console:
    """A console that keeps tables readable when the output is piped (rich assumes 80 columns)."""
    console = Console(file=stream, highlight=False, soft_wrap=True)
    if not console.is_terminal:
        console.width = 140
    return console


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _fmt(v, digits: int = 6) -> str:
    if v is None:
        return "∞"
    return f"{v:.{digits}g}"


def _target_label(name: str) -> str:
    """The target's name, marked "(legacy)" for a legacy format such as ptl."""
    t = TARGETS.get(name)
    return f"{name} (legacy)" if t is not None and t.legacy else name


def render_result(result, console: Console | None) -> None:
    console = console or _console()
    src = result.source
    console.print(f"\n[bold]{src.path}[/bold] ({src.format}, {src.signature.describe()})")
    table = Table(show_header=True, header_style="bold")
    for col in ("target", "precision", "size", "verdict", "cosine", "max_abs", "sqnr_db", "top1", "accuracy src → artifact"):
        table.add_column(col, justify="right" if col not in ("target", "precision", "verdict") else "left")
    for r in result.artifacts:
        m = r.verdict.metrics.get("output_0", {})
        acc = r.verdict.task_accuracy
        acc_text = f"{acc['reference'] * 100:.2f}% → {acc['artifact'] * 100:.2f}%" if acc else "—"
        top1 = m.get("top1_agreement")
        table.add_row(
            _target_label(r.target), r.artifact.precision, _size(r.bytes),
            f"[{STATUS_STYLE[r.verdict.status]}]{r.verdict.status}[/]",
            f"{m['cosine']:.6f}" if m else "—", _fmt(m.get("max_abs"), 3) if m else "—",
            _fmt(m.get("sqnr_db"), 4) if m else "—", f"{top1 * 100:.1f}%" if top1 is not None else "—", acc_text,
        )
    console.print(table)
    for r in result.artifacts:
        others = len(r.artifact.files) - 1
        extra = f" (+{others} file{'s' if others > 1 else ''} beside it)" if others else ""
        reused = r.artifact.meta.get("reused")
        how = (" (from the cache)" if r.cached else "") + (
            " (reused " + ", ".join(f"{x['precision']} {x['format']}" for x in reused) + f" of {reused[-1]['built_for']})"
            if reused else "")
        console.print(f"  {r.target}: {r.artifact.path}{extra}  [dim]route {' → '.join(r.artifact.meta.get('route', []))},"
                      f" {r.artifact.meta.get('seconds', 0):.1f} s{how}[/dim]")
        search = r.artifact.meta.get("search")
        if search:
            _render_search(search, console)
        for reason in r.verdict.reasons:
            console.print(f"    [red]✗ {reason}[/red]")
    for w in result.warnings:
        console.print(f"[yellow]warning:[/yellow] {w}")


def _render_search(search: dict, console: Console) -> None:
    """The accuracy-aware search: its steps, the layers kept back, and why it stopped."""
    console.print(f"    search ({search['conversions']} conversions, {search['seconds']:.1f} s): {search['why']}")
    if search.get("note"):
        console.print(f"    [yellow]note:[/yellow] {search['note']}")
    if len(search["steps"]) == 1:
        return  # full int8 met the budgets: no table of one row
    table = Table(show_header=True, header_style="bold", box=None, padding=(0, 1))
    for col in ("step", "layer", "→", *search["budgets"], "int8 share", "size", "result"):
        table.add_column(col, justify="left" if col in ("layer", "→", "result") else "right")
    for row in search["steps"]:
        values = row.get("values", {})
        what = f"({PASSES[row['change']]})" if row.get("change") in PASSES else row["layer"] or "(full int8)"
        table.add_row(str(row["step"]), what, row["precision"] or "",
                      *(_fmt(values.get(k)) if k in values else "—" for k in search["budgets"]),
                      f"{row['int8_share']:.3f}" if "int8_share" in row else "—",
                      _size(row["bytes"]) if "bytes" in row else "—",
                      f"[green]{row['note']}[/green]" if row["accepted"] else f"[dim]{row['note']}[/dim]")
    console.print(table)
    for k in search["kept"]:
        gains = ", ".join(f"{m} {d:+.4g}" for m, d in k["contribution"].items() if d is not None)
        size = f"+{_size(k['bytes'])}" if k["bytes"] >= 0 else f"-{_size(-k['bytes'])}"
        console.print(f"    kept back: {k['layer']} at {k['precision']} ({size}; {gains})")
    for name, label in PASSES.items():
        if search.get(f"{name}_contribution"):
            gains = ", ".join(f"{m} {d:+.4g}" for m, d in search[f"{name}_contribution"].items() if d is not None)
            console.print(f"    {label} kept ({gains})")



def render_graph(edges, targets) -> None:
    console = _console()
    table = Table(title="converter edges", header_style="bold",
                  caption="torch: .pt2, .pt, module:factory · tf: SavedModel folders, .keras, .h5")
    for col in ("edge", "from", "to", "precisions", "extra", "available here"):
        table.add_column(col)
    for c in edges:
        avail = "[green]yes[/green]" if c.available() else f"[red]no[/red] — pip install 'edgekit[{c.extra}]'"
        table.add_row(c.name, c.source, c.target, ", ".join(c.precisions), c.extra, avail)
    console.print(table)
    rt = Table(title="targets and the runtimes that verify them", header_style="bold")
    for col in ("target", "format", "verified with"):
        rt.add_column(col)
    for t in targets:
        name = t.name + (f" ({', '.join(t.aliases)})" if t.aliases else "") + (" \\[legacy]" if t.legacy else "")  # escaped: not a rich style tag
        rt.add_row(name, t.extension, t.runtime)
    console.print(rt)
