"""ONNX calibration from one pass of statistics: every method's ranges as onnxruntime's calibrators make
them, and `--calib-method auto` running the model over the calibration samples once for all its candidates."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from edgekit.calibration import onnx_statistics  # noqa: E402


def _conv_model(path):
    """A small float model (conv → relu → conv) whose activations have a long tail."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w1, w2 = (rng.normal(0, 0.5, shape).astype(np.float32) for shape in ((8, 3, 3, 3), (4, 8, 3, 3)))
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2"], ["y"], pads=[1, 1, 1, 1], name="conv2")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 12, 12])],
                              [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(onnx.shape_inference.infer_shapes(model), str(path))


def _samples(n: int) -> np.ndarray:
    """Heavy-tailed values for comparing the range arithmetic with onnxruntime's (every method's ranges differ
    on them); the conversion below runs on photos."""
    return np.random.default_rng(1).laplace(0, 1, (n, 1, 3, 12, 12)).astype(np.float32)


def _photos(n: int, seed: int) -> np.ndarray:
    """n×3×12×12 crops of the photos scikit-image ships, centred."""
    from tests.models import photo_crops

    return (photo_crops(n, seed, size=12) - 0.5) * 4


class _Reader:
    def __init__(self, samples):
        self.it = iter(samples)

    def get_next(self):
        x = next(self.it, None)
        return None if x is None else {"x": x}


def test_one_pass_gives_each_method_the_ranges_of_its_onnxruntime_calibrator(tmp_path):
    from onnxruntime.quantization import CalibrationMethod, create_calibrator
    from onnxruntime.quantization.calibrate import HistogramCollector

    _conv_model(tmp_path / "m.onnx")
    samples = _samples(12)
    stats = onnx_statistics.collect(tmp_path / "m.onnx", ({"x": x} for x in samples), tmp_path)
    ranges = {m: stats.ranges(m) for m in ("minmax", "percentile", "entropy")}
    for method, ort_method in (("minmax", CalibrationMethod.MinMax), ("percentile", CalibrationMethod.Percentile)):
        calibrator = create_calibrator(str(tmp_path / "m.onnx"), calibrate_method=ort_method,
                                       augmented_model_path=str(tmp_path / f"{method}.onnx"))
        calibrator.collect_data(_Reader(samples))
        expected = calibrator.compute_data()
        assert set(expected.keys()) == set(ranges[method].keys()) == {"x", "a", "r", "y"}
        for tensor in expected.keys():
            np.testing.assert_array_equal(np.ravel(ranges[method][tensor].range_value),
                                          np.ravel(expected[tensor].range_value), err_msg=f"{method} {tensor}")
    # entropy: onnxruntime's own threshold search (a Python loop) on the same 2048-bin histograms
    collector = HistogramCollector("entropy", False, onnx_statistics.BINS, 128, 99.999, "same")
    for tensor, histogram in stats.values.items():
        expected = collector.get_entropy_threshold(histogram, 128)
        assert tuple(map(float, ranges["entropy"][tensor].range_value)) == tuple(map(float, expected)), tensor
    # and the three methods really give different ranges (entropy clips the tails, percentile is symmetric)
    for tensor in ("x", "a", "y"):
        found = {m: tuple(np.ravel(r[tensor].range_value).tolist()) for m, r in ranges.items()}
        assert len(set(found.values())) == 3, (tensor, found)
        assert found["entropy"][1] < found["minmax"][1], (tensor, found)


def test_mean_minmax_takes_the_mean_of_each_samples_extremes(tmp_path):
    """NNCF's default for activations: one sample's outlier does not set the range of all. Checked on the
    model's input and output against the per-sample extremes computed here (the output by onnxruntime)."""
    import onnxruntime as ort

    _conv_model(tmp_path / "m.onnx")
    samples = _samples(12)
    stats = onnx_statistics.collect(tmp_path / "m.onnx", ({"x": x} for x in samples), tmp_path, per_sample=1)
    ranges, whole = stats.ranges("mean-minmax"), stats.ranges("minmax")
    session = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    outputs = {"x": samples, "y": np.stack([session.run(["y"], {"x": x})[0] for x in samples])}
    for tensor, values in outputs.items():
        per_sample = values.reshape(len(samples), -1)
        expected = (per_sample.min(axis=1).mean(), per_sample.max(axis=1).mean())
        np.testing.assert_allclose(np.ravel(ranges[tensor].range_value), expected, rtol=1e-5, err_msg=tensor)
        low, high = np.ravel(whole[tensor].range_value)
        assert low < expected[0] < expected[1] < high, tensor  # inside the range of all samples
    assert set(ranges.keys()) == set(whole.keys()) == {"x", "a", "r", "y"}


def test_a_histogram_that_cannot_be_made_fails_its_methods_only(tmp_path):
    from edgekit.core.errors import ConversionFailed

    stats = onnx_statistics.Statistics()
    onnx_statistics._add(stats, "mask", np.array([-3.4e38, 0.0, 3.4e38], dtype=np.float32))
    assert float(stats.ranges("minmax")["mask"].range_value[1][0]) == pytest.approx(3.4e38)
    with pytest.raises(ConversionFailed, match="entropy calibration cannot make a histogram of mask"):
        stats.ranges("entropy")


@pytest.mark.slow
def test_auto_on_onnx_collects_the_statistics_once_for_every_candidate(tmp_path):
    from edgekit.calibration.sources import CalibrationSpec
    from edgekit.engine.pipeline import convert
    from edgekit.engine.request import build_request

    _conv_model(tmp_path / "m.onnx")
    np.savez(tmp_path / "calib.npz", x=_photos(40, seed=1))
    np.savez(tmp_path / "eval.npz", x=_photos(8, seed=2))
    request = build_request(str(tmp_path / "m.onnx"), ("onnx",), str(tmp_path / "out"), precision="int8",
                            eval_data=str(tmp_path / "eval.npz"), calibration=CalibrationSpec(str(tmp_path / "calib.npz")),
                            calib_method="auto")
    (result,) = convert(request).artifacts
    cal = result.artifact.meta.calibration
    assert [(c.method, c.bias_correction) for c in cal.candidates] == [
        (m, b) for m in ("minmax", "percentile", "entropy") for b in (False, True)]  # mean-minmax by name only
    assert cal.calibration_passes == 1  # six candidates, one pass of the float model over the samples
    # the methods' ranges differ, so do their int8 models' outputs on the held-out samples
    without_correction = [c.sqnr_db for c in cal.candidates if not c.bias_correction]
    assert len(set(without_correction)) == 3, cal.candidates


def test_the_stem_a_detector_keeps_at_int16_names_only_tensors_its_graph_makes(tmp_path):
    """A model's value_info may still name a tensor no node makes any more (onnxruntime's pre-processing drops
    nodes and keeps their shapes: ddddocr's YOLOX detector); quantize_static refuses an override of such a tensor
    ("Tensor '467' in TensorQuantOverrides is not present in the model"), so the stem names only tensors made."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from edgekit.converters.onnx_score_heads import stem_activations

    weight = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    nodes = [helper.make_node("Conv", ["image", "w"], ["features"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Sigmoid", ["features"], ["scores"], name="head")]
    shape = [1, 4, 32, 32]
    graph = helper.make_graph(nodes, "detector", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 32, 32])],
                              [helper.make_tensor_value_info("scores", TensorProto.FLOAT, shape)], [weight],
                              value_info=[helper.make_tensor_value_info("features", TensorProto.FLOAT, shape),
                                          helper.make_tensor_value_info("467", TensorProto.FLOAT, shape)])
    path = tmp_path / "detector.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    assert stem_activations(path) == ["features"]
