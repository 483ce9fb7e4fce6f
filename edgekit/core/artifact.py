"""ModelArtifact: the frozen value each stage of a conversion hands to the next."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping

from edgekit.core.quant import Method, QuantSpec
from edgekit.core.search_record import SearchRecord
from edgekit.core.signature import Signature

# Facts about a quantized ONNX model that the later steps of its route keep (an .ort made from it).
CARRIED = ("int8_types", "opset_upgrade", "kept_float")
# Reported in a result's JSON when a route recorded them, in this order (after route, tool versions,
# seconds and calibration, which every result has).
REPORTED = ("quantization", "int8_types", "opset_upgrade", "outside_delegate", "kept_float", "search", "mobile_package", "reused", "lm")


# Where `auto` measured a candidate's drift (CalibrationCandidate.measured_on).
IN_RUNTIME = "the artifact in its runtime"
BEFORE_LOWERING = "the quantized graph before lowering"  # a PT2E graph in torch, its int8 ops the reference ones


@dataclass(frozen=True)
class CalibrationCandidate:
    """One method `auto` tried: the spec's method and passes, and its drift on the held-out samples with where
    it was measured (IN_RUNTIME, or BEFORE_LOWERING: a PT2E candidate not close enough to the best to be
    lowered), or the error that left it out (a candidate the backend failed on)."""

    method: Method
    bias_correction: bool
    smooth_quant: bool
    sqnr_db: float | None = None  # None: identical outputs (or not measured, with an error)
    cosine: float | None = None  # None for an output without one (a single score)
    max_abs: float | None = None
    error: str | None = None
    measured_on: str | None = None  # IN_RUNTIME or BEFORE_LOWERING; None with an error

    def to_json(self) -> dict:
        """method and passes; then the error, or the drift and where it was measured."""
        out = {"method": self.method, "bias_correction": self.bias_correction, "smooth_quant": self.smooth_quant}
        return {**out, "error": self.error} if self.error is not None else {
            **out, "sqnr_db": self.sqnr_db, "cosine": self.cosine, "max_abs": self.max_abs, "measured_on": self.measured_on}

    @classmethod
    def from_json(cls, d: Mapping) -> "CalibrationCandidate":
        """Inverse of `to_json`."""
        return cls(Method(d["method"]), d["bias_correction"], d["smooth_quant"], d.get("sqnr_db"), d.get("cosine"),
                   d.get("max_abs"), d.get("error"), d.get("measured_on"))


@dataclass(frozen=True)
class CalibrationRecord:
    """Where an int8 artifact's ranges came from: the samples' source and count and the method used; with
    `--calib-method auto`, every candidate measured on `held_out_samples` (`requested` is then AUTO); where the
    default recipe chose between methods (Capabilities.default_methods), its candidates, measured on
    `chosen_on_calibration_samples` of the calibration samples (or a search's `held_out_samples`)."""

    source: str
    samples: int
    method: Method
    requested: Method | None = None
    held_out_samples: int | None = None
    calibration_passes: int | None = None  # auto's passes over the samples, where its candidates share them
    candidates: tuple[CalibrationCandidate, ...] = ()
    chosen_on_calibration_samples: int | None = None  # the default recipe's choice, made on calibration samples

    def to_json(self) -> dict:
        """source, samples, method; with auto, requested, held_out_samples and the candidates too; with the
        default recipe's choice, the samples it was made on and the candidates."""
        out = {"source": self.source, "samples": self.samples, "method": self.method}
        if self.requested is not None:
            out.update(requested=self.requested, held_out_samples=self.held_out_samples)
            if self.calibration_passes is not None:
                out["calibration_passes"] = self.calibration_passes
        elif self.candidates:
            out.update({k: v for k, v in (("held_out_samples", self.held_out_samples),
                                          ("chosen_on_calibration_samples", self.chosen_on_calibration_samples)) if v})
        if self.candidates or self.requested is not None:
            out["candidates"] = [c.to_json() for c in self.candidates]
        return out

    @classmethod
    def from_json(cls, d: Mapping) -> "CalibrationRecord":
        """Inverse of `to_json`."""
        return cls(d["source"], d["samples"], Method(d["method"]), d.get("requested") and Method(d["requested"]),
                   d.get("held_out_samples"), d.get("calibration_passes"),
                   tuple(CalibrationCandidate.from_json(c) for c in d.get("candidates", ())),
                   d.get("chosen_on_calibration_samples"))


@dataclass(frozen=True)
class LayerNote:
    """A layer an int8 route treated apart, and why: left out of a delegate by its lowering
    (`ArtifactMeta.outside_delegate`) or kept float by design (`ArtifactMeta.kept_float`). `layer` is the
    module path ("" for the model's top)."""

    layer: str
    op: str
    why: str

    def to_json(self) -> dict:
        """{"layer", "op", "why"}."""
        return {"layer": self.layer, "op": self.op, "why": self.why}

    @classmethod
    def from_json(cls, d: Mapping) -> "LayerNote":
        """Inverse of `to_json`."""
        return cls(d["layer"], d["op"], d["why"])


@dataclass(frozen=True)
class OpsetUpgrade:
    """An ONNX model upgraded to a later opset before quantization, and why."""

    before: int
    after: int
    why: str

    def to_json(self) -> dict:
        """{"from", "to", "why"}."""
        return {"from": self.before, "to": self.after, "why": self.why}

    @classmethod
    def from_json(cls, d: Mapping) -> "OpsetUpgrade":
        """Inverse of `to_json`."""
        return cls(d["from"], d["to"], d["why"])


@dataclass(frozen=True)
class ArtifactMeta:
    """What the steps of a route learned about the artifact they made, typed; JSON only in a result's
    document and in the artifact cache (`to_json` / `from_json`). Records that are themselves reports
    (a mobile-package verdict, how an .ort was optimized) stay JSON-shaped."""

    route: tuple[str, ...] = ()  # the formats from the source on
    tool_versions: Mapping[str, str] = field(default_factory=dict)
    seconds: float | None = None  # the whole route's conversion time
    calibration: CalibrationRecord | None = None  # where the int8 ranges came from
    quantization: QuantSpec | None = None  # the int8 spec as made
    search: SearchRecord | None = None  # the accuracy-aware search's record (edgekit.engine.search)
    int8_types: Mapping | None = None  # an int8 ONNX model's activation and weight types
    opset_upgrade: OpsetUpgrade | None = None  # an ONNX model upgraded before quantization
    outside_delegate: tuple[LayerNote, ...] = ()  # .pte layers left to the portable kernels
    kept_float: tuple[LayerNote, ...] = ()  # layers an int8 route left float by design
    mobile_package: Mapping | None = None  # whether an .ort fits ONNX Runtime's mobile packages
    ort_format: Mapping | None = None  # how an .ort was optimized
    reused: tuple[Mapping, ...] = ()  # steps reused from another target's route in the same run
    lm: Mapping | None = None  # a decoder LM's entry points, cache and weights as made (edgekit.converters.lm_common)

    def to_json(self, everything: bool = False) -> dict:
        """The result document's fields (`everything`: every field set, for the cache)."""
        out = {"route": list(self.route), "tool_versions": dict(self.tool_versions), "seconds": self.seconds,
               "calibration": self.calibration and self.calibration.to_json()}
        for name in REPORTED if not everything else [f.name for f in fields(self) if f.name not in out]:
            value = getattr(self, name)
            if value is None or value == ():
                continue
            out[name] = (value.to_json() if hasattr(value, "to_json") else value if not isinstance(value, tuple)
                         else [v.to_json() if hasattr(v, "to_json") else v for v in value])
        return out

    @classmethod
    def from_json(cls, d: Mapping) -> "ArtifactMeta":
        """Inverse of `to_json(everything=True)`; keys that are not fields (another version's) are dropped."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in d.items() if k in known}
        for name in ("route", "reused"):
            if name in values:
                values[name] = tuple(values[name])
        for name in ("outside_delegate", "kept_float"):
            if name in values:
                values[name] = tuple(LayerNote.from_json(d) for d in values[name])
        if values.get("opset_upgrade") is not None:
            values["opset_upgrade"] = OpsetUpgrade.from_json(values["opset_upgrade"])
        if values.get("quantization") is not None:
            values["quantization"] = QuantSpec.from_json(values["quantization"])
        if values.get("calibration") is not None:
            values["calibration"] = CalibrationRecord.from_json(values["calibration"])
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
