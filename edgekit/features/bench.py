"""`edgekit bench`: host CPU latency of artifacts in their own runtimes, and whether int8 is faster.

`bench(paths)` finds the artifacts as `edgekit report` does (files, or folders scanned; precision from
the name or the weights; each int8 artifact's fp32 artifact of the same stem and format beside it,
timed too when not given) and times each one in a new process of its runtime (edgekit.targets.latency:
warm-up, then runs until the median settles; at 1 thread and at every core), with that process's peak
memory. For an int8 artifact with an fp32 partner, `ratio_to_fp32` is int8 latency ÷ fp32 latency per
thread count; where it is not below 1 a warning says so, with the likely reasons read from the int8
file (`slow_int8_reasons`): float ops between int8 ones, quantize/dequantize ops switching between
int8 and float, ops outside the delegate. An .ort laid out for another kind of CPU than the host's (its
metadata says which, `--ort-platform`) is warned about whatever its ratio. The figures are host CPU latency:
a phone's CPU, NPU or GPU gives others.
"""

from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from edgekit.core.cpu import cpu_kind, int8_products_saturate
from edgekit.core.errors import BadInput, ConversionFailed, reading
from edgekit.core.quant import Precision
from edgekit.core.quiet import captured
from edgekit.core.results import ConvertResult
from edgekit.core.verify import Status
from edgekit.engine.pipeline import ConvertRequest, convert
from edgekit.engine.isolation import latency_isolated
from edgekit.core.formats import split_name
from edgekit.features.report import build_report
from edgekit.features.report.build import ARTIFACT_FORMATS
from edgekit.targets import by_format
from edgekit.core.inspection import Inspection
from edgekit.targets.inspection import HEAVY_OPS, inspect_artifact
from edgekit.targets.ort.inspect import laid_out_for

SCHEMA = "edgekit.bench/1"
LABEL = "host CPU latency"
QDQ_OPS = re.compile(r"^(QUANTIZE|DEQUANTIZE)$")  # LiteRT's switches between int8 and float tensors
SHOWN = 4  # float ops named in a warning
MAX_FACTOR = 10  # a median that never settles is timed for at most this many times --min-seconds
PREFILL_TOKENS = 32  # a decoder LM whose graph takes any token count is timed prefilling this many


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def parse_threads(text: str) -> tuple[int, ...]:
    """"1,all" → (1, cores); each count once, in the order given."""
    out: list[int] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if part == "all":
            n = cores()
        elif part.isdigit() and int(part) > 0:
            n = int(part)
        else:
            raise BadInput(f"--threads {text!r}: {part!r} is not a thread count", fix="give counts like 1,all or 1,4")
        if n not in out:
            out.append(n)
    if not out:
        raise BadInput("--threads is empty", fix="give counts like 1,all")
    return tuple(out)


def host() -> dict:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    return {"label": LABEL, "machine": platform.machine(), "cpu": model or platform.processor(), "cores": cores()}


@dataclass(frozen=True)
class ArtifactLatency:
    """One artifact timed on the host CPU in a new process of its runtime, with that process's memory.
    `ratio_to_fp32` is empty unless it is below fp32 and its fp32 partner was timed too."""

    path: str
    format: str
    precision: str
    timings: tuple[dict, ...]  # edgekit.targets.latency.Timing as JSON, one per thread count
    peak_rss_bytes: int
    runtime_rss_bytes: int
    inputs: tuple[dict, ...]  # what was fed: name, shape, dtype
    fp32_path: str | None = None
    ratio_to_fp32: dict[int, float] = field(default_factory=dict)  # threads → int8 ÷ fp32 median latency
    warnings: tuple[str, ...] = ()
    given: bool = True  # False: an fp32 partner timed for the ratio, not named by the user

    @property
    def runtime(self) -> str:
        """The runtime it was timed in, by the name tables and warnings give it."""
        return by_format(self.format).runtime

    def median_ms(self, threads: int) -> float | None:
        """The median latency in milliseconds at `threads` threads; None when not timed at that count."""
        return next((t["median_ms"] for t in self.timings if t["threads"] == threads), None)

    def to_json(self) -> dict:
        """Every field and the runtime; `ratio_to_fp32`'s thread counts become string keys, as JSON needs."""
        return {"path": self.path, "format": self.format, "runtime": self.runtime, "precision": self.precision,
                "timings": list(self.timings), "peak_rss_bytes": self.peak_rss_bytes,
                "runtime_rss_bytes": self.runtime_rss_bytes, "inputs": list(self.inputs), "fp32_path": self.fp32_path,
                "ratio_to_fp32": {str(k): v for k, v in self.ratio_to_fp32.items()}, "warnings": list(self.warnings),
                "given": self.given}


