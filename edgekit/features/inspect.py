"""`edgekit inspect`: what artifact files are made of, read from each file alone.

For each .tflite, .pte, .ptl, .onnx or .ort file (the format detected by content) the inspection
`convert` makes of every artifact (edgekit.targets.inspection: int8 weight share, int8 compute and
conv/matmul shares, float ops, delegation, I/O dtypes, I/O shapes with dynamic dimensions, op counts,
largest tensors), plus its files and the precision its name or its weights show. The files may be
anyone's: each is read in a child process (edgekit.engine.isolation.inspect_isolated), so a reader's
native crash is an error naming the file, not a dead command. Importing this module imports no framework.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edgekit.core.errors import BadInput, ConversionFailed, reading
from edgekit.core.formats import artifact_files, detect, split_name
from edgekit.core.inspection import Inspection
from edgekit.engine.isolation import inspect_isolated
from edgekit.targets import TARGETS

SCHEMA = "edgekit.inspect/1"
ARTIFACT_FORMATS = tuple(t.format for t in TARGETS.values())


@dataclass(frozen=True)
class Inspected:
    """One artifact file: where, its format and precision, its files (the artifact first) and its inspection."""

    path: str
    format: str
    precision: str
    precision_source: str  # "name" or "inspection"
    files: tuple[tuple[str, int], ...]
    inspection: Inspection

    @property
    def bytes(self) -> int:
        """Total size of all its files (side files included), as measured when it was inspected."""
        return sum(n for _, n in self.files)

    def to_json(self) -> dict:
        """One entry of the `edgekit inspect --json` document: the fields, the total bytes, files as {path, bytes}."""
        return {"path": self.path, "format": self.format, "precision": self.precision,
                "precision_source": self.precision_source, "bytes": self.bytes,
                "files": [{"path": p, "bytes": n} for p, n in self.files], "inspection": self.inspection.to_json()}


def inspect_files(paths) -> list[Inspected]:
    """Inspect each artifact file of `paths`, in order; a file that is missing, a folder, not an artifact,
    damaged or crashing its reader is a BadInput naming it."""
    out = []
    for given in paths:
        p = Path(given)
        if p.is_dir():
            raise BadInput(f"{p} is a folder", fix="give artifact files (edgekit report scans folders)")
        fmt = detect(p)  # a clear BadInput for a missing, damaged or unrecognised file
        if fmt not in ARTIFACT_FORMATS:
            raise BadInput(f"{p} is a {fmt} model, not an edge artifact", fix="give .tflite, .pte, .ptl, .onnx or .ort files")
        with reading(p, f"the .{fmt} artifact"):
            files = tuple((f, Path(f).stat().st_size) for f in artifact_files(fmt, p))  # refuses data outside
        try:
            inspection = inspect_isolated(fmt, str(p))
        except ConversionFailed as e:  # the reader crashed or hung on this file
            raise BadInput(f"{p}: {e.message}", fix="the file is damaged or not a valid artifact; "
                                                   "give the file as the converter wrote it") from None
        named = split_name(p)[1]
        precision = named or inspection.precision
        out.append(Inspected(str(p), fmt, precision, "name" if named else "inspection", files, inspection))
    return out


def to_json(items: list[Inspected]) -> dict:
    return {"schema": SCHEMA, "artifacts": [i.to_json() for i in items]}
