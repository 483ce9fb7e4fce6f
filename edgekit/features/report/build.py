"""`edgekit report`, the facts: what every artifact is made of, measured (`build_report` → `Report`).

For each artifact (a file, or every .tflite/.pte/.ptl/.onnx/.ort under a folder; the format is
detected by content) an `ArtifactSize` holds:

- its files and their bytes, side files included: ONNX external data, the
  `<stem>.required_operators.config` beside an .ort, and `<artifact>.io.json` integer-I/O sidecars;
- its precision: from the name edgekit gives non-fp32 artifacts (`<stem>.<precision>.<ext>`), else
  from the inspection (int8 when int8 weights are at least half the weight bytes, fp16 when
  float16 weights are, otherwise fp32);
- the fp32 artifact of the same stem and format (beside it), when there is one, for the ratio to it;
- its parameter count (weight elements, from the weight bytes by dtype), which with the bytes per
  element of its precision (4 fp32, 2 fp16, 1 int8) sets the lower bound of its size;
- its weight bytes by dtype, its op counts, its largest tensors and its input and output shapes, a
  dynamic dimension marked (`inspect_artifact`).

Turning a `Report` into JSON, Markdown, HTML or a terminal table is edgekit.features.report.render.
Importing this module imports no framework.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from edgekit.core.errors import BadInput, reading
from edgekit.core.formats import NAME_PRECISIONS, artifact_files, detect, split_name
from edgekit.core.inspection import duplicate_text, executed_text, need_text
from edgekit.core.quant import Precision
from edgekit.core.quiet import captured
from edgekit.targets import TARGETS
from edgekit.targets.inspection import inspect_artifact

ARTIFACT_FORMATS = {t.format: t.extension for t in TARGETS.values()}  # in the targets' order
SCAN_EXTENSIONS = frozenset(ARTIFACT_FORMATS.values())
BYTES_PER_PARAM = {"fp32": 4, "fp16": 2, "int8": 1, "int8-dynamic": 1}
DTYPE_BYTES = {
    "float64": 8, "double": 8, "float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2,
    "int64": 8, "uint64": 8, "int32": 4, "uint32": 4, "int16": 2, "uint16": 2, "int8": 1, "uint8": 1,
    "bool": 1, "int4": 0.5, "uint4": 0.5, "complex64": 8, "complex128": 16,
}


@dataclass(frozen=True)
class ArtifactSize:
    """One artifact measured from its files alone (see the module's docstring). `precision` comes from its name
    where edgekit named it, else from its weights; the fp32 fields are None without an fp32 partner."""

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
    io_shapes: dict = field(default_factory=dict)  # the inspection's: {"inputs": [...], "outputs": [...]}
    needs: tuple = ()  # the inspection's RuntimeNeeds: what it needs beyond a default runtime
    duplicated_bytes: int = 0  # constant bytes stored more than once (the inspection's)
    executed: dict | None = None  # the inspection's: the int8 shares as the runtime runs it (quantized files)
    lm: dict | None = None  # the inspection's: a decoder LM's entry points, cache and weight groups

    @property
    def runtime_needs(self) -> tuple[str, ...]:
        """The ids of what an app must ship beyond the runtime's default build to load it; () when nothing."""
        return tuple(n.id for n in self.needs)

    @property
    def needed_modules(self) -> tuple[str, ...]:
        """What a process running it imports for its needs."""
        return tuple(sorted({m for n in self.needs for m in n.modules}))

    @property
    def bytes(self) -> int:
        """What it takes on disk: the artifact and its side files."""
        return sum(n for _, n in self.files)

    @property
    def weight_bytes(self) -> int:
        """Bytes of its constants over every dtype, as the inspection counted them."""
        return sum(self.weight_bytes_by_dtype.values())

    @property
    def lower_bound_bytes(self) -> int:
        """The least the weights alone take at its precision: parameters × bytes per element (4 if unknown)."""
        return self.parameters * BYTES_PER_PARAM.get(self.precision, 4)

    @property
    def ratio_to_lower_bound(self) -> float | None:
        """`bytes` ÷ `lower_bound_bytes` (1 is no overhead), to 4 decimals; None when it has no parameters."""
        return round(self.bytes / self.lower_bound_bytes, 4) if self.lower_bound_bytes else None

    @property
    def ratio_to_fp32(self) -> float | None:
        """`bytes` ÷ its fp32 partner's bytes, to 4 decimals; None without a partner (and for fp32 itself)."""
        return round(self.bytes / self.fp32_bytes, 4) if self.fp32_bytes else None


@dataclass(frozen=True)
class Report:
    """What `build_report` found, ordered by folder, stem, format and precision; `latency` stays empty unless
    the artifacts were timed too (`edgekit report --bench`)."""

    artifacts: tuple[ArtifactSize, ...]
    skipped: tuple[dict, ...] = ()  # {"path", "reason"}: files found in a folder that are not artifacts
    notes: tuple[str, ...] = field(default=())
    latency: dict = field(default_factory=dict)  # artifact path → its timing (edgekit.bench/1's entry), when timed

    @property
    def total_bytes(self) -> int:
        """Every artifact's bytes, side files included; fp32 partners only found beside an artifact are not counted."""
        return sum(a.bytes for a in self.artifacts)


def build_report(paths) -> Report:
    """Size report over `paths`: artifact files, or folders scanned (recursively) for artifacts."""
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
    with reading(path, f"the .{fmt} artifact"), captured():  # the frameworks' import chatter stays off stderr
        files = tuple((f, Path(f).stat().st_size) for f in artifact_files(fmt, path))  # refuses data outside
        ins = inspect_artifact(fmt, str(path))
    stem, named = split_name(path)
    inspected = ins.precision
    notes = []
    if named is not None:
        precision, source = named, "name"
        if Precision(named).looks != inspected:
            notes.append(f"named {named} but its weights look {inspected}")
    else:
        precision, source = inspected, "inspection"
    notes += [need_text(n) for n in ins.needs] + [duplicate_text(d) for d in ins.duplicates]
    notes += [f"as it runs: {executed_text(ins.executed)}"] if ins.executed else []
    return ArtifactSize(
        path=str(path), format=fmt, precision=precision, precision_source=source, inspected_precision=inspected,
        stem=stem, files=files, parameters=parameter_count(ins.weight_bytes_by_dtype),
        weight_bytes_by_dtype=dict(ins.weight_bytes_by_dtype), int8_weight_share=ins.int8_weight_share,
        op_counts=dict(ins.op_counts), largest_tensors=tuple(ins.largest_tensors), notes=tuple(notes),
        io_shapes=dict(ins.io_shapes), needs=tuple(ins.needs), duplicated_bytes=ins.duplicated_bytes,
        executed=dict(ins.executed) if ins.executed else None,
        lm=ins.lm,
    )


def _link_fp32(sizes: list[ArtifactSize]) -> list[ArtifactSize]:
    """Attach to each non-fp32 artifact the fp32 artifact of the same folder, stem and format."""
    fp32 = {(str(Path(a.path).resolve().parent), a.stem, a.format): a for a in sizes if a.precision == Precision.FP32}
    out = []
    for a in sizes:
        if a.precision == Precision.FP32:
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