@dataclass(frozen=True)
class BenchReport:
    """What `edgekit bench` found: the host, every artifact timed (fp32 partners too, with `given` False) and
    the files skipped, each with its reason."""

    host: dict
    artifacts: tuple[ArtifactLatency, ...]
    skipped: tuple[dict, ...] = ()
    notes: tuple[str, ...] = ()  # e.g. an artifact timed although it failed verification

    @property
    def warnings(self) -> tuple[str, ...]:
        """The report's notes, then each artifact's warnings (int8 not faster than fp32, with likely reasons)."""
        return self.notes + tuple(w for a in self.artifacts for w in a.warnings)

    def by_path(self) -> dict[str, ArtifactLatency]:
        """Each artifact by its resolved path, so a file's timing is found however its path was spelled."""
        return {str(Path(a.path).resolve()): a for a in self.artifacts}

    def to_json(self) -> dict:
        """The `edgekit bench --json` document (schema SCHEMA); the notes appear only within `warnings`."""
        return {"schema": SCHEMA, "host": self.host, "artifacts": [a.to_json() for a in self.artifacts],
                "skipped": list(self.skipped), "warnings": list(self.warnings)}


def bench(paths, *, threads: tuple[int, ...] | None = None, inputs: str | None = None, shapes: dict | None = None,
          min_seconds: float = 1.0, progress: Callable[[str], None] | None = None,
          partners: dict[str, str] | None = None) -> BenchReport:
    """Time every artifact of `paths` (files or folders) in its runtime; see the module's docstring.
    `partners`: artifact path → the fp32 artifact to compare it with, where it is not beside it."""
    say = progress or (lambda _msg: None)
    threads = threads or parse_threads("1,all")
    sizes = build_report(paths)
    partner = {str(Path(k).resolve()): v for k, v in (partners or {}).items()}
    todo = [(a.path, a.format, a.precision, a.fp32_path or partner.get(str(Path(a.path).resolve())), True)
            for a in sizes.artifacts]
    needed = {str(Path(a.path).resolve()): a.needed_modules for a in sizes.artifacts}
    lms = {str(Path(a.path).resolve()): lm_timing(a.lm) for a in sizes.artifacts if a.lm}
    named = {str(Path(a.path).resolve()) for a in sizes.artifacts}
    for path, fmt, _, fp32_path, _ in list(todo):  # an int8 artifact's fp32 partner is timed too, for the ratio
        if fp32_path and str(Path(fp32_path).resolve()) not in named:
            named.add(str(Path(fp32_path).resolve()))
            todo.append((fp32_path, fmt, Precision.FP32, None, False))
            if str(Path(path).resolve()) in lms:  # the same decoder LM at fp32
                lms[str(Path(fp32_path).resolve())] = lms[str(Path(path).resolve())]
    measured: dict[str, ArtifactLatency] = {}
    skipped = list(sizes.skipped)
    for path, fmt, precision, fp32_path, given in todo:
        if fmt == "ptl" and not shapes:
            skipped.append({"path": str(path), "reason": "a .ptl file records no input shapes: pass --input-shape "
                                                         "NAME=1,3,224,224 (one per input, in call order) to time it"})
            continue
        say(f"timing {Path(path).name} in {by_format(fmt).runtime} at {', '.join(map(str, threads))} thread(s)")
        try:
            lm = lms.get(str(Path(path).resolve()))  # a decoder LM is fed seeded random tokens, not `inputs`
            got = latency_isolated(fmt, path, threads, inputs=None if lm else inputs, shapes=shapes, min_seconds=min_seconds,
                                   max_seconds=MAX_FACTOR * min_seconds, needed=needed.get(str(Path(path).resolve()), ()),
                                   lm=lm)
        except ConversionFailed as e:
            raise BadInput(f"{path}: {e.message}", fix="check that the file is an artifact its runtime loads; "
                                                        "a .ptl needs --input-shape") from None
        measured[str(Path(path).resolve())] = ArtifactLatency(
            str(path), fmt, precision, tuple(got["timings"]), got["peak_rss_bytes"], got["runtime_rss_bytes"],
            tuple(got["inputs"]), fp32_path, given=given, warnings=_layout_warning(path, fmt))
    out = []
    for a in measured.values():
        ref = measured.get(str(Path(a.fp32_path).resolve())) if a.fp32_path else None
        if ref is not None and a.precision != Precision.FP32:
            a = _with_ratio(a, ref)
        out.append(a)
    order = list(ARTIFACT_FORMATS)  # as `report` orders them: by folder, model, format, fp32 first
    out.sort(key=lambda a: (str(Path(a.path).resolve().parent), split_name(Path(a.path))[0], order.index(a.format),
                            a.precision != Precision.FP32, a.path))
    return BenchReport(host(), tuple(out), tuple(skipped))


