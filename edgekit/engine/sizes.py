"""Verification at a second size of an artifact's dynamic input dimensions.

An artifact that keeps a dynamic input dimension (its inspection's `io_shapes`: a dim_param in an
.onnx, a -1 in a .tflite's shape signature, what onnxruntime reports for an .ort) is verified at the
signature's shape, then run once more with every such dimension at a second size and compared with
the source model at that size:

- a batch axis (axis 0): two samples stacked as one batch (twice the signature's size);
- another axis: a smaller size (the samples cropped by the largest power-of-two step up to 32 that
  divides the size), else a larger one (edge-padded by that step), whichever the source accepts;
  the source run at that size gives the reference.

A source that refuses a batch of two (a model exported for a batch of one) is compared through its
outputs of each sample, stacked. A dimension no second size can be made for is said in the verdict's
notes; a mismatch at the second size, or an artifact that fails to run there, fails the verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from edgekit.calibration.data import SampleSet
from edgekit.core.artifact import ModelArtifact
from edgekit.core.errors import ConversionFailed
from edgekit.core.signature import Signature
from edgekit.core.verify import Status, Verdict, compare
from edgekit.engine.isolation import run_isolated
from edgekit.core.source import Source
from edgekit.core.inspection import shape_text

MAX_STEP = 32


@dataclass(frozen=True)
class Dim:
    """One dynamic dimension of an artifact input: the input's name, the axis, the signature's size there."""

    input: str
    axis: int
    size: int
    symbol: str | None

    @property
    def batch(self) -> bool:
        """Whether this is axis 0, taken for the batch: its second size stacks samples instead of resizing."""
        return self.axis == 0

    def text(self) -> str:
        """The dimension in a verdict's notes: `x axis 2 (height)`, the symbol only where the artifact names it."""
        return f"{self.input} axis {self.axis}" + (f" ({self.symbol})" if self.symbol else "")


def dynamic_dims(signature: Signature, io_shapes: dict | None) -> tuple[list[Dim], list[str]]:
    """The dynamic dimensions of the artifact's inputs (matched with the signature's inputs by name, else in
    order), and notes on inputs whose dynamic dimensions the artifact does not tell."""
    entries = (io_shapes or {}).get("inputs") or []
    by_name = {e["name"]: e for e in entries}
    if set(signature.input_names) <= set(by_name):
        pairs = [(s, by_name[s.name]) for s in signature.inputs]
    elif len(entries) == len(signature.inputs):
        pairs = list(zip(signature.inputs, entries))
    else:
        return [], []
    dims, notes = [], []
    for spec, e in pairs:
        if e.get("bounded"):
            notes.append(f"{spec.name}: the artifact takes a dynamic shape (up to {shape_text(e['shape'])}) but does not "
                         f"record which dimensions vary; verified at {shape_text(spec.shape)} only")
        if not e.get("dynamic") or e["shape"] is None or len(e["shape"]) != len(spec.shape):
            continue
        for axis in e["dynamic"]:
            symbol = e["shape"][axis]
            dims.append(Dim(spec.name, axis, spec.shape[axis], symbol if isinstance(symbol, str) else None))
    return dims, notes


