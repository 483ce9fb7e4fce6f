"""Metrics are pure functions; thresholds are data; the verdict says why it failed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edgekit.core.errors import BadInput
from edgekit.core.verify import METRICS, THRESHOLDS, compare, parse_output_kinds, parse_thresholds


def test_metrics_on_known_values():
    ref = np.array([[3.0, 4.0], [0.0, 5.0]])
    out = np.array([[3.0, 4.0], [0.0, 0.0]])
    assert METRICS["max_abs"](ref, out) == 5.0
    assert METRICS["mean_abs"](ref, out) == 1.25
    assert METRICS["rmse"](ref, out) == 2.5
    # cosine is the mean of each sample's cosine: the second sample lost all its signal
    assert METRICS["cosine"](ref, out) == pytest.approx(0.5)
    assert METRICS["cosine_min"](ref, out) == 0.0
    assert METRICS["sqnr_db"](ref, out) == pytest.approx(10 * math.log10(50 / 25))
    assert METRICS["top1_agreement"](ref, out) == 0.5  # second sample: argmax 1 vs 0


def test_a_quiet_sample_is_judged_by_its_error_against_the_floor():
    """A sample under half the samples' RMS norm (here 1 against √13) is held to 1 − error² / (2 · floor²) where
    that is higher than its cosine: losing all of its signal still costs it, its noise's direction does not."""
    ref = np.array([[3.0, 4.0], [0.0, 1.0]])
    floor2 = 13 / 4
    assert METRICS["cosine_min"](ref, np.array([[3.0, 4.0], [0.0, 0.0]])) == pytest.approx(1 - 1 / (2 * floor2))
    turned = np.array([[3.0, 4.0], [0.1, 0.0]])  # the quiet sample's direction turned by 90°, by a small error
    assert METRICS["cosine_min"](ref, turned) == pytest.approx(1 - (0.01 + 1) / (2 * floor2))
    assert METRICS["cosine_min"](ref, np.array([[3.0, 4.0], [0.05, 0.98]])) > 0.999


def test_identical_outputs_have_infinite_sqnr_and_perfect_cosine():
    ref = np.random.default_rng(0).standard_normal((4, 10))
    assert METRICS["sqnr_db"](ref, ref.copy()) is None
    assert METRICS["cosine"](ref, ref.copy()) == pytest.approx(1.0)
    assert METRICS["top1_agreement"](ref[:, :1], ref[:, :1]) is None  # a single score is not a class


def test_an_infinite_error_is_the_worst_sqnr_not_a_crash():
    """A float op of an int8 model giving -inf where the float model's value is finite (basic-pitch's logarithm
    of a zero) made the per-layer ranking fail with "math domain error"."""
    from edgekit.core.drift import sqnr_db

    ref, out = np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, -np.inf])
    assert METRICS["sqnr_db"](ref, out) == -math.inf
    assert sqnr_db(ref, out) < 0  # per-layer drift: held at its floor


def test_compare_passes_within_thresholds_and_reports_accuracy():
    rng = np.random.default_rng(1)
    ref = rng.standard_normal((50, 10)).astype(np.float32)
    out = ref + rng.standard_normal(ref.shape).astype(np.float32) * 1e-6
    labels = ref.argmax(1)
    labels[:5] = (labels[:5] + 1) % 10
    verdict = compare([ref], [out], THRESHOLDS["fp32"], labels)
    assert verdict.status == "pass"
    assert verdict.task_accuracy == {"reference": 0.9, "artifact": 0.9}
    # class scores have no positions: no per-channel metric
    assert set(verdict.metrics["output_0"]) == set(METRICS) - {"channel_cosine", "channel_cosine_min", "step_top1_agreement",
                                                                  "sequence_agreement", "probability_max_abs",
                                                                  "decision_agreement"}
    assert verdict.kinds["output_0"]["kind"] == "scores" and verdict.kinds["output_0"]["basis"].startswith("guessed")


