"""Human-readable output: progress lines, result tables, the graph."""

from __future__ import annotations

import re
import threading
import time

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from edgekit.core import quiet
from edgekit.core.quant import PASSES
from edgekit.targets import TARGETS
from edgekit.core.inspection import shapes_text
from edgekit.core.verify import KINDS

STATUS_STYLE = {"pass": "bold green", "fail": "bold red", "skipped": "yellow"}


# What edgekit itself writes on standard error, line by line, in every command (tests hold stderr to it):
# its messages ("edgekit: error: …", "edgekit: wrote …", "edgekit demo: …") and its progress ("  12.3s step",
# "  12.3s step (4.5 s)", "  12.3s [pid] step" from check's workers, "✓ step 4.5 s" or "✗ …" on a terminal).
# With --json, convert's tables and check's verdicts go there too; with --verbose, the frameworks' output.
OWN_STDERR_LINE = re.compile(r"edgekit( \w+)?: |\s*\d+\.\d+s |[✓✗] ")
SHOWN_SECONDS = 0.1  # a step shorter than this (a result, a note) gets no seconds of its own
STILL_SECONDS = 30.0  # a step running this long says so on its line in a log ("timed" style), then again as often


class Reporter:
    """Progress on standard error, one step per message: a step lasts until the next message, or until
    edgekit writes anything else (a table, a result, an error; `quiet.before_output`).

    style "live" (stderr is a terminal): a spinner line for the step in progress with its seconds so far,
    which becomes "✓ step 4.5 s" (✗ when the command failed in it). "timed" (stderr is a file or a pipe):
    "  12.3s step" (seconds since the start) when it starts, " (4.5 s)" appended when it ends. "lines"
    (--verbose or --debug, when the frameworks' output comes between, or outside a command): the line alone,
    as it starts. Writing through `console` ends the step first.
    """

    def __init__(self, stream, style: str | None = None, clock=time.perf_counter):
        self._console = _console(quiet.plain(stream))
        self.style = style or _progress_style(self._console)
        self.clock = clock
        self.started = clock()
        self._step: tuple[str, float] | None = None  # the step in progress and when it started
        self._live: Live | None = None
        self._lock = threading.RLock()

    @property
    def console(self) -> Console:
        """The console for tables and results; taking it ends the step in progress, so nothing lands mid-line."""
        self.close()
        return self._console

    def step(self, message: str) -> None:
        """Start a step, ending the one in progress as passed; the `progress` callback convert, bench and check
        take. Brackets in `message` are text, not rich markup. Thread-safe."""
        with self._lock:
            now = self.clock()
            self._end(True, now)
            if self.style == "lines":
                self._console.print(f"[dim]{now - self.started:6.1f}s[/dim] {escape(message)}")
                return
            if self.style == "live":
                self._live = Live(_Running(message, now, self.clock), console=self._console, transient=True,
                                  refresh_per_second=8, redirect_stdout=False, redirect_stderr=False)
                self._live.start()
            else:
                self._console.print(f"{now - self.started:6.1f}s {escape(message)}", end="")
                self._beat(message, now, STILL_SECONDS)
            self._step = (message, now)
            quiet.before_output(self.close)

    def _beat(self, message: str, began: float, after: float) -> None:
        """In the "timed" style, a step still in progress `after` seconds on says so on its line (" … 60 s"), and
        again every STILL_SECONDS, so that a log shows a long lowering or calibration is alive."""
        def beat():
            with self._lock:
                if self._step != (message, began):
                    return
                self._console.print(f" … {self.clock() - began:.0f} s", end="")
                self._beat(message, began, STILL_SECONDS)
        timer = threading.Timer(after, beat)
        timer.daemon = True
        timer.start()

    def close(self, ok: bool = True) -> None:
        """End the step in progress (`ok` False: the command failed in it)."""
        with self._lock:
            self._end(ok, self.clock())

    def _end(self, ok: bool, now: float) -> None:
        if self._step is None:
            return
        message, began = self._step
        self._step = None
        quiet.forget(self.close)
        seconds = now - began
        if self.style == "timed":
            self._console.print(f" ({seconds:.1f} s)" if seconds >= SHOWN_SECONDS else "")
            return
        self._live.stop()
        self._live = None
        mark = "[green]✓[/green]" if ok else "[red]✗[/red]"
        took = f" [dim]{seconds:.1f} s[/dim]" if seconds >= SHOWN_SECONDS else ""
        self._console.print(f"{mark} {escape(message)}{took}")


