"""A content-addressed cache of verified artifacts.

A target's result is stored under a key made of everything it depends on: the bytes of the source
model, of the calibration and of the eval data, the request (precision, calibration method,
passes, layer overrides, budgets, thresholds), the target and its route, the versions of the
converter and runtime packages, and edgekit's own code. A later run whose key matches places the
stored files and reports the stored verification, without opening the source; the files are checked
against the hash they were verified with before they are placed. Data that comes from code
(`module:function`) cannot be hashed, so such a request is not cached (and says so).

The store is a `diskcache.Cache` (SQLite index, files on disk, least-recently-used eviction) in
$EDGEKIT_CACHE_DIR, else $XDG_CACHE_HOME/edgekit, else ~/.cache/edgekit, capped at
$EDGEKIT_CACHE_SIZE bytes (default 2 GiB; suffixes K, M, G).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import diskcache

import edgekit
from edgekit.core.artifact import ModelArtifact, sha256_files
from edgekit.core.cpu import int8_products_saturate
from edgekit.core.deps import DISTRIBUTIONS, versions
from edgekit.core.errors import BadInput
from edgekit.core.formats import artifact_files, detect
from edgekit.core.results import ArtifactResult
from edgekit.core.signature import Signature
from edgekit.engine.build import place

DEFAULT_SIZE = 2 << 30
KEY_SCHEMA = 2


class Uncacheable(Exception):
    """The request depends on something the cache cannot hash; the message says what."""


def folder() -> Path:
    if os.environ.get("EDGEKIT_CACHE_DIR"):
        return Path(os.environ["EDGEKIT_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "edgekit"


def size_limit() -> int:
    raw = os.environ.get("EDGEKIT_CACHE_SIZE", "").strip().upper()
    if not raw:
        return DEFAULT_SIZE
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(raw[-1], 1)
    try:
        value = int(float(raw[:-1] if raw[-1] in "KMG" else raw) * scale)
    except ValueError:
        raise BadInput(f"EDGEKIT_CACHE_SIZE={raw!r} is not a size", fix="give bytes, or a number with K, M or G") from None
    if value < 0:
        raise BadInput(f"EDGEKIT_CACHE_SIZE={raw!r} is negative", fix="give a size ≥ 0 (0 turns caching off)")
    return value


@dataclass(frozen=True)
class Hit:
    """A target found in the cache: its stored result, the source as recorded then (not opened again) and that
    run's warnings. Its files are only known to be present; `ArtifactCache.place` checks their hash."""

    key: str
    result: dict  # ArtifactResult.stored()
    source: ModelArtifact
    source_sha256: str | None
    warnings: tuple[str, ...]


class ArtifactCache:
    """The cache in `where` (default `folder()`) holding at most `limit` bytes (default `size_limit()`; 0 turns
    it off). Opened on first use; a request that cannot be cached is looked up as a miss, with `skipped` set."""

    def __init__(self, where: Path | None = None, limit: int | None = None):
        self.folder = Path(where) if where is not None else folder()
        self.limit = size_limit() if limit is None else limit
        self.skipped: str | None = None  # why the last lookup could not use the cache
        self._store = None

    @property
    def store(self):
        """The diskcache store, opened on first use; BadInput when its folder cannot be opened."""
        if self._store is None:
            try:
                self._store = diskcache.Cache(str(self.folder), size_limit=self.limit,
                                              eviction_policy="least-recently-used")
            except OSError as e:
                raise BadInput(f"cannot open the artifact cache in {self.folder}: {e.strerror}",
                               fix="set EDGEKIT_CACHE_DIR to a folder you can write to, or pass --no-cache") from None
        return self._store

    def keys(self, plan) -> dict[str, str]:
        """Target name → its key, for every route of `plan`; {} (with `skipped` set) when uncacheable."""
        self.skipped = None
        if self.limit == 0:
            self.skipped = "EDGEKIT_CACHE_SIZE is 0"
            return {}
        try:
            common = request_key(plan)
        except Uncacheable as e:
            self.skipped = str(e)
            return {}
        return {t.name: _digest({**common, "target": t.name,
                                 "route": [(s.converter.name, s.precision) for s in route.steps]})
                for t, route in plan.routes}

    def lookup(self, plan) -> dict[str, Hit]:
        """Target name → Hit, for the targets of `plan` whose entry and every file are stored; the rest are absent."""
        hits = {}
        for name, key in self.keys(plan).items():
            raw = self.store.get(f"{key}/entry")
            if raw is None:
                continue
            entry = json.loads(raw)
            if all(f"{key}/file/{n}" in self.store for n in entry["result"]["files"]):
                hits[name] = Hit(key, entry["result"], _source(plan, entry["source"]), entry["source"]["sha256"],
                                 tuple(entry["warnings"]))
        return hits

    def store_result(self, plan, result: ArtifactResult, source: ModelArtifact, warnings: tuple[str, ...]) -> None:
        """Keep `result`'s files and record; silently nothing when the plan is uncacheable or the record is not
        JSON. The entry is written after its files, so a lookup never sees half of one."""
        key = self.keys(plan).get(result.target)
        if key is None:
            return
        entry = {"result": result.stored(),
                 "source": {"format": source.format, "signature": source.signature.to_json(),
                            "sha256": source.sha256 if source.files else None},
                 "warnings": list(warnings)}
        try:
            text = json.dumps(entry)
        except (TypeError, ValueError):  # something in the record that JSON cannot hold: not cached
            return
        for f in result.artifact.files:
            with open(f, "rb") as fh:
                self.store.set(f"{key}/file/{Path(f).name}", fh, read=True)
        self.store.set(f"{key}/entry", text)  # last: an entry is visible only with all its files

    def place(self, hit: Hit, out_dir: Path, staging: Path) -> ArtifactResult | None:
        """The cached artifact placed in `out_dir`, or None when its files no longer match (the entry is
        dropped and the target is converted again)."""
        folder = staging / hit.key[:16]
        folder.mkdir(parents=True, exist_ok=True)
        for name in hit.result["files"]:
            handle = self.store.get(f"{hit.key}/file/{name}", read=True)
            if handle is None:
                return self._drop(hit)
            with handle, open(folder / name, "wb") as out:
                shutil.copyfileobj(handle, out)
        restored = ArtifactResult.restored(hit.result, folder)
        if sha256_files(restored.artifact.files) != restored.sha256:
            return self._drop(hit)
        placed = place(restored.artifact, out_dir, staging)
        shutil.rmtree(folder, ignore_errors=True)
        return ArtifactResult(restored.target, placed, restored.verdict, restored.bytes, restored.sha256, cached=True)

    def _drop(self, hit: Hit) -> None:
        self.store.delete(f"{hit.key}/entry")
        return None

    def info(self) -> dict:
        """folder, entries (stored results), bytes on disk and size_limit: what `edgekit cache info` shows."""
        entries = sum(1 for k in self.store.iterkeys() if str(k).endswith("/entry"))
        return {"folder": str(self.folder), "entries": entries, "bytes": self.store.volume(),
                "size_limit": self.limit}

    def clear(self) -> int:
        """Remove everything stored; returns how many store items went (an entry and each of its files count one)."""
        return self.store.clear()