def test_compare_fails_with_the_broken_threshold_named():
    rng = np.random.default_rng(2)
    ref = rng.standard_normal((20, 10))
    out = ref + rng.standard_normal(ref.shape) * 0.2
    verdict = compare([ref], [out], {"cosine": 0.9999, "max_abs": 0.01})
    assert verdict.status == "fail"
    assert any(r.startswith("output_0 cosine 0.9") and r.endswith("< 0.9999") for r in verdict.reasons)
    assert any(r.startswith("output_0 max_abs") and r.endswith("> 0.01") for r in verdict.reasons)
    assert verdict.to_json()["reasons"] == list(verdict.reasons)


def test_compare_fails_on_missing_outputs_and_shape_mismatch():
    ref = np.ones((3, 4))
    assert compare([ref, ref], [ref], {}).status == "fail"
    verdict = compare([ref], [np.ones((3, 5))], {})
    assert verdict.status == "fail" and "shape" in verdict.reasons[0]


def test_threshold_overrides_are_checked():
    assert parse_thresholds(["cosine=0.999", "max_abs=0.5"]) == {"cosine": 0.999, "max_abs": 0.5}
    with pytest.raises(BadInput, match="cannot read --threshold 'cosinus=1'"):
        parse_thresholds(["cosinus=1"])
    with pytest.raises(BadInput, match="'high' is not a number"):
        parse_thresholds(["cosine=high"])


def test_one_bad_sample_fails_the_worst_sample_threshold_that_the_mean_hides():
    rng = np.random.default_rng(1)
    ref = rng.standard_normal((50, 1, 384))
    out = ref + 0.01 * rng.standard_normal(ref.shape)
    out[7] = rng.standard_normal((1, 384))  # one embedding gone wrong
    verdict = compare([ref], [out], THRESHOLDS["int8"])
    m = verdict.metrics["output_0"]
    assert m["cosine"] > 0.97 and m["cosine_min"] < 0.2
    assert verdict.status == "fail"
    assert any(r.startswith("output_0 cosine_min") for r in verdict.reasons)


def test_channel_cosine_judges_small_scale_channels_on_their_own():
    """A detector output [1, 4 boxes + 18 class scores, anchors]: boxes in pixels, scores in 0..1.
    Scores collapsed to 0/1.28 (one int8 scale shared with the boxes) barely move the overall
    cosine, and fail the per-channel one."""
    rng = np.random.default_rng(2)
    boxes = rng.uniform(0, 320, (16, 1, 4, 500))
    scores = 0.6 * rng.uniform(0, 1, (16, 1, 18, 500)) ** 20  # sparse, below the 0.64 rounding point
    ref = np.concatenate([boxes, scores], axis=2)
    healthy = ref + np.concatenate([rng.normal(0, 1.0, boxes.shape), rng.normal(0, 0.004, scores.shape)], axis=2)
    collapsed = healthy.copy()
    collapsed[:, :, 4:] = np.where(scores > 0.64, 1.28, 0.0)
    good, bad = compare([ref], [healthy], THRESHOLDS["int8"]), compare([ref], [collapsed], THRESHOLDS["int8"])
    assert good.status == "pass", good.reasons
    assert bad.metrics["output_0"]["cosine"] > 0.99  # the whole-output view is fooled
    assert bad.status == "fail"
    assert any(r.startswith("output_0 channel_cosine") for r in bad.reasons)
    assert METRICS["channel_cosine"](ref[:, :, :, 0], ref[:, :, :, 0]) is None  # [1, C]: no positions


def test_a_missed_top1_budget_says_how_many_disagreements_are_near_ties():
    ref = np.array([[3.0, 1.0, 0.0], [0.0, 2.0, 1.0], [1.0, 1.001, 0.0], [0.5, 0.0, 2.0]])
    out = ref.copy()
    out[2] = [1.001, 1.0, 0.0]  # a near-tie in the source flips
    out[1] = [2.5, 2.0, 1.0]  # a clear decision flips
    verdict = compare([ref], [out], {"top1_agreement": 0.9})
    assert verdict.status == "fail"
    assert "top1_agreement 0.5 < 0.9 (2 of 4 samples disagree; 1 of them are near-ties" in verdict.reasons[0]