class _Running:
    """The step in progress on a terminal: a spinner, the step, its seconds so far."""

    def __init__(self, message: str, began: float, clock):
        self.spinner = Spinner("dots", style="cyan")
        self.message, self.began, self.clock = message, began, clock

    def __rich_console__(self, console, options):
        self.spinner.update(text=Text.assemble(self.message, (f"  {self.clock() - self.began:.1f} s", "dim")))
        yield self.spinner


def _progress_style(console: Console) -> str:
    if not quiet.guarded():  # --verbose or --debug: the frameworks write between the lines
        return "lines"
    return "live" if console.is_terminal and not console.is_dumb_terminal else "timed"


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
    if src.format == "hf-causal-lm":
        console.print(_lm_table(result))
        _render_notes(result, console)
        return
    table = Table(show_header=True, header_style="bold")
    for col in ("target", "precision", "size", "verdict", "cosine", "max_abs", "sqnr_db", "top1",
                "accuracy src → artifact", "shapes"):
        table.add_column(col, justify="right" if col not in ("target", "precision", "shapes", "verdict") else "left")
    for r in result.artifacts:
        m = r.verdict.metrics.get("output_0", {})
        acc = r.verdict.task_accuracy
        acc_text = f"{acc['reference'] * 100:.2f}% → {acc['artifact'] * 100:.2f}%" if acc else "—"
        top1 = m.get("top1_agreement", m.get("step_top1_agreement"))  # class scores, or class scores per step
        table.add_row(
            _target_label(r.target), r.artifact.precision, _size(r.bytes),
            f"[{STATUS_STYLE[r.verdict.status]}]{r.verdict.status}[/]",
            f"{m['cosine']:.6f}" if "cosine" in m else "—", _fmt(m.get("max_abs"), 3) if m else "—",
            _fmt(m.get("sqnr_db"), 4) if m else "—", f"{top1 * 100:.1f}%" if top1 is not None else "—", acc_text,
            escape(shapes_text(r.verdict.inspection and r.verdict.inspection.io_shapes)),
        )
    console.print(table)
    _render_notes(result, console)


def _lm_table(result) -> Table:
    """A decoder LM's verdicts: its metrics (edgekit.core.lm_verify) and what each artifact was made of."""
    table = Table(show_header=True, header_style="bold")
    for col in ("target", "precision", "size", "verdict", "token agreement", "perplexity src → artifact",
                "logits cosine", "generated", "decode tok/s (1 thread)", "weights", "cache"):
        table.add_column(col, justify="left" if col in ("target", "precision", "verdict", "weights") else "right")
    for r in result.artifacts:
        m, lm = r.verdict.metrics.get("logits", {}), r.artifact.meta.lm or {}
        speed = r.verdict.metrics.get("speed", {})
        ppl = f"{m['perplexity_source']:.3f} → {m['perplexity_artifact']:.3f}" if "perplexity_ratio" in m else "—"
        gen = f"{round(m['generated_agreement'] * m['generated_tokens'])}/{m['generated_tokens']}" if "generated_tokens" in m else "—"
        table.add_row(_target_label(r.target), r.artifact.precision, _size(r.bytes),
                      f"[{STATUS_STYLE[r.verdict.status]}]{r.verdict.status}[/]",
                      f"{m['token_agreement'] * 100:.2f}%" if "token_agreement" in m else "—", ppl,
                      f"{m['logits_cosine']:.5f}" if "logits_cosine" in m else "—", gen,
                      f"{speed['decode_tokens_per_s']:.0f}" if speed.get("decode_tokens_per_s") else "—",
                      escape((lm.get("weights") or {}).get("linear", "—")),
                      _size(lm["cache_bytes"]) + f" ({lm['max_seq_len']} positions)" if lm else "—")
    return table


