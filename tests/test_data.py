"""Eval and calibration data are validated against the model's signature before any work."""

from __future__ import annotations

import numpy as np
import pytest

from edgekit.calibration import load_samples
from edgekit.core.errors import BadInput
from edgekit.core.signature import Signature, TensorSpec

SIG = Signature((TensorSpec("x", (1, 1, 8, 8)),))


def save(tmp_path, **arrays):
    path = tmp_path / "data.npz"
    np.savez(path, **arrays)
    return path


def test_sample_axis_with_or_without_the_batch_dimension(tmp_path):
    a = load_samples(save(tmp_path, x=np.zeros((5, 1, 8, 8), np.float32), labels=np.arange(5)), SIG)
    assert a.inputs["x"].shape == (5, 1, 1, 8, 8) and len(a) == 5 and list(a.labels) == [0, 1, 2, 3, 4]
    b = load_samples(save(tmp_path, input_0=np.zeros((3, 1, 1, 8, 8), np.float64)), SIG)
    assert b.inputs["x"].dtype == np.float32 and len(b) == 3 and b.labels is None


@pytest.mark.parametrize("arrays, message", [
    ({"x": np.zeros((4, 8, 8), np.float32)}, r"input 'x' has shape \(4, 8, 8\), expected \(N, 1, 8, 8\)"),
    ({"x": np.zeros((0, 1, 8, 8), np.float32)}, r"input 'x' holds no samples"),
    ({"x": np.zeros((4, 1, 8, 8), np.int32)}, r"input 'x' is int32, the model takes float32"),
    ({"x": np.full((4, 1, 8, 8), np.nan, np.float32)}, r"input 'x' contains NaN or Inf in 4 sample"),
    ({"x": np.zeros((4, 1, 8, 8), np.float32), "y": np.zeros(3)}, r"key\(s\) \['y'\] that are not inputs"),
    ({"image": np.zeros((4, 1, 8, 8), np.float32)}, r"not inputs of the model"),
    ({"x": np.zeros((4, 1, 8, 8), np.float32), "labels": np.zeros(3)}, r"3 labels for 4 samples"),
], ids=["shape", "empty", "dtype", "nan", "unknown-key", "wrong-name", "labels"])
def test_bad_data_is_named(tmp_path, arrays, message):
    with pytest.raises(BadInput, match=message) as info:
        load_samples(save(tmp_path, **arrays), SIG)
    assert info.value.exit_code == 2


def test_unreadable_file(tmp_path):
    path = tmp_path / "data.npz"
    path.write_text("not numpy")
    with pytest.raises(BadInput, match="cannot read eval data"):
        load_samples(path, SIG)


def test_a_split_joined_again_is_the_whole_set_in_order():
    from edgekit.calibration.data import SampleSet

    whole = SampleSet("c.npz", {"x": np.arange(10, dtype=np.float32).reshape(10, 1)}, np.arange(10))
    first, held = whole.split(0.5)
    again = first.joined(held)
    assert len(first) == 5 and np.array_equal(again.inputs["x"], whole.inputs["x"])
    assert np.array_equal(again.labels, whole.labels) and again.source == "c.npz"
    assert first.joined(SampleSet("c.npz", {"x": held.inputs["x"]})).labels is None  # labels only when both have them