def test_a_channels_last_map_of_probabilities_is_judged_by_its_decisions_at_each_position():
    """A face detector's per-position face / not-face softmax (MTCNN P-Net: 1×H×W×2): its values say what it
    is, and what fits it is the share of positions whose decision agrees."""
    rng = np.random.default_rng(5)
    logits = rng.standard_normal((10, 1, 4, 4, 2))
    probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    flipped = probs.copy()
    flipped[3, 0, 2, 1] = flipped[3, 0, 2, 1, ::-1]  # one position of one sample decides the other way
    verdict = compare([probs], [flipped], THRESHOLDS["int8"])
    assert verdict.kinds["output_0"] == {"kind": "sequence",
                                         "basis": "its values: the scores at every step or position sum to 1"}
    assert verdict.metrics["output_0"]["step_top1_agreement"] == 1 - 1 / 160
    assert "channel_cosine" not in verdict.metrics["output_0"] and "top1_agreement" not in verdict.metrics["output_0"]


def test_each_output_is_judged_by_the_metrics_that_fit_its_kind():
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((40, 12))
    probs = np.exp(logits[:, :2]) / np.exp(logits[:, :2]).sum(1, keepdims=True)
    boxes = rng.standard_normal((40, 4)) * 0.01  # offsets near zero: one sample's cosine is noise
    noisy_boxes = boxes + rng.standard_normal(boxes.shape) * 0.003
    embedding = logits / np.linalg.norm(logits, axis=1, keepdims=True)
    steps = np.exp(rng.standard_normal((40, 1, 6, 5)))
    steps /= steps.sum(-1, keepdims=True)
    image_map = rng.random((40, 1, 1, 8, 8))
    speech = rng.random((40, 1, 1))  # a voice-activity probability: a sign flip of a tiny value is not drift
    noisy_speech = speech + rng.standard_normal(speech.shape) * 0.01
    ref = [probs, boxes, embedding, steps, image_map, logits, speech]
    verdict = compare(ref, [probs, noisy_boxes, embedding, steps, image_map, logits, noisy_speech], THRESHOLDS["int8"])
    kinds = {k: v["kind"] for k, v in verdict.kinds.items()}
    assert kinds == {"output_0": "scores", "output_1": "regression", "output_2": "embedding", "output_3": "sequence",
                     "output_4": "map", "output_5": "scores", "output_6": "score"}
    assert "cosine" not in verdict.metrics["output_6"] and verdict.metrics["output_6"]["max_abs"] < 0.05
    assert verdict.kinds["output_0"]["basis"].startswith("its values")  # probabilities: read, not guessed
    assert verdict.kinds["output_1"]["basis"].startswith("guessed") and "--output-kind" in verdict.kinds["output_1"]["basis"]
    m = verdict.metrics
    assert "top1_agreement" in m["output_0"] and "top1_agreement" not in m["output_1"]
    assert "cosine_min" not in m["output_1"] and "top1_agreement" not in m["output_4"]
    assert m["output_3"]["step_top1_agreement"] == 1.0 and "top1_agreement" not in m["output_3"]
    # the boxes' worst sample is far below the int8 cosine_min; it does not fit a regression: not a reason
    assert METRICS["cosine_min"](boxes, noisy_boxes) < THRESHOLDS["int8"]["cosine_min"]
    assert not any("output_1 cosine_min" in r for r in verdict.reasons)
    # The user's word wins: the same boxes declared class scores are judged as such.
    declared = compare([boxes], [noisy_boxes], {"top1_agreement": 0.5}, kinds={"output_0": "embedding"})
    assert declared.kinds["output_0"] == {"kind": "embedding", "basis": "given"} and "top1_agreement" not in declared.metrics["output_0"]
    with pytest.raises(BadInput, match="--output-kind"):
        parse_output_kinds(["output_0=boxes"])
    assert parse_output_kinds(["1=regression", "output_0=scores"]) == {"output_1": "regression", "output_0": "scores"}


