"""Convert → verify → place: the main job, as a library call.

Every route is planned and checked before the first converter runs. Each artifact is written
into a private temporary folder inside the output folder, verified in its own runtime, and
only then moved into place; a failed or interrupted run leaves no partial file behind.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from edgekit.artifact import ModelArtifact
from edgekit.errors import BadInput
from edgekit.graph import Graph, Plan
from edgekit.loading import SourceOptions, TorchSource
from edgekit.quiet import captured
from edgekit.verify import THRESHOLDS, Verdict, compare

SCHEMA = "edgekit.convert/1"
RANDOM_SAMPLES = 16

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ConvertRequest:
    source: str
    targets: tuple[str, ...] = ("all",)
    out_dir: str = "edgekit-out"
    precision: str = "fp32"
    eval_data: str | None = None
    thresholds: dict = field(default_factory=dict)
    source_options: SourceOptions = SourceOptions()

    def __post_init__(self):
        if not self.targets:
            raise ValueError("at least one target is needed")


@dataclass(frozen=True)
class ArtifactResult:
    target: str
    artifact: ModelArtifact
    verdict: Verdict

    def to_json(self) -> dict:
        a = self.artifact
        return {
            "target": self.target, "precision": a.precision, "format": a.format, "path": a.path,
            "files": list(a.files), "bytes": a.bytes, "sha256": a.sha256,
            "route": list(a.meta.get("route", [])), "tool_versions": dict(a.meta.get("tool_versions", {})),
            "seconds": a.meta.get("seconds"), "verification": self.verdict.to_json(),
        }


@dataclass(frozen=True)
class ConvertResult:
    source: ModelArtifact
    source_sha256: str | None
    artifacts: tuple[ArtifactResult, ...]
    warnings: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        return any(r.verdict.status == "fail" for r in self.artifacts)

    def to_json(self) -> dict:
        return {
            "schema": SCHEMA,
            "source": {"path": self.source.path, "format": self.source.format, "sha256": self.source_sha256,
                       "signature": self.source.signature.to_json()},
            "artifacts": [r.to_json() for r in self.artifacts],
            "warnings": list(self.warnings),
        }


@dataclass
class ConvertContext:
    """What converters may use beyond their input artifact."""

    torch_source: TorchSource
    work_dir: Path


def resolve_targets(names: tuple[str, ...], source_format: str, graph: Graph) -> list:
    from edgekit.targets import TARGETS, resolve

    if any(n.strip().lower() == "all" for n in names):
        reachable = graph.reachable(source_format)
        return [t for t in TARGETS.values() if t.format in reachable]
    out = []
    for n in names:
        t = resolve(n)
        if t not in out:
            out.append(t)
    return out


def convert(req: ConvertRequest, progress: Progress | None = None) -> ConvertResult:
    """Run the main job: plan every target, convert, verify in each runtime, place the artifacts."""
    from edgekit.calibration.data import load_samples, random_samples
    from edgekit.formats import detect
    from edgekit.loading import open_source

    say = progress or (lambda _msg: None)
    thresholds = {**THRESHOLDS.get(req.precision, {}), **req.thresholds}
    source_format = detect(req.source)  # fail fast on a bad path, before loading anything heavy
    graph = Graph()
    targets = resolve_targets(req.targets, source_format, graph)
    plans: list[tuple[object, Plan]] = [(t, graph.plan(source_format, t.format, req.precision)) for t in targets]

    say(f"loading {req.source}")
    with captured():
        torch_src = open_source(req.source, req.source_options)
    source = torch_src.artifact
    warnings: list[str] = []
    if req.eval_data:
        samples = load_samples(req.eval_data, source.signature, what="eval data")
    else:
        samples = random_samples(source.signature, RANDOM_SAMPLES)
        warnings.append(f"no --eval data: verified on {RANDOM_SAMPLES} seeded random inputs, "
                        "which says little about accuracy; pass --eval data.npz")

    say(f"running the source model on {len(samples)} samples")
    reference = _run_reference(torch_src, samples)

    out_dir = Path(req.out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BadInput(f"cannot create output folder {out_dir}: {e.strerror}") from None
    stem = _stem(req.source)
    results = []
    for target, plan in plans:
        results.append(_convert_one(target, plan, torch_src, samples, reference, thresholds, out_dir, stem, say))
    return ConvertResult(source, source.sha256 if source.files else None, tuple(results), tuple(warnings))


def _convert_one(target, plan: Plan, torch_src: TorchSource, samples, reference, thresholds, out_dir: Path,
                 stem: str, say: Progress) -> ArtifactResult:
    from edgekit.runners import run_isolated
    from edgekit.targets import by_format

    suffix = "" if plan.precision == "fp32" else f".{plan.precision}"
    tmp = Path(tempfile.mkdtemp(prefix=".edgekit-tmp-", dir=out_dir))
    try:
        ctx = ConvertContext(torch_src, tmp)
        artifact = torch_src.artifact.evolve(meta={"route": [torch_src.artifact.format]})
        for i, step in enumerate(plan.steps):
            conv = step.converter
            last = i == len(plan.steps) - 1
            ext = by_format(conv.target).extension
            path = tmp / (f"{stem}{suffix}{ext}" if last else f"step{i}-{stem}{ext}")
            say(f"{target.name}: converting {artifact.format} → {conv.target} ({conv.name})")
            with captured():
                artifact = conv()(artifact, path, step.precision, ctx)
        say(f"{target.name}: verifying in {target.runtime} on {len(samples)} samples")
        started = time.perf_counter()
        outputs = run_isolated(artifact, samples.inputs)
        verdict = compare(reference, outputs, thresholds, samples.labels)
        artifact = _place(artifact, tmp, out_dir)
        say(f"{target.name}: {verdict.status} ({time.perf_counter() - started:.1f} s to verify)")
        return ArtifactResult(target.name, artifact, verdict)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run_reference(torch_src: TorchSource, samples) -> list[np.ndarray]:
    per_sample = []
    n = len(samples)
    for i in range(n):
        per_sample.append(torch_src.run({k: v[i] for k, v in samples.inputs.items()}))
    return [np.stack([s[j] for s in per_sample]) for j in range(len(per_sample[0]))]


def _place(artifact: ModelArtifact, tmp: Path, out_dir: Path) -> ModelArtifact:
    """Move the artifact's files from the temporary folder into the output folder."""
    placed = []
    for f in artifact.files:
        dest = out_dir / Path(f).name
        os.replace(f, dest)
        placed.append(str(dest))
    return artifact.evolve(path=str(out_dir / Path(artifact.path).name), files=tuple(placed))


def _stem(source: str) -> str:
    p = Path(source)
    if p.exists():
        return p.stem if p.is_file() else p.name
    return source.rpartition(":")[2] or "model"
