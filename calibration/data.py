"""Sample sets: inputs stacked along a leading sample axis, with optional labels.

An `.npz` names its arrays after the model's inputs (or `input_0`, `input_1`, ...); the first
axis counts samples. For an input of shape (1, C, H, W) the file may hold (N, C, H, W) or
(N, 1, C, H, W). An array called `labels` holds class indices for task accuracy.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgekit.core.errors import BadInput, reading
from edgekit.core.signature import Signature

LABELS = "labels"


@dataclass(frozen=True)
class SampleSet:
    """Samples stacked along a leading axis, each input at its signature's shape; `source` names where they came
    from (a file or folder, a module:function, or "random"). `labels` (class indices) is None when none were given."""

    source: str
    inputs: dict  # input name → array of shape (N, *spec.shape)
    labels: np.ndarray | None = None

    def __len__(self) -> int:
        return len(next(iter(self.inputs.values())))

    def split(self, fraction: float) -> tuple["SampleSet", "SampleSet"]:
        """(the first part, the last `fraction` held out); at least one sample on each side."""
        n = len(self)
        held = min(max(1, round(n * fraction)), n - 1)
        return self.head(n - held), self.tail(held)

    def tail(self, n: int) -> "SampleSet":
        """The last `n` samples and their labels, as views of these arrays."""
        return SampleSet(self.source, {k: v[len(v) - n:] for k, v in self.inputs.items()},
                         None if self.labels is None else self.labels[len(self.labels) - n:])

    def head(self, n: int) -> "SampleSet":
        """The first `n` samples and their labels, as views of these arrays."""
        return SampleSet(self.source, {k: v[:n] for k, v in self.inputs.items()},
                         None if self.labels is None else self.labels[:n])

    def joined(self, other: "SampleSet") -> "SampleSet":
        """These samples followed by `other`'s (the same inputs): a split's two parts made whole again."""
        labels = None if self.labels is None or other.labels is None else np.concatenate([self.labels, other.labels])
        return SampleSet(self.source, {k: np.concatenate([v, other.inputs[k]]) for k, v in self.inputs.items()}, labels)


def load_samples(path: str | Path, signature: Signature, *, what: str = "eval data") -> SampleSet:
    """Load and validate an .npz against `signature`; every problem names the input and the fix."""
    path = Path(path)
    if not path.is_file():
        raise BadInput(f"{what} not found: {path}")
    with reading(path, what, fix="save it as an .npz of arrays with numpy.savez"):
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    labels = arrays.pop(LABELS, None)
    names = signature.input_names
    positional = [f"input_{i}" for i in range(len(names))]
    if set(arrays) == set(positional) and set(arrays) != set(names):
        arrays = {names[i]: arrays[f"input_{i}"] for i in range(len(names))}
    return validate(arrays, signature, what=f"{what} {path.name}", source=str(path), labels=labels)


def validate(arrays: dict, signature: Signature, *, what: str, source: str,
             labels: np.ndarray | None = None) -> SampleSet:
    """Check stacked arrays against the signature: names, shapes, dtypes, NaN/Inf, counts."""
    names = signature.input_names
    unknown = sorted(set(arrays) - set(names))
    if unknown:
        raise BadInput(f"{what} has key(s) {unknown} that are not inputs of the model",
                       fix=f"name the arrays after the inputs: {', '.join(names)} (or input_0, input_1, ...)")
    missing = [n for n in names if n not in arrays]
    if missing:
        raise BadInput(f"{what} has no array for input(s) {missing}",
                       fix=f"expected {signature.describe()}, with a leading sample axis")
    stacked = {}
    for spec in signature.inputs:
        arr = np.asarray(arrays[spec.name])
        if arr.dtype.kind not in "biuf" or arr.ndim == 0:
            raise BadInput(f"{what}: input {spec.name!r} is a {arr.ndim}-d array of {arr.dtype}, not numbers with a "
                           "leading sample axis", fix=f"save (N, {', '.join(map(str, spec.shape))}) arrays of {spec.dtype}")
        if arr.shape[1:] == spec.shape:
            pass
        elif spec.shape[0] == 1 and arr.shape[1:] == spec.shape[1:]:
            arr = arr.reshape((arr.shape[0],) + spec.shape)
        else:
            raise BadInput(
                f"{what}: input {spec.name!r} has shape {arr.shape}, expected (N, {', '.join(map(str, spec.shape[1:]))})"
                f" or (N, {', '.join(map(str, spec.shape))}) for the model's {spec.describe()}")
        if len(arr) == 0:
            raise BadInput(f"{what}: input {spec.name!r} holds no samples",
                           fix=f"give at least one sample of shape {spec.shape}")
        if np.dtype(arr.dtype) != np.dtype(spec.dtype):
            if arr.dtype.kind == "f" and np.dtype(spec.dtype).kind == "f":
                arr = arr.astype(spec.dtype)
            else:
                raise BadInput(f"{what}: input {spec.name!r} is {arr.dtype}, the model takes {spec.dtype}",
                               fix=f"convert it with .astype(numpy.{spec.dtype})")
        if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
            bad = int(np.sum(~np.isfinite(arr).reshape(len(arr), -1).all(axis=1)))
            raise BadInput(f"{what}: input {spec.name!r} contains NaN or Inf in {bad} sample(s)",
                           fix="clean or drop those samples")
        stacked[spec.name] = np.array(arr, copy=True)  # fresh, contiguous: no zero strides
    counts = {len(v) for v in stacked.values()}
    if len(counts) != 1:
        raise BadInput(f"{what}: inputs have different sample counts {sorted(counts)}")
    if labels is not None:
        labels = np.asarray(labels).reshape(-1)
        if labels.dtype.kind not in "biuf":
            raise BadInput(f"{what}: labels are {labels.dtype}, not class indices",
                           fix="save labels as an integer array, one class index per sample")
        n = len(next(iter(stacked.values())))
        if len(labels) != n:
            raise BadInput(f"{what}: {len(labels)} labels for {n} samples")
    return SampleSet(source, stacked, labels)


def random_samples(signature: Signature, n: int, seed: int = 0) -> SampleSet:
    """Seeded random inputs fitting the signature (verification without data; warned about)."""
    rng = np.random.default_rng(seed)
    inputs = {}
    for spec in signature.inputs:
        if np.dtype(spec.dtype).kind == "f":
            inputs[spec.name] = rng.standard_normal((n,) + spec.shape).astype(spec.dtype)
        else:
            inputs[spec.name] = rng.integers(0, 2, (n,) + spec.shape).astype(spec.dtype)
    return SampleSet("random", inputs, None)