def test_a_probability_per_sample_is_held_to_how_far_it_moves():
    """A voice-activity model's speech probability (one value per sample) had no int8 gate: no cosine fits one
    value, so Silero VAD's int8 .onnx passed with the probability 0.20 off on one chunk. It is held to
    probability_max_abs ≤ 0.05 at int8: a move that shifts only the decisions already that near the threshold."""
    rng = np.random.default_rng(7)
    speech = rng.random((64, 1, 1))
    good = np.clip(speech + rng.normal(0, 0.005, speech.shape), 0, 1)
    moved = good.copy()
    moved[9] = np.clip(moved[9] + 0.2, 0, 1) if moved[9] < 0.8 else moved[9] - 0.2
    assert compare([speech], [good], THRESHOLDS["int8"]).status == "pass"
    verdict = compare([speech], [moved], THRESHOLDS["int8"])
    assert verdict.kinds["output_0"]["kind"] == "score" and verdict.status == "fail"
    assert verdict.reasons[0].startswith("output_0 probability_max_abs 0.19") and "> 0.05" in verdict.reasons[0]
    logits = rng.normal(0, 3, (64, 1))  # a score that is no probability: not judged so
    assert "probability_max_abs" not in compare([logits], [logits + 0.3], THRESHOLDS["int8"]).metrics["output_0"]


def test_convs_kept_float_on_int8_weights_are_held_to_their_weights_not_to_int8_compute():
    """A converter that keeps layers float on int8 weights by design (a level path from raw audio) makes an
    artifact whose non-int8 convs all run `weight_only`: it is held to int8_weight_share, as a16w8 is (in an ONNX
    file always; elsewhere where its converter named the layers). A conv left fully float, or run float between
    quantize and dequantize, keeps the compute gate."""
    from dataclasses import replace

    from edgekit.core.inspection import Inspection
    from edgekit.core.verify import THRESHOLDS, applicable_thresholds

    base = Inspection.from_json({"format": "onnx", "weight_bytes_by_dtype": {"int8": 900, "float32": 100},
                                 "int8_weight_share": 0.9, "ops": [], "compute_ops": 12,
                                 "ops_by_mode": {"int8": 2, "weight_only": 4, "float": 6},
                                 "int8_compute_share": 0.17, "int8_heavy_op_share": 0.33,
                                 "float_ops": ["Conv ×4 (weight_only)", "Pow ×2", "Sqrt ×1", "LSTM ×1 (weight_only)"],
                                 "op_counts": {}, "largest_tensors": [], "io_dtypes": {}, "delegated": None, "notes": [],
                                 "io_shapes": {}, "runtime_needs": [], "duplicated_constants": []})
    assert base.weight_only_by_design()
    assert "int8_heavy_op_share" not in applicable_thresholds(THRESHOLDS["int8"], {}, base)
    assert applicable_thresholds(THRESHOLDS["int8"], {"int8_heavy_op_share": 0.5}, base)["int8_heavy_op_share"] == 0.5
    for other in ("Conv ×1", "Conv ×1 (qdq_float)", "MatMul ×2"):
        mixed = replace(base, float_ops=(*base.float_ops, other))
        assert not mixed.weight_only_by_design(declared=True), other
        assert applicable_thresholds(THRESHOLDS["int8"], {}, mixed)["int8_heavy_op_share"] == 0.5
    assert not replace(base, float_ops=("Pow ×2", "LSTM ×1 (weight_only)")).weight_only_by_design()  # no conv kept
    tflite = replace(base, format="tflite")
    assert not tflite.weight_only_by_design()  # there a quantizer's miss looks the same,
    assert "int8_heavy_op_share" in applicable_thresholds(THRESHOLDS["int8"], {}, tflite)
    assert "int8_heavy_op_share" not in applicable_thresholds(THRESHOLDS["int8"], {}, tflite, declared=True)  # unless named