def request_key(plan) -> dict:
    """Everything a plan's results depend on but its targets and routes, as JSON-able data."""
    req, options = plan.request, plan.request.source_options
    if options.model_class:
        raise Uncacheable(f"the model is built by code (--model-class {options.model_class})")
    return {
        "schema": KEY_SCHEMA, "edgekit": code_fingerprint(), "tools": versions(tuple(DISTRIBUTIONS)),
        "int8_products_saturate": int8_products_saturate(),  # decides the ONNX int8 types (edgekit.core.cpu)
        "source": _data_key(req.source, "the source model"), "source_format": plan.source_format,
        "source_options": {"input_shapes": [s.describe() for s in options.input_shapes], "trust_pickle": options.trust_pickle,
                           "trust_model_code": options.trust_model_code,
                           "example_inputs": _data_key(options.example_inputs, "the example inputs")
                           if options.example_inputs else None,
                           "max_seq_len": options.max_seq_len, "prefill_len": options.prefill_len},  # a decoder LM's
        # calibration samples, or the text a decoder LM's weights are rounded on (GPTQ), wherever given
        "calibration": ({"data": _data_key(req.calibration.source, "the calibration data"),
                         "where": req.calibration.source,  # the results name it
                         "samples": req.calibration.samples, "preprocess": req.calibration.preprocess}
                        if req.calibration else None),
        "eval": _data_key(req.eval_data, "the eval data") if req.eval_data else None,
        "spec": req.quant.to_json(),  # as asked: `auto` and the default recipe unsettled
        **req.search.to_json(), "thresholds": sorted(req.thresholds.items()), "precision": req.precision,
        "output_kinds": sorted(req.output_kinds.items()),
        "attribute_failures": req.attribute_failures,  # a failed verdict's note names layers or not
        "ort_platform": req.ort_platform,
    }


def _data_key(location: str, what: str) -> str:
    """The SHA-256 of a file, or of a folder's files and their names; `random` as itself."""
    path = Path(location)
    if location == "random":
        return "random"
    if path.is_file():
        try:
            files = artifact_files(detect(path), path) if path.suffix.lower() == ".onnx" else (str(path),)
        except Exception:  # what edgekit cannot read is not cached; the run itself says what is wrong
            raise Uncacheable(f"{what} could not be read") from None
        return sha256_files(files)
    if path.is_dir():
        h = hashlib.sha256()
        for f in sorted(p for p in path.rglob("*") if p.is_file()):
            h.update(str(f.relative_to(path)).encode() + b"\0")
            h.update(bytes.fromhex(sha256_files([f])))
        return h.hexdigest()
    raise Uncacheable(f"{what} comes from code ({location})")


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """A hash of edgekit's own modules (but the command line's): a changed converter or metric is a different key."""
    roots = [Path(edgekit.__file__).parent]
    for sub in ("converters", "calibration", "targets"):
        spec = importlib.util.find_spec(f"edgekit.{sub}")
        roots += [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    h = hashlib.sha256()
    for root in dict.fromkeys(roots):
        for f in sorted(f for f in root.rglob("*.py") if "cli" not in f.relative_to(root).parts[:-1]):
            h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def _digest(data: dict) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _source(plan, stored: dict) -> ModelArtifact:
    return ModelArtifact(stored["format"], plan.request.source, Signature.from_json(stored["signature"]))