def candidates(size: int) -> list[int]:
    """Second sizes to try for a non-batch dimension, the smaller first: size ∓ the largest power-of-two
    step (at most MAX_STEP and half the size) that divides it, so that strided models still accept it."""
    step = 1
    while size % (step * 2) == 0 and step * 2 <= min(MAX_STEP, max(1, size // 2)):
        step *= 2
    return [s for s in (size - step, size + step) if s >= 1]


def verify_second_size(source: Source, artifact: ModelArtifact, verdict: Verdict, samples: SampleSet,
                       reference: list, thresholds: dict, say: Callable[[str], None] = lambda _msg: None) -> Verdict:
    """`verdict` (of `artifact` at the signature's shape) with the artifact verified at a second size of
    its dynamic dimensions too: `second_size` in the verdict, its failure among the reasons."""
    dims, notes = dynamic_dims(artifact.signature, verdict.inspection and verdict.inspection.io_shapes)
    if not dims:
        return replace(verdict, notes=verdict.notes + tuple(notes))
    batch, other = [d for d in dims if d.batch], [d for d in dims if not d.batch]
    attempts = [{d: candidates(d.size)[min(i, len(candidates(d.size)) - 1)] for d in other} for i in (0, 1)]
    attempts = [a for i, a in enumerate(attempts) if a not in attempts[:i]] if other else []
    if batch:
        attempts.append({})  # the batch alone, when no size of the other dimensions is accepted
    chosen = None
    for sizes in attempts:
        sizes = {**sizes, **{d: d.size * 2 for d in batch}}
        inputs = _inputs(samples, sizes)
        ref, how = _source_reference(source, inputs, sizes, samples, reference)
        if ref is not None:
            chosen = (sizes, inputs, ref, how)
            break
    if chosen is None:
        tried = {d: sorted({a[d] for a in attempts if d in a}) for d in other}
        notes += [f"{d.text()}: the source accepts no second size (tried "
                  f"{', '.join(map(str, tried[d])) if not d.batch else d.size * 2}); verified at {d.size} only"
                  for d in dims]
        return replace(verdict, notes=verdict.notes + tuple(notes))
    sizes, inputs, ref, how = chosen
    notes += [f"{d.text()}: the source accepts no second size (tried {', '.join(map(str, candidates(d.size)))}); "
              f"verified at {d.size} only" for d in other if d not in sizes]
    shapes = {name: list(a.shape[1:]) for name, a in inputs.items()}
    where = ", ".join(f"{name} {shape_text(shape)}" for name, shape in shapes.items())
    say(f"verifying again at a second size of its dynamic dimensions: {where}")
    ordered = sorted(sizes.items(), key=lambda kv: (kv[0].input, kv[0].axis))
    record = {"dims": [{"input": d.input, "axis": d.axis, "symbol": d.symbol, "batch": d.batch,
                        "sizes": [d.size, s]} for d, s in ordered],
              "shapes": shapes, "runs": len(next(iter(inputs.values()))), "reference": how}
    try:
        outputs, _ = run_isolated(artifact, inputs, inspection=verdict.inspection)
    except ConversionFailed as e:
        reason = f"at the second size ({where}) the artifact does not run: {e.message}"
        return replace(verdict, status=Status.FAIL, reasons=verdict.reasons + (reason,), notes=verdict.notes + tuple(notes),
                       second_size={**record, "status": str(Status.FAIL), "metrics": {}, "reasons": [reason]})
    split = bool(batch)
    second = compare([_per_sample(r, split) for r in ref],
                     [_per_sample(o, split and np.shape(o) == np.shape(r)) for o, r in zip(outputs, ref)], thresholds,
                     kinds={name: k["kind"] for name, k in verdict.kinds.items()})
    record.update(status=str(second.status), metrics=second.metrics, reasons=list(second.reasons))
    reasons = tuple(f"at the second size ({where}): {r}" for r in second.reasons)
    return replace(verdict, status=Status.FAIL if reasons else verdict.status, reasons=verdict.reasons + reasons,
                   notes=verdict.notes + tuple(notes), second_size=record)


def _inputs(samples: SampleSet, sizes: dict[Dim, int]) -> dict[str, np.ndarray]:
    """The inputs at `sizes`: the first two samples, each cropped or padded along the non-batch dimensions;
    with a batch dimension, the two stacked as one batch (one run), else two runs."""
    picked = [0, 1] if len(samples) >= 2 else [0, 0]
    batched = {d.input for d in sizes if d.batch}
    out = {}
    for name, arr in samples.inputs.items():
        a = arr[picked]
        for d, size in sizes.items():
            if d.input == name and not d.batch:
                a = _resized(a, d.axis + 1, size)
        if batched:
            a = np.concatenate(list(a), axis=0)[None] if name in batched else a[:1]
        out[name] = a
    return out


def _resized(a: np.ndarray, axis: int, size: int) -> np.ndarray:
    """`a` cropped (to a smaller size) or edge-padded (to a larger one) along `axis`."""
    have = a.shape[axis]
    if size <= have:
        return np.take(a, np.arange(size), axis=axis)
    pad = [(0, 0)] * a.ndim
    pad[axis] = (0, size - have)
    return np.pad(a, pad, mode="edge")


def _source_reference(source: Source, inputs: dict, sizes: dict[Dim, int], samples: SampleSet,
                      reference: list) -> tuple[list | None, str]:
    """The source's outputs on `inputs` (one per run, stacked), and how they were made; (None, why) when the
    source refuses them. A source that refuses a batch gives its outputs of each sample, stacked."""
    runs = len(next(iter(inputs.values())))
    try:
        per_run = [source.run({k: v[i] for k, v in inputs.items()}) for i in range(runs)]
        return [np.stack([np.asarray(r[j]) for r in per_run]) for j in range(len(per_run[0]))], "source"
    except Exception:  # noqa: BLE001 - the source's framework refuses this size, in its own way
        pass
    if all(d.batch for d in sizes) and all(np.ndim(r) >= 2 for r in reference):
        picked = [0, 1] if len(samples) >= 2 else [0, 0]
        return ([np.concatenate([r[i] for i in picked], axis=0)[None] for r in reference],
                "the source's outputs of each sample, stacked (the source takes no batch of two)")
    return None, "the source refuses this size"


def _per_sample(a: np.ndarray, split: bool) -> np.ndarray:
    """A batch-of-two run (1, 2·b, ...) as two samples (2, b, ...), as the first size's samples are laid out."""
    a = np.asarray(a)
    if split and a.ndim >= 2 and a.shape[0] == 1 and a.shape[1] % 2 == 0:
        return a.reshape(2, a.shape[1] // 2, *a.shape[2:])
    return a
