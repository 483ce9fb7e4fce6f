"""ModelArtifact: the frozen value each stage of a conversion hands to the next."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping

from edgekit.core.quant import QuantSpec
from edgekit.core.search_record import SearchRecord
from edgekit.core.signature import Signature

# Facts about a quantized ONNX model that the later steps of its route keep (an .ort made from it).
CARRIED = ("int8_types", "opset_upgrade")
# Reported in a result's JSON when a route recorded them, in this order (after route, tool versions,
# seconds and calibration, which every result has).
REPORTED = ("quantization", "int8_types", "opset_upgrade", "outside_delegate", "search", "mobile_package", "reused")


@dataclass(frozen=True)
class ArtifactMeta:
    """What the steps of a route learned about the artifact they made, typed; JSON only in a result's
    document and in the artifact cache (`to_json` / `from_json`). Records that are themselves reports
    (the calibration's candidates, a mobile-package verdict) stay JSON-shaped."""

    route: tuple[str, ...] = ()  # the formats from the source on
    tool_versions: Mapping[str, str] = field(default_factory=dict)
    seconds: float | None = None  # the whole route's conversion time
    calibration: Mapping | None = None  # source, samples, method (and `auto`'s candidates)
    quantization: QuantSpec | None = None  # the int8 spec as made
    search: SearchRecord | None = None  # the accuracy-aware search's record (edgekit.engine.search)
    int8_types: Mapping | None = None  # an int8 ONNX model's activation and weight types
    opset_upgrade: Mapping | None = None  # an ONNX model upgraded before quantization: from, to, why
    outside_delegate: tuple[Mapping, ...] = ()  # .pte nodes left to the portable kernels
    mobile_package: Mapping | None = None  # whether an .ort fits ONNX Runtime's mobile packages
    ort_format: Mapping | None = None  # how an .ort was optimized
    reused: tuple[Mapping, ...] = ()  # steps reused from another target's route in the same run

    def to_json(self, everything: bool = False) -> dict:
        """The result document's fields (`everything`: every field set, for the cache)."""
        out = {"route": list(self.route), "tool_versions": dict(self.tool_versions), "seconds": self.seconds,
               "calibration": self.calibration}
        for name in REPORTED if not everything else [f.name for f in fields(self) if f.name not in out]:
            value = getattr(self, name)
            if value is None or value == ():
                continue
            out[name] = value.to_json() if hasattr(value, "to_json") else list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_json(cls, d: Mapping) -> "ArtifactMeta":
        """Inverse of `to_json(everything=True)`; keys that are not fields (another version's) are dropped."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in d.items() if k in known}
        for name in ("route", "outside_delegate", "reused"):
            if name in values:
                values[name] = tuple(values[name])
        if values.get("quantization") is not None:
            values["quantization"] = QuantSpec.from_json(values["quantization"])
        if values.get("search") is not None:
            values["search"] = SearchRecord.from_json(values["search"])
        return cls(**values)


@dataclass(frozen=True)
class ModelArtifact:
    """A model in one format at one place.

    `path` is a file, a directory or an import spec; `files` lists every file the artifact is
    made of (an ONNX model with external data has two); `meta` carries what the stages learned.
    """

    format: str
    path: str
    signature: Signature
    precision: str = "fp32"
    files: tuple[str, ...] = ()
    meta: ArtifactMeta = ArtifactMeta()

    def __post_init__(self):
        if not self.files and Path(self.path).is_file():
            object.__setattr__(self, "files", (self.path,))

    def evolve(self, **changes: Any) -> "ModelArtifact":
        """A new artifact with `changes` to its fields."""
        return replace(self, **changes)

    def noting(self, **facts: Any) -> "ModelArtifact":
        """A new artifact whose meta has `facts` (ArtifactMeta fields) too."""
        return replace(self, meta=replace(self.meta, **facts))

    @property
    def bytes(self) -> int:
        """Size on disk of every file in `files` (0 when none are listed, as for an import spec)."""
        return sum(Path(f).stat().st_size for f in self.files)

    @property
    def sha256(self) -> str:
        """Hash over every file of the artifact, in order."""
        return sha256_files(self.files)


def sha256_files(paths) -> str:
    """One SHA-256 over the bytes of `paths`, in order."""
    h = hashlib.sha256()
    for f in paths:
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()