def _render_notes(result, console: Console) -> None:
    for r in result.artifacts:
        others = len(r.artifact.files) - 1
        extra = f" (+{others} file{'s' if others > 1 else ''} beside it)" if others else ""
        meta = r.artifact.meta
        reused = meta.reused
        how = (" (from the cache)" if r.cached else "") + (
            " (reused " + ", ".join(f"{x['precision']} {x['format']}" for x in reused) + f" of {reused[-1]['built_for']})"
            if reused else "")
        console.print(f"  {r.target}: {r.artifact.path}{extra}  [dim]route {' → '.join(meta.route)},"
                      f" {meta.seconds or 0:.1f} s{how}[/dim]")
        if meta.lm:
            w = meta.lm["weights"]
            kept = f"; kept float: {', '.join(w['kept_float'])}" if w.get("kept_float") else ""
            console.print(f"    [dim]entry points {', '.join(meta.lm['entry_points'])} (prefill {meta.lm['prefill_len']} "
                          f"tokens); weights: linears {escape(w['linear'])}, embedding {escape(w['embedding'])}{escape(kept)}; "
                          f"activations {escape(meta.lm['activations'])}[/dim]")
            speed = r.verdict.metrics.get("speed")
            if speed:
                console.print(f"    [dim]as verified on this CPU, 1 thread: prefill {speed['prefill_tokens_per_s']:.0f} tokens/s, "
                              f"decode {speed['decode_tokens_per_s'] or 0:.0f} tokens/s, peak memory "
                              f"{speed['peak_memory_mib']:.0f} MiB[/dim]")
        for d in meta.outside_delegate:
            console.print(f"    [yellow]note:[/yellow] layer {escape(d.layer or '(top)')} ({d.op}) runs outside the "
                          f"XNNPACK delegate, in portable kernels: the delegate's lowering failed on it ({escape(d.why)})")
        if meta.kept_float:
            layers = ", ".join(f"{d.layer or '(top)'} ({d.op})" for d in meta.kept_float)
            console.print(f"    [yellow]note:[/yellow] kept float at int8: {escape(layers)}: {escape(meta.kept_float[0].why)}")
        upgrade = meta.opset_upgrade
        if upgrade:
            console.print(f"    [yellow]note:[/yellow] upgraded from ONNX opset {upgrade.before} to {upgrade.after}: "
                          f"{upgrade.why}")
        types = meta.int8_types
        if types and types.get("candidates"):
            console.print(f"    [dim]int8 types: {types['activations']} activations × {types['weights']} weights, "
                          f"{escape(types['why'])}[/dim]")
        timed = (types or {}).get("against_fp32")
        if timed and timed["vs_fp32"] >= 1:
            console.print(f"    [yellow]note:[/yellow] this int8 model runs {timed['vs_fp32']:.2f}× the float model's latency "
                          f"in ONNX Runtime on this CPU ({timed['int8_ms']:.3g} vs {timed['fp32_ms']:.3g} ms, 1 thread): "
                          f"{escape(', '.join(timed['float_ops'][:4]))} have no int8 kernel there and run float between "
                          f"dequantize and quantize; for latency keep the fp32 artifact (-p fp32), this one for size")
        if meta.search:
            _render_search(meta.search, console)
        second = r.verdict.second_size
        if second:
            sizes = ", ".join(f"{d['input']} axis {d['axis']}{' (batch)' if d['batch'] else ''} {d['sizes'][0]} → "
                              f"{d['sizes'][1]}" for d in second["dims"])
            console.print(f"    verified at a second size: {escape(sizes)}: "
                          f"[{STATUS_STYLE[second['status']]}]{second['status']}[/]")
        for note in r.verdict.notes:
            console.print(f"    [yellow]note:[/yellow] {escape(note)}")
        for reason in r.verdict.reasons:
            console.print(f"    [red]✗ {reason}[/red]")
    kinds = next((r.verdict.kinds for r in result.artifacts if r.verdict.kinds), {})
    if len(kinds) > 1 or any(k["kind"] != "scores" for k in kinds.values()):
        console.print("  outputs judged as (what each is, by its metrics; from):")
        for name, k in kinds.items():
            metrics = KINDS.get(k["kind"], "").split(": ", 1)[-1]
            console.print(f"    {name}: {k['kind']}, by {escape(metrics)} [dim]({escape(k['basis'])})[/dim]")
    for w in result.warnings:
        console.print(f"[yellow]warning:[/yellow] {w}")


