"""Building routes into artifacts, each shared intermediate once, and placing the results.

A run's routes share prefixes: `onnx` and `ort` both start with torch → onnx, and at int8 both
read the same calibrated ONNX model; `auto` and the search convert the same float model once per
candidate. `Intermediates` keeps every step's output of the run, keyed by the steps that made it
(and the quantization spec, from the quantizing step on), so a prefix is built once and reused.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from edgekit.core.artifact import ModelArtifact, sha256_files
from edgekit.core.errors import BadInput
from edgekit.core.formats import onnx_files, side_file_names
from edgekit.engine.graph import Route
from edgekit.core.quant import PASSES, Precision
from edgekit.core.quiet import captured, private_dir, temp_files_in
from edgekit.converters.base import ConvertContext
from edgekit.targets import by_format

TMP_PREFIX = ".edgekit-tmp-"
Progress = Callable[[str], None]


@dataclass
class Intermediates:
    """Every artifact a run has built, by the steps (and spec) that made it. Lives in `folder`."""

    folder: Path
    built: dict[tuple, tuple[ModelArtifact, str]] = field(default_factory=dict)  # key → (artifact, built for)

    def key(self, route: Route, i: int, ctx: ConvertContext) -> tuple:
        """What makes the output of `route`'s first i+1 steps: the source format, each step's converter and
        precision, and the spec and the number of calibration samples only from the quantizing step on (float
        prefixes are shared across specs)."""
        q = route.quantizing
        quantized = q is not None and q <= i
        samples = len(ctx.calibration) if quantized and ctx.calibration is not None else None
        return _key(route, i, ctx.spec if quantized else None, samples)

    def float_input(self, route: Route) -> ModelArtifact | None:
        """The float model `route`'s quantizing step reads, when this run built it (keras → onnx at fp32 before
        onnx → onnx at int8): what per-layer drift compares the int8 model with. None when the step reads the
        source itself, or nothing was built yet."""
        q = route.quantizing
        built = self.built.get(_key(route, q - 1, None)) if q else None
        return built[0] if built else None

    def quantized(self, route: Route, spec, samples: int) -> ModelArtifact | None:
        """The output of `route`'s quantizing step made with `spec` on `samples` calibration samples when this
        run built it (the int8 .onnx an .ort is converted from): what per-layer drift traces when the target's
        own format has no tracer."""
        q = route.quantizing
        built = self.built.get(_key(route, q, spec, samples)) if q is not None else None
        return built[0] if built else None


def _key(route: Route, i: int, spec, samples: int | None = None) -> tuple:
    return (route.source_format, tuple((s.converter.name, s.precision) for s in route.steps[: i + 1]), spec, samples)


def build(route: Route, ctx: ConvertContext, stem: str, say: Progress, shared: Intermediates | None = None,
          owner: str = "") -> ModelArtifact:
    """Run the steps of `route` on the source in `ctx`, each step's output in its own folder of `shared`
    (the run's intermediates; by default new ones in ctx.work_dir). A step `shared` already holds is
    reused, said in the progress and recorded in the artifact's meta (`reused`)."""
    shared = shared if shared is not None else Intermediates(ctx.work_dir)
    q = route.quantizing
    artifact = ctx.source.artifact.noting(route=(ctx.source.artifact.format,))
    reused: list[dict] = []
    for i, step in enumerate(route.steps):
        conv = step.converter
        key = shared.key(route, i, ctx)
        if key in shared.built:
            artifact, built_for = shared.built[key]
            reused.append({"converter": conv.name, "format": conv.target, "precision": step.precision,
                           "built_for": built_for})
            say(f"reusing the {step.precision} {conv.target} model built for {built_for} ({conv.name})")
            continue
        folder = shared.folder / f"i{len(shared.built)}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{stem}{'' if step.precision == Precision.FP32 else '.' + step.precision}{by_format(conv.target).extension}"
        detail = (f", {ctx.spec.method} calibration" + "".join(
            f" and {PASSES[name]}" for name in ctx.spec.passes_on()) if i == q else "")
        say(f"converting {artifact.format} → {conv.target} at {step.precision} ({conv.name}{detail})")
        with captured(), temp_files_in(folder):  # the step's scratch files go beside its output
            artifact = conv()(artifact, path, step.precision, replace(ctx, work_dir=folder))
        shared.built[key] = (artifact, owner)
    return artifact.noting(reused=tuple(reused)) if reused else artifact


@contextmanager
def run_folder(out_dir: Path):
    """A run's private folder `.edgekit-tmp-<pid>-*` inside `out_dir` (made, with its parents, if missing).

    Every library's temporary files go there while the block runs; it is removed at the end (or, if
    this process is killed, by the next run into the same folder), and so are the folders of `out_dir`
    the run made if it left nothing in them.
    """
    created = [p for p in (out_dir, *out_dir.parents) if not p.exists()]  # the deepest first
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        run_tmp = Path(private_dir(out_dir, TMP_PREFIX))
    except OSError as e:
        raise BadInput(f"cannot write into the output folder {out_dir}: {e.strerror}",
                       fix="give --out a folder you can write to") from None
    try:
        with temp_files_in(run_tmp):
            yield run_tmp
    finally:
        _remove_uninterrupted(run_tmp, created)


def _remove_uninterrupted(run_tmp: Path, created: list[Path]) -> None:
    """Remove the run's private folder and the folders it made that are left empty. Ctrl-C or SIGTERM
    arriving during the removal (a run ending as it is interrupted) is raised once the removal is done,
    so an interrupted run never leaves a half-removed folder behind."""
    interrupted = None
    for _ in range(3):
        try:
            shutil.rmtree(run_tmp, ignore_errors=True)
            for folder in created:
                if not folder.exists():  # removed by the attempt an interruption cut short
                    continue
                if any(folder.iterdir()):
                    break
                folder.rmdir()
            break
        except KeyboardInterrupt as e:
            interrupted = e
    if interrupted is not None:
        raise interrupted


def place(artifact: ModelArtifact, out_dir: Path, staging: Path) -> ModelArtifact:
    """Put the artifact's files, as a set, into the output folder; the built files stay where they are
    (another route of the run may read them).

    Each file is linked (or copied) into `staging` (on the output folder's file system) first. Then,
    under a lock on the folder (two runs into one --out place one set after the other), side files an
    earlier artifact of the same name left there and this one does not have (an `.io.json`, the
    external data the earlier model names) are removed, and the files are renamed into place, the
    model file last.
    """
    main = Path(artifact.path).name
    names = [Path(f).name for f in artifact.files]
    staged = Path(private_dir(staging, "place-"))
    for f in artifact.files:
        try:
            os.link(f, staged / Path(f).name)
        except OSError:
            shutil.copy2(f, staged / Path(f).name)
    with _locked(out_dir):
        old = out_dir / main
        earlier = set(side_file_names(artifact.format, old))
        if artifact.format == "onnx" and old.is_file() and not _same_file(old, staged / main):
            try:
                earlier |= {Path(f).name for f in onnx_files(old)[1:]}
            except Exception:  # an unreadable earlier model: its edgekit side files still go
                pass
        for name in earlier - set(names):
            stale = out_dir / name
            if stale.parent == out_dir and stale.is_file():
                stale.unlink()
        for name in sorted(names, key=lambda n: n == main):
            os.replace(staged / name, out_dir / name)
    staged.rmdir()
    return artifact.evolve(path=str(out_dir / main), files=tuple(str(out_dir / n) for n in names))


def _same_file(a: Path, b: Path) -> bool:
    """Whether two files hold the same bytes (then they name the same external data)."""
    return a.stat().st_size == b.stat().st_size and sha256_files([a]) == sha256_files([b])


@contextmanager
def _locked(folder: Path):
    """An exclusive lock on `folder` among edgekit processes (flock on the directory; no lock file)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def stem_of(source: str) -> str:
    p = Path(source)
    if p.exists():
        return p.stem if p.is_file() else p.name
    return source.rpartition(":")[2] or "model"
