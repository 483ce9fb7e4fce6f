"""ModelArtifact: the frozen value each stage of a conversion hands to the next."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from edgekit.core.signature import Signature


@dataclass(frozen=True)
class ModelArtifact:
    """A model in one format at one place.

    `path` is a file, a directory or an import spec; `files` lists every file the artifact is
    made of (an ONNX model with external data has two); `meta` carries what a stage learned
    (route, tool versions, ...) and is read-only.
    """

    format: str
    path: str
    signature: Signature
    precision: str = "fp32"
    files: tuple[str, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "meta", MappingProxyType(dict(self.meta)))
        if not self.files and Path(self.path).is_file():
            object.__setattr__(self, "files", (self.path,))

    def evolve(self, **changes: Any) -> "ModelArtifact":
        """A new artifact with `changes`; `meta` changes are merged into the old meta."""
        if "meta" in changes:
            changes["meta"] = {**self.meta, **changes["meta"]}
        return replace(self, **changes)

    @property
    def bytes(self) -> int:
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