def _render_search(search, console: Console) -> None:
    """The accuracy-aware search (a SearchRecord): its steps, the layers kept back, and why it stopped."""
    console.print(f"    search ({search.conversions} conversions, {search.seconds:.1f} s): {search.why}")
    if search.note:
        console.print(f"    [yellow]note:[/yellow] {search.note}")
    if len(search.steps) == 1:
        return  # full int8 met the budgets: no table of one row
    table = Table(show_header=True, header_style="bold", box=None, padding=(0, 1))
    for col in ("step", "layer", "→", *search.budgets, "int8 share", "size", "result"):
        table.add_column(col, justify="left" if col in ("layer", "→", "result") else "right")
    for row in search.steps:
        values = row.values or {}
        what = f"({PASSES[row.change]})" if row.change in PASSES else row.layer or "(full int8)"
        table.add_row(str(row.step), what, row.precision or "",
                      *(_fmt(values.get(k)) if k in values else "—" for k in search.budgets),
                      f"{row.int8_share:.3f}" if row.int8_share is not None else "—",
                      _size(row.bytes) if row.bytes is not None else "—",
                      f"[green]{row.note}[/green]" if row.accepted else f"[dim]{row.note}[/dim]")
    console.print(table)
    for k in search.kept:
        gains = ", ".join(f"{m} {d:+.4g}" for m, d in k.contribution.items() if d is not None)
        size = f"+{_size(k.bytes)}" if k.bytes >= 0 else f"-{_size(-k.bytes)}"
        console.print(f"    kept back: {k.layer} at {k.precision} ({size}; {gains})")
    for name, label in PASSES.items():
        if search.contributions.get(name):
            gains = ", ".join(f"{m} {d:+.4g}" for m, d in search.contributions[name].items() if d is not None)
            console.print(f"    {label} kept ({gains})")


def render_graph(edges, targets) -> None:
    console = _console()
    table = Table(title="converter edges", header_style="bold",
                  caption="torch: .pt2, .pt, module:factory · tf: SavedModel folders, .keras, .h5")
    for col in ("edge", "from", "to", "precisions", "extra", "available here"):
        table.add_column(col)
    for c in edges:
        avail = "[green]yes[/green]" if c.available() else f"[red]no[/red] — pip install 'edgekit\\[{c.extra}]'"  # \[: not a rich style tag
        table.add_row(c.name, c.source, c.target, ", ".join(c.precisions), c.extra, avail)
    console.print(table)
    rt = Table(title="targets and the runtimes that verify them", header_style="bold")
    for col in ("target", "format", "verified with"):
        rt.add_column(col)
    for t in targets:
        name = t.name + (f" ({', '.join(t.aliases)})" if t.aliases else "") + (" \\[legacy]" if t.legacy else "")  # escaped: not a rich style tag
        rt.add_row(name, t.extension, t.runtime)
    console.print(rt)


def render_bench(report, console: Console | None = None) -> None:
    """`edgekit bench`'s table: latency per thread count (median, p10–p90), int8 ÷ fp32, peak memory."""
    from edgekit.features.bench import render_rows  # local: render is imported by every command; bench only here

    console = console or _console()
    h = report.host
    table = Table(title=f"{h['label']}: {h['cpu'] or h['machine']}, {h['cores']} cores", header_style="bold")
    table.add_column("artifact", overflow="fold")
    for column in ("target", "precision"):
        table.add_column(column)
    for t in (report.artifacts[0].timings if report.artifacts else ()):
        table.add_column(f"{t['threads']} thread{'s' if t['threads'] > 1 else ''}: median (p10–p90)", justify="right")
    table.add_column("int8 ÷ fp32", justify="right")
    table.add_column("peak memory", justify="right")
    for row in render_rows(report):
        table.add_row(*row)
    console.print(table)
