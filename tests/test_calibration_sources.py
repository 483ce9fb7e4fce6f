"""Calibration data from every kind of source, validated against the model before any work."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from edgekit.calibration.sources import RANDOM_WARNING, CalibrationSpec, ImagePreprocess, load_calibration
from edgekit.core.errors import BadInput
from edgekit.core.signature import Signature, TensorSpec
from tests.conftest import DIGITS_CALIB, DIGITS_EVAL

DIGITS_SIG = Signature((TensorSpec("x", (1, 1, 8, 8)),))
RGB_SIG = Signature((TensorSpec("image", (1, 3, 24, 32)),))


def digits_calib() -> np.ndarray:
    with np.load(DIGITS_CALIB) as data:
        return data["x"]


def test_npz_with_sample_count():
    data, warnings = load_calibration(CalibrationSpec(str(DIGITS_CALIB), samples=50), DIGITS_SIG)
    assert len(data) == 50 and data.inputs["x"].shape == (50, 1, 1, 8, 8) and warnings == []
    np.testing.assert_array_equal(data.inputs["x"][:, 0], digits_calib()[:50])


def test_asking_for_more_samples_than_there_are_warns():
    data, warnings = load_calibration(CalibrationSpec(str(DIGITS_CALIB), samples=5000), DIGITS_SIG)
    assert len(data) == 200 and "asked for more than the 200 samples" in warnings[0]


def test_folder_of_npy_files(tmp_path):
    x = digits_calib()[:12]
    for i, sample in enumerate(x):
        np.save(tmp_path / f"{i:03d}.npy", sample[None])  # one (1, 1, 8, 8) sample per file
    data, _ = load_calibration(CalibrationSpec(str(tmp_path)), DIGITS_SIG)
    np.testing.assert_array_equal(data.inputs["x"][:, 0], x)


def test_folder_per_input_for_a_two_input_model(tmp_path):
    sig = Signature((TensorSpec("image", (1, 3, 8, 8)), TensorSpec("extra", (1, 6))))
    rng = np.random.default_rng(0)
    for name, shape in (("image", (3, 8, 8)), ("extra", (6,))):
        (tmp_path / name).mkdir()
        for i in range(10):
            np.save(tmp_path / name / f"{i}.npy", rng.standard_normal(shape).astype(np.float32))
    data, _ = load_calibration(CalibrationSpec(str(tmp_path)), sig)
    assert data.inputs["image"].shape == (10, 1, 3, 8, 8) and data.inputs["extra"].shape == (10, 1, 6)


def test_folder_of_digit_images_matches_the_arrays(tmp_path):
    x = digits_calib()[:20]
    for i, sample in enumerate(x):
        Image.fromarray(np.round(sample[0] * 255).astype(np.uint8), mode="L").save(tmp_path / f"{i:02d}.png")
    data, _ = load_calibration(CalibrationSpec(str(tmp_path)), DIGITS_SIG)
    assert data.inputs["x"].shape == (20, 1, 1, 8, 8)
    np.testing.assert_allclose(data.inputs["x"][:, 0], x, atol=1 / 255)


def test_real_photographs_with_a_preprocessing_spec(tmp_path):
    from sklearn.datasets import load_sample_images

    for i, photo in enumerate(load_sample_images().images * 5):  # two real photographs, repeated
        Image.fromarray(photo).save(tmp_path / f"photo{i}.jpg")
    spec = CalibrationSpec(str(tmp_path), preprocess="scale=1/255,mean=0.485/0.456/0.406,std=0.229/0.224/0.225")
    data, _ = load_calibration(spec, RGB_SIG)
    x = data.inputs["image"]
    assert x.shape == (10, 1, 3, 24, 32) and x.dtype == np.float32
    assert -2.2 < x.min() < 0 < x.max() < 2.7  # normalised, not raw 0..255
    nhwc = Signature((TensorSpec("image", (1, 24, 32, 3)),), layout="NHWC")
    assert load_calibration(CalibrationSpec(str(tmp_path)), nhwc)[0].inputs["image"].shape == (10, 1, 24, 32, 3)


def test_python_function_source():
    data, _ = load_calibration(CalibrationSpec("tests.calib_fns:digit_tuples"), DIGITS_SIG)
    assert len(data) == 30
    np.testing.assert_array_equal(data.inputs["x"][:, 0, 0], digits_calib()[:30, 0])


def test_random_is_allowed_with_a_loud_warning():
    data, warnings = load_calibration(CalibrationSpec("random", samples=32), DIGITS_SIG)
    assert len(data) == 32 and warnings == [RANDOM_WARNING] and "RANDOM" in warnings[0]


@pytest.mark.parametrize("arrays, message", [
    ({"x": np.zeros((50, 3, 8, 8), np.float32)}, r"input 'x' has shape \(50, 3, 8, 8\), expected \(N, 1, 8, 8\)"),
    ({"x": np.zeros((50, 1, 8, 8), np.int64)}, r"input 'x' is int64, the model takes float32"),
    ({"x": np.where(np.eye(8)[None, None] > 0, np.inf, 0).repeat(50, 0).astype(np.float32)}, r"contains NaN or Inf in 50"),
    ({"x": np.zeros((0, 1, 8, 8), np.float32)}, r"input 'x' holds no samples"),
    ({"x": np.zeros((50, 1, 8, 8), np.float32), "mask": np.zeros((50, 8))}, r"key\(s\) \['mask'\] that are not inputs"),
    ({"x": np.zeros((4, 1, 8, 8), np.float32)}, r"too few calibration samples .*: 4, at least 10"),
], ids=["shape", "dtype", "inf", "empty", "unknown-key", "too-few"])
def test_bad_calibration_data_names_the_input_and_expected_shape(tmp_path, arrays, message):
    path = tmp_path / "calib.npz"
    np.savez(path, **arrays)
    with pytest.raises(BadInput, match=message) as info:
        load_calibration(CalibrationSpec(str(path)), DIGITS_SIG)
    assert info.value.exit_code == 2


def test_bad_sources():
    with pytest.raises(BadInput, match="calibration data not found: nowhere.npz"):
        load_calibration(CalibrationSpec("nowhere.npz"), DIGITS_SIG)
    with pytest.raises(BadInput, match="is not an .npz"):
        load_calibration(CalibrationSpec(str(DIGITS_EVAL.with_name("train_digits_cnn.py"))), DIGITS_SIG)
    with pytest.raises(BadInput, match=r"sample 0 gives 2 value\(s\) for 1 input"):
        load_calibration(CalibrationSpec("tests.calib_fns:wrong_arity"), DIGITS_SIG)
    with pytest.raises(BadInput, match="calibration function tests.calib_fns:broken failed: ZeroDivisionError"):
        load_calibration(CalibrationSpec("tests.calib_fns:broken"), DIGITS_SIG)


def test_preprocess_spec_parsing():
    p = ImagePreprocess.parse("size=32x32,scale=1/255,mean=0.5,std=0.25,layout=nhwc,color=gray")
    assert p == ImagePreprocess((32, 32), 1 / 255, (0.5,), (0.25,), "NHWC", "gray")
    with pytest.raises(BadInput, match="unknown key 'crop'"):
        ImagePreprocess.parse("crop=3")