def lm_timing(lm: dict) -> dict:
    """What the timing child needs of a decoder LM (its inspection's `lm`): the prefill call's token count (an
    artifact taking any count is timed at PREFILL_TOKENS), the cache's shape and the vocabulary."""
    counts = [n for name, n in lm["entry_points"].items() if name != "decode" and n]
    return {"prefill_len": counts[0] if counts else min(PREFILL_TOKENS, lm["max_seq_len"] // 2),
            "cache_shape": lm["cache"]["shape"], "vocab": lm["vocab"]}


def bench_conversion(req: ConvertRequest, *, threads: tuple[int, ...] | None = None, inputs: str | None = None,
                     min_seconds: float = 1.0, progress: Callable[[str], None] | None = None,
                     cache=None) -> BenchReport:
    """Convert `req` (verified, as `edgekit convert` does) and time what it placed (see bench_result)."""
    return bench_result(req, convert(req, progress, cache=cache), threads=threads, inputs=inputs,
                        min_seconds=min_seconds, progress=progress, cache=cache)


def bench_result(req: ConvertRequest, result: ConvertResult, *, threads: tuple[int, ...] | None = None,
                 inputs: str | None = None, min_seconds: float = 1.0,
                 progress: Callable[[str], None] | None = None, cache=None) -> BenchReport:
    """Time the artifacts a conversion placed. Below fp32, the fp32 artifacts of the same targets are
    made too (verified, into the same folder; from the cache when it holds them) for the ratio."""
    results, failures = list(result.artifacts), list(result.failures)
    if req.precision != Precision.FP32:
        twin = ConvertRequest(req.source, req.targets, req.out_dir, eval_data=req.eval_data,
                              source_options=req.source_options, output_kinds=req.output_kinds,
                              ort_platform=req.ort_platform, time_budget=req.time_budget)
        made = convert(twin, progress, cache=cache)
        results += made.artifacts
        failures += made.failures
    failed = tuple(f"{Path(r.artifact.path).name} failed verification: {'; '.join(r.verdict.reasons)}"
                   for r in results if r.verdict.status == Status.FAIL)
    failed += tuple(f"{f.target}: no artifact to time: {f.message}" for f in failures)
    shapes = {spec.name: list(spec.shape) for spec in result.source.signature.inputs}  # a .ptl records none
    report = bench([r.artifact.path for r in results], threads=threads, inputs=inputs or req.eval_data,
                   shapes=shapes, min_seconds=min_seconds, progress=progress)
    return BenchReport(report.host, report.artifacts, report.skipped, failed)


def _layout_warning(path: str, fmt: str) -> tuple[str, ...]:
    """An .ort laid out for the other kind of CPU than this host's: its timing is not what either CPU sees."""
    if fmt != "ort":
        return ()
    made_for, here = laid_out_for(path), cpu_kind()
    if made_for is None or here is None or made_for == here:
        return ()
    return (f"{Path(path).name} is laid out for {made_for} CPUs (--ort-platform {made_for}) and was timed on this "
            f"{platform.machine()} host, which runs it without that layout: its latency and its ratio to fp32 are "
            f"not what an {made_for} device sees; convert with --ort-platform {here} to time it as this host runs "
            f"it, or time this file on the device",)


def _with_ratio(a: ArtifactLatency, ref: ArtifactLatency) -> ArtifactLatency:
    ratios = {t["threads"]: t["median_ms"] / ref.median_ms(t["threads"]) for t in a.timings
              if ref.median_ms(t["threads"])}
    slow = {n: r for n, r in ratios.items() if r >= 1.0}
    warnings = a.warnings
    if slow:
        with reading(a.path, f"the .{a.format} artifact"), captured():
            ins = inspect_artifact(a.format, a.path)
        at = ", ".join(f"{r:.2f}× the fp32 latency at {n} thread{'s' if n > 1 else ''}" for n, r in slow.items())
        warnings += (f"{Path(a.path).name}: int8 is not faster than fp32 in {a.runtime} ({at}); likely: "
                     + "; ".join(slow_int8_reasons(ins)),)
    return ArtifactLatency(a.path, a.format, a.precision, a.timings, a.peak_rss_bytes, a.runtime_rss_bytes, a.inputs,
                           a.fp32_path, ratios, warnings, a.given)


def slow_int8_reasons(ins: Inspection) -> list[str]:
    """Why an int8 artifact may run slower than its fp32 one, read from the file (and from the graph its runtime
    makes of it, where the reader asks the runtime: `Inspection.executed`)."""
    reasons = []
    ran = ins.executed
    if ran and ran["int8_heavy_op_share"] < 1:
        heavy = [f for f in ran["float_ops"] if HEAVY_OPS.search(f.split(" ×")[0])]
        macs = f" ({1 - ran['int8_mac_share']:.0%} of their MACs)" if ran.get("int8_mac_share") is not None else ""
        reasons.append(f"as {ran['runtime'].split(',')[0]} runs it, {1 - ran['int8_heavy_op_share']:.0%} of the "
                       f"conv/matmul ops{macs} are float kernels: {', '.join(heavy[:SHOWN])}")
    elif ran and ran["float_ops"]:
        reasons.append(f"as {ran['runtime'].split(',')[0]} runs it, {1 - ran['int8_compute_share']:.0%} of the compute "
                       f"ops have no int8 kernel there and run float between dequantize and quantize: "
                       f"{', '.join(ran['float_ops'][:SHOWN])}")
    if ran and ran.get("outside_delegate"):
        parts = ran["delegate_partitions"]
        reasons.append(f"as {ran['runtime'].split(',')[0]} runs it, {', '.join(ran['outside_delegate'][:SHOWN])} run outside "
                       f"the XNNPACK delegate, in the runtime's own kernels, "
                       + (f"splitting it into {parts} parts" if parts else "and nothing runs in the delegate"))
    if ins.format == "tflite":
        switches = {op: n for op, n in ins.op_counts.items() if QDQ_OPS.match(op)}
        if switches:
            reasons.append(" + ".join(f"{n} {op}" for op, n in sorted(switches.items(), reverse=True))
                           + " ops switch tensors between int8 and float")
    unfused = [o for o in ins.ops if o.mode == "qdq_float"]
    if unfused:
        reasons.append(f"{len(unfused)} ops run as float kernels between quantize/dequantize pairs left unfused")
    if ins.float_ops:
        reasons.append("float ops between int8 ones: " + ", ".join(ins.float_ops[:SHOWN])
                       + (f" and {len(ins.float_ops) - SHOWN} more" if len(ins.float_ops) > SHOWN else ""))
    reasons += [n for n in ins.notes if "may keep them float" in n]
    if ins.format in ("onnx", "ort") and int8_products_saturate():
        reasons.append("this CPU has no VNNI: ONNX Runtime's int8 products take several instructions each")
    return reasons or ["the file shows no float islands or unfused quantize/dequantize ops: this runtime's int8 "
                       "kernels are slower than its float ones on this CPU"]


def render_rows(report: BenchReport) -> list[list[str]]:
    """Table rows: artifact, target, precision, latency per thread count, ratio to fp32, peak memory."""
    rows = []
    for a in report.artifacts:
        cells = [Path(a.path).name, by_format(a.format).name, a.precision]
        for t in a.timings:
            cells.append(f"{t['median_ms']:.3g} ms ({t['p10_ms']:.3g}–{t['p90_ms']:.3g})" + (
                f" per token: decode {t['decode_tokens_per_s']:.0f} tokens/s, prefill {t['prefill_tokens_per_s']:.0f} tokens/s"
                if "decode_tokens_per_s" in t else ""))
        cells.append(" / ".join(f"{r:.2f}×" for r in a.ratio_to_fp32.values()) or "–")
        cells.append(f"{a.peak_rss_bytes / 2**20:.0f} MiB")
        rows.append(cells)
    return rows
