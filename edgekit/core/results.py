"""What a run returns: each verified artifact, and the run as a whole, as typed values with their JSON."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edgekit.core.artifact import ArtifactMeta, ModelArtifact
from edgekit.core.signature import Signature
from edgekit.core.verify import Status, Verdict

SCHEMA = "edgekit.convert/1"


@dataclass(frozen=True)
class ArtifactResult:
    """One verified artifact. `bytes` and `sha256` are of the files as verified (measured before they were
    placed), so a later run into the same folder cannot change what this result reports."""

    target: str
    artifact: ModelArtifact
    verdict: Verdict
    bytes: int
    sha256: str
    cached: bool = False  # placed from the artifact cache (edgekit.engine.cache), verified when it was stored

    @classmethod
    def measured(cls, target: str, artifact: ModelArtifact, verdict: Verdict) -> "ArtifactResult":
        """A result whose bytes and hash are read from `artifact`'s files now: call it before they are placed."""
        return cls(target, artifact, verdict, artifact.bytes, artifact.sha256)

    def to_json(self) -> dict:
        """One entry of the `edgekit convert --json` document's "artifacts"; floats as measured (NaN, inf kept)."""
        a = self.artifact
        out = {
            "target": self.target, "precision": a.precision, "format": a.format, "path": a.path,
            "files": list(a.files), "bytes": self.bytes, "sha256": self.sha256,
        }
        meta = a.meta.to_json()
        out.update({k: meta.pop(k) for k in ("route", "tool_versions", "seconds", "calibration")})
        # then the int8 spec as made, the accuracy-aware search, whether an .ort fits ONNX Runtime's mobile
        # packages, the steps reused from another target's route in the same run ... where recorded
        out.update({"verification": self.verdict.to_json(), **meta})
        if self.cached:
            out["cached"] = True
        return out

    def stored(self) -> dict:
        """What the artifact cache keeps of this result besides the files (see `restored`)."""
        a = self.artifact
        return {"target": self.target, "format": a.format, "precision": a.precision, "signature": a.signature.to_json(),
                "files": [Path(f).name for f in a.files], "main": Path(a.path).name, "meta": a.meta.to_json(everything=True),
                "verdict": self.verdict.to_json(), "bytes": self.bytes, "sha256": self.sha256}

    @classmethod
    def restored(cls, d: dict, folder: Path) -> "ArtifactResult":
        """The result `stored` kept, its files in `folder`."""
        artifact = ModelArtifact(d["format"], str(folder / d["main"]), Signature.from_json(d["signature"]),
                                 d["precision"], files=tuple(str(folder / n) for n in d["files"]),
                                 meta=ArtifactMeta.from_json(d["meta"]))
        return cls(d["target"], artifact, Verdict.from_json(d["verdict"]), d["bytes"], d["sha256"])


@dataclass(frozen=True)
class TargetFailure:
    """A target of a run of several that made no artifact (its conversion failed, or ran past its time budget):
    the error as the command line says it. The other targets' artifacts are kept."""

    target: str
    message: str
    fix: str | None
    exit_code: int

    @classmethod
    def of(cls, target: str, error) -> "TargetFailure":
        """The failure of `target` from an EdgekitError."""
        return cls(target, error.message, error.fix, error.exit_code)

    def to_json(self) -> dict:
        """One entry of the `edgekit convert --json` document's "failures"."""
        return {"target": self.target, "error": self.message, "fix": self.fix, "exit_code": self.exit_code}


@dataclass(frozen=True)
class ConvertResult:
    """A whole run: the source as opened, an ArtifactResult per target that made one in the order asked, the run's
    warnings, and the targets that made none (`failures`: only in a run of several targets; a run of one raises).
    `source_sha256` is None when the source is no file (an import spec)."""

    source: ModelArtifact
    source_sha256: str | None
    artifacts: tuple[ArtifactResult, ...]
    warnings: tuple[str, ...] = ()
    failures: tuple[TargetFailure, ...] = ()

    @property
    def failed(self) -> bool:
        """Whether any artifact failed verification (the command line then exits non-zero)."""
        return any(r.verdict.status == Status.FAIL for r in self.artifacts)

    def to_json(self) -> dict:
        """The `edgekit convert --json` document (schema SCHEMA) before `finite` replaces NaN and infinities."""
        return {
            "schema": SCHEMA,
            "source": {"path": self.source.path, "format": self.source.format, "sha256": self.source_sha256,
                       "signature": self.source.signature.to_json()},
            "artifacts": [r.to_json() for r in self.artifacts],
            "warnings": list(self.warnings),
        } | ({"failures": [f.to_json() for f in self.failures]} if self.failures else {})


def finite(obj):
    """`obj` (a result's JSON) with NaN and ±infinity as None, as the command line's `--json` writes it."""
    if isinstance(obj, float):
        return obj if obj == obj and obj not in (float("inf"), float("-inf")) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj
