"""Accuracy-aware int8 (edgekit.engine.search): budgets, layer overrides, and the search on real runtimes."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from edgekit.core.errors import BadInput
from edgekit.core.quant import LayerOverride, QuantSpec, parse_overrides
from edgekit.core.budgets import Budget, parse_budgets
from edgekit.core.drift import CEILING_DB, Traced, from_json, rank, to_json
from edgekit.core.search_record import SearchRecord
from edgekit.engine.search import Measurement, Search, StopReason
from edgekit.core.verify import only_near_ties
from tests.conftest import DIGITS, DIGITS_CALIB, DIGITS_EVAL, run_cli

BAD = "tests.models:one_bad_layer"  # conv2 cannot be int8 (see tests/models.py)
BAD_SHAPE = "x=1,1,8,8"


# --- pure logic ---------------------------------------------------------------------------------

def test_budgets_parse_and_measure_the_worst_output():
    (cos, sqnr) = parse_budgets(["cosine=0.99", "sqnr_db=20"])
    assert cos == Budget("cosine", 0.99) and sqnr == Budget("sqnr_db", 20.0)
    metrics = {"output_0": {"cosine": 0.999}, "output_1": {"cosine": 0.98}}
    assert cos.value(metrics) == 0.98
    assert cos.gap(0.98) == pytest.approx(1.0)  # one budget-width (1 - 0.99) short
    assert cos.gap(0.995) == 0.0
    assert Budget("max_abs", 0.5).gap(1.0) == pytest.approx(1.0)
    with pytest.raises(BadInput, match="int8_weight_share"):
        parse_budgets(["int8_weight_share=0.9"])  # an inspection figure, not a verification metric
    with pytest.raises(BadInput, match="not a number"):
        parse_budgets(["cosine=high"])


def test_overrides_parse_and_refuse_what_is_not_a_fallback():
    assert parse_overrides(["conv2", "fc=int16"]) == (LayerOverride("conv2", "float"), LayerOverride("fc", "int16"))
    with pytest.raises(BadInput, match="int4"):
        parse_overrides(["conv2=int4"])
    with pytest.raises(BadInput, match="more than once"):
        parse_overrides(["conv2", "conv2=int16"])
    spec = QuantSpec("int8").with_override("a", "int16").with_override("a", "float")
    assert spec.overrides == (LayerOverride("a", "float"),)


class _Layer:
    def __init__(self, layer, loss_db, gain_db=None):
        self.layer, self.loss_db, self.gain_db, self.quantized = layer, loss_db, gain_db, True


def _measure(effects: dict, shares: dict | None = None, noise: dict | None = None):
    """A model whose cosine is 0.9 plus the effect of each layer kept back, and whose output SQNR
    follows the cosine unless `noise` moves it (pure arithmetic)."""
    noise = noise or {}
    calls = []

    def measure(spec: QuantSpec, index: int) -> Measurement:
        calls.append(spec)
        cos = 0.9 + sum(effects.get(o.layer, 0.0) for o in spec.overrides)
        share = 1.0 - sum((shares or {}).get(o.layer, 0.01) for o in spec.overrides)
        sqnr = -10 * math.log10(max(1 - cos, 1e-9)) + sum(noise.get(o.layer, 0.0) for o in spec.overrides)
        return Measurement(spec, None, {"output_0": {"cosine": cos, "sqnr_db": sqnr}}, share, 1000, 0, 0.0)

    return measure, calls


def test_the_search_keeps_only_layers_that_help_and_says_why_it_stopped():
    measure, calls = _measure({"a": 0.05, "b": -0.01, "c": 0.0, "d": 0.06})
    ranked = [_Layer("input x", 9), _Layer("a", 8), _Layer("b", 6), _Layer("c", 5), _Layer("d", 4), _Layer("e", 0.1)]
    best, record = Search((Budget("cosine", 0.99),), ("float",)).run(QuantSpec("int8"), measure, lambda m: ranked)
    assert [k.layer for k in record.kept] == ["a", "d"]  # b made it worse, c changed nothing: undone
    assert record.stopped is StopReason.MET and record.conversions == 5  # full int8, a, b, c, d; e is not a candidate
    assert record.rankings == 2  # once on full int8, again after a was kept
    assert record.kept[0].contribution["cosine"] == pytest.approx(0.05)
    assert record.steps[2].note == "undone: no progress on cosine 0.95 → 0.94"
    assert record.steps[3].note == "undone: no progress on cosine 0.95 → 0.95"
    assert best.spec.overrides == (LayerOverride("a", "float"), LayerOverride("d", "float")) == record.overrides
    assert SearchRecord.from_json(json.loads(json.dumps(record.to_json()))) == record  # as the cache restores it


def test_measured_gains_rank_first_and_small_gains_are_no_candidates():
    # a layer that loses little itself but whose float copy gains the outputs most comes first
    traced = [Traced("stem", "Conv", "t1", ("x",), 40.0, gain_db=0.05), Traced("early", "Conv", "t2", ("t1",), 40.0, gain_db=0.9),
              Traced("late", "Conv", "t3", ("t2",), 40.0, gain_db=0.3), Traced("head", "Softmax", "t4", ("t3",)),
              Traced("flat", "Reshape", "t5", ("t4",))]
    ranked = rank(traced, {"x": 50.0, "t1": 30.0, "t2": 31.0, "t3": 20.0, "t4": 10.0, "t5": None})  # t5: an exact match
    assert [d.layer for d in ranked] == ["early", "late", "stem", "head", "flat"]
    assert ranked[1].loss_db == pytest.approx(11.0) and ranked[-1].sqnr_db == CEILING_DB
    assert "kept float, the outputs gain +0.90 dB" in ranked[0].text()
    assert from_json(to_json(ranked)) == ranked
    measure, calls = _measure({"early": 0.1})
    _best, record = Search((Budget("cosine", 0.99),), ("float",)).run(QuantSpec("int8"), measure, lambda m: ranked)
    assert [k.layer for k in record.kept] == ["early"] and record.stopped is StopReason.MET
    # "stem" (gain 0.05 dB < MIN_GAIN_DB) is never tried even though it loses 20 dB; "head" has no gain: by its loss
    _best, record = Search((Budget("cosine", 0.999),), ("float",)).run(QuantSpec("int8"), _measure({})[0], lambda m: ranked)
    assert [s.layer for s in record.steps[1:]] == ["early", "late", "head"]


def test_an_op_that_runs_float_already_is_ranked_but_never_tried():
    """magika's written-out layer norms run float in its int8 model; a product doubles its inputs' error, so by the SQNR
    it loses such an op ranked high, and the search spent a conversion on each (\"no change\"). It stays in the
    ranking, marked, and is no candidate."""
    traced = [Traced("conv", "Conv", "t1", ("x",), 40.0), Traced("norm", "Mul", "t2", ("t1",), quantized=False),
              Traced("head", "Gemm", "t3", ("t2",), 40.0)]
    ranked = rank(traced, {"x": 50.0, "t1": 40.0, "t2": 25.0, "t3": 24.0})
    assert [(d.layer, d.quantized) for d in ranked] == [("norm", False), ("conv", True), ("head", True)]
    assert from_json(to_json(ranked)) == ranked
    _best, record = Search((Budget("cosine", 0.999),), ("float",)).run(QuantSpec("int8"), _measure({})[0], lambda m: ranked)
    assert [s.layer for s in record.steps[1:]] == ["conv", "head"]


def test_the_search_tries_the_cheaper_fallback_first_and_respects_the_floor_and_the_step_limit():
    measure, calls = _measure({"a": 0.2}, shares={"a": 0.5})
    search = Search((Budget("cosine", 0.99),), ("int16", "float"), min_int8_share=0.8, max_steps=3)
    best, record = search.run(QuantSpec("int8"), measure, lambda m: [_Layer("a", 8), _Layer("b", 7), _Layer("c", 6)])
    assert [(o.layer, o.precision) for s in calls[1:3] for o in s.overrides] == [("a", "int16"), ("a", "float")]
    assert "floor" in record.steps[1].note and not record.kept
    assert record.stopped is StopReason.STEPS and record.conversions == 4  # the first conversion and three steps
    assert best.spec.overrides == () and "step limit (3)" in record.why


def test_a_step_that_changes_nothing_is_not_counted_against_the_step_limit():
    """int16 on a layer inside the int16 stem (`--int16-stem`) makes the model the search already holds."""
    calls = []

    def measure(spec: QuantSpec, index: int) -> Measurement:
        calls.append(spec)
        cos = 0.9 + 0.04 * sum(o.precision == "float" for o in spec.overrides)
        share = 1.0 - 0.01 * sum(o.precision == "float" for o in spec.overrides)
        return Measurement(spec, None, {"output_0": {"cosine": cos}}, share, 1000, 0, 0.0)

    search = Search((Budget("cosine", 0.999),), ("int16", "float"), max_steps=2)
    _best, record = search.run(QuantSpec("int8"), measure, lambda m: [_Layer("a", 8), _Layer("b", 7), _Layer("c", 6)])
    assert [k.layer for k in record.kept] == ["a", "b"] and record.stopped is StopReason.STEPS
    assert record.conversions == 5 and len(calls) == 5  # full int8, a int16 (no change), a float, b int16, b float
    assert record.steps[1].note == "no change: a is at int16 already (not counted as a step)"


def test_a_step_must_show_progress_beyond_top1_agreement():
    """Top-1 agreement moves by whole samples: a step that wins one flipped sample while the
    continuous metrics (or, with top-1 alone, the output SQNR) get worse is undone."""
    def measure(spec, index):
        kept = {o.layer for o in spec.overrides}
        top1 = 0.9 + 0.04 * len(kept)  # every step flips a sample the right way
        cos = 0.995 - (0.001 if "a" in kept else 0) + (0.002 if "b" in kept else 0)
        sqnr = 20 - (3 if "a" in kept else 0) + (1 if "b" in kept else 0)
        return Measurement(spec, None, {"output_0": {"cosine": cos, "top1_agreement": top1, "sqnr_db": sqnr}},
                           1.0, 1000, 0, 0.0)

    ranked = [_Layer("a", 8), _Layer("b", 7)]
    for budgets in [(Budget("cosine", 0.99), Budget("top1_agreement", 0.98)), (Budget("top1_agreement", 0.98),)]:
        _best, record = Search(budgets, ("float",)).run(QuantSpec("int8"), measure, lambda m: ranked)
        assert [k.layer for k in record.kept] == ["b"], budgets
        assert record.steps[1].note.startswith(("undone: no progress on cosine", "undone: no progress on the output"))


def test_a_large_gain_in_signal_outweighs_one_sample_lost_on_top1():
    """Top-1 agreement on 32 samples loses one flip by chance as it wins one: a pass that raises the output
    SQNR by 2 dB is kept though one sample more disagrees; one that costs two samples is undone. With int16
    activations everywhere kept, no layer is tried at int16 (it would change nothing)."""
    def measure_losing(flips):
        def measure(spec, index):
            top1 = (31 - (flips if spec.int16_activations else 0) + len(spec.overrides)) / 32
            sqnr = 24.0 + (2.0 if spec.int16_activations else 0) + 3.0 * len(spec.overrides)
            return Measurement(spec, None, {"output_0": {"top1_agreement": top1, "sqnr_db": sqnr}},
                               1.0, 1000, 0, 0.0, samples=32)
        return measure

    for flips, kept in ((1, True), (2, False)):
        best, record = Search((Budget("top1_agreement", 0.97),), ("int16", "float"), passes=("int16_activations",)).run(
            QuantSpec("int8"), measure_losing(flips), lambda m: [_Layer("a", 8, gain_db=1.0)])
        assert record.steps[1].change == "int16_activations" and record.steps[1].accepted is kept, flips
        assert best.spec.int16_activations is kept
        assert kept or record.steps[1].note == "undone: worse than without it"
        assert (record.steps[2].layer, record.steps[2].precision) == ("a", "float" if kept else "int16")


def test_a_large_move_of_a_met_cosine_counts_toward_a_missed_top1():
    def measure(spec, index):
        cos = 0.991 + (0.002 if spec.overrides else 0)  # cosine met either way; top-1 unchanged
        return Measurement(spec, None, {"output_0": {"cosine": cos, "top1_agreement": 0.9}}, 1.0, 1000, 0, 0.0)

    _best, record = Search((Budget("cosine", 0.99), Budget("top1_agreement", 0.98)), ("float",)).run(
        QuantSpec("int8"), measure, lambda m: [_Layer("a", 8)])
    assert [k.layer for k in record.kept] == ["a"] and record.stopped is StopReason.EXHAUSTED


def test_bias_correction_is_tried_first_and_kept_only_when_it_helps():
    def measure(spec, index):
        cos = (0.995 if spec.bias_correction else 0.98) + (0.01 if spec.overrides else 0)
        return Measurement(spec, None, {"output_0": {"cosine": cos}}, 1.0, 1000, 0, 0.0)

    ranked = []
    best, record = Search((Budget("cosine", 0.99),), ("float",), passes=("bias_correction",)).run(
        QuantSpec("int8"), measure, lambda m: ranked.append(1) or [_Layer("a", 8)])
    assert record.stopped is StopReason.MET and record.conversions == 2 and not ranked  # no layer kept back
    assert record.steps[1].change == "bias_correction" and record.steps[1].accepted
    assert best.spec.bias_correction and record.passes["bias_correction"] and record.kept == ()
    assert record.contributions["bias_correction"]["cosine"] == pytest.approx(0.015)

    def hurts(spec, index):
        cos = (0.97 if spec.bias_correction else 0.98) + (0.02 if spec.overrides else 0)
        return Measurement(spec, None, {"output_0": {"cosine": cos}}, 1.0, 1000, 0, 0.0)

    best, record = Search((Budget("cosine", 0.99),), ("float",), passes=("bias_correction",)).run(
        QuantSpec("int8"), hurts, lambda m: [_Layer("a", 8)])
    assert record.steps[1].note.startswith("undone") and not best.spec.bias_correction
    assert [k.layer for k in record.kept] == ["a"] and record.contributions["bias_correction"] is None


def test_smooth_quant_comes_first_then_bias_correction_each_kept_on_its_own_merit():
    def measure(spec, index):  # SmoothQuant helps part of the way, bias correction does nothing on top
        cos = 0.98 + (0.005 if spec.smooth_quant else 0) + (0.01 if spec.overrides else 0)
        return Measurement(spec, None, {"output_0": {"cosine": cos}}, 1.0, 1000, 0, 0.0)

    best, record = Search((Budget("cosine", 0.99),), ("float",), passes=("smooth_quant", "bias_correction")).run(
        QuantSpec("int8"), measure, lambda m: [_Layer("a", 8)])
    assert [(s.change, s.accepted) for s in record.steps] == [
        (None, True), ("smooth_quant", True), ("bias_correction", False), ("layer", True)]
    assert best.spec.smooth_quant and not best.spec.bias_correction and [k.layer for k in record.kept] == ["a"]
    assert record.passes["smooth_quant"] and record.contributions["smooth_quant"]["cosine"] == pytest.approx(0.005)
    assert record.passes["bias_correction"] is False and record.contributions["bias_correction"] is None
    assert record.stopped is StopReason.MET and "SmoothQuant" in record.why


def test_only_near_ties_left_stops_before_any_layer_step_and_says_why():
    def measure(spec, index, near_ties=True):
        return Measurement(spec, None, {"output_0": {"cosine": 0.997, "top1_agreement": 0.96875, "sqnr_db": 22.0}},
                           1.0, 1000, 0, 0.0, near_ties=near_ties)

    budgets = (Budget("cosine", 0.99), Budget("top1_agreement", 0.98))
    ranked = []
    best, record = Search(budgets, ("float",)).run(QuantSpec("int8"), measure, lambda m: ranked.append(1) or [])
    assert record.stopped is StopReason.NEAR_TIES and record.conversions == 1 and not ranked
    assert "top1_agreement ≥ 0.98 (got 0.96875)" in record.why and "near-tie" in record.why
    # a disagreement that is not a near-tie, or a missed cosine, still searches
    _, record = Search(budgets, ("float",)).run(QuantSpec("int8"), lambda s, i: measure(s, i, False),
                                                lambda m: [_Layer("a", 8)])
    assert record.stopped is not StopReason.NEAR_TIES and record.conversions > 1
    _, record = Search((Budget("cosine", 0.999), budgets[1]), ("float",)).run(
        QuantSpec("int8"), measure, lambda m: [_Layer("a", 8)])
    assert record.stopped is not StopReason.NEAR_TIES and record.conversions > 1


def test_only_near_ties_reads_the_top_two_scores_of_the_source():
    ref = np.array([[5.0, 1.0, 0.0], [2.0, 1.999, 0.0], [0.0, 3.0, 1.0]])
    flipped_tie = np.array([[5.0, 1.0, 0.0], [1.9, 2.0, 0.0], [0.0, 3.0, 1.0]])
    flipped_clear = np.array([[0.5, 1.0, 0.0], [2.0, 1.0, 0.0], [0.0, 3.0, 1.0]])
    assert only_near_ties([ref], [flipped_tie])
    assert not only_near_ties([ref], [flipped_clear]) and not only_near_ties([ref], [ref])


def test_no_step_when_full_int8_meets_the_budgets():
    measure, calls = _measure({})
    ranked = []
    _best, record = Search((Budget("cosine", 0.8),), ("float",)).run(QuantSpec("int8"), measure,
                                                                      lambda m: ranked.append(1) or [])
    assert record.stopped is StopReason.MET and record.conversions == 1 and not ranked  # not even a ranking
    assert record.rankings == 0


# --- real converters and runtimes ---------------------------------------------------------------

def _convert(tmp_path, *args, model=BAD, target="tflite"):
    extra = ["--input-shape", BAD_SHAPE] if model == BAD else []
    p = run_cli("convert", model, "-t", target, "--int8", "--calib", DIGITS_CALIB, "--eval", DIGITS_EVAL,
                "--out", tmp_path / "out", "--json", *extra, *args)
    return p, (json.loads(p.stdout)["artifacts"][0] if p.stdout.strip() else None)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["tflite", "executorch", "onnx", "ort"])  # .ort: its layers ranked on its int8 .onnx
def test_the_search_keeps_exactly_the_damaged_layer_back(tmp_path, target):
    p, artifact = _convert(tmp_path, "--budget", "sqnr_db=20", target=target)
    assert p.returncode == 0, p.stderr
    search = artifact["search"]
    first = search["steps"][0]
    assert first["layer"] is None and first["values"]["sqnr_db"] < 5  # full int8: conv2 destroys the signal
    assert [k["layer"] for k in search["kept"]] == ["conv2"]
    assert search["kept"][0]["precision"] == "float" and search["kept"][0]["contribution"]["sqnr_db"] > 10
    assert artifact["quantization"]["overrides"][0] == {"layer": "conv2", "precision": "float"}
    assert artifact["verification"]["status"] == "pass" and artifact["verification"]["metrics"]["output_0"]["sqnr_db"] > 20
    assert search["int8_share"] >= 0.8
    if target in ("onnx", "ort"):  # int16 activations come first, and do not help a layer whose weights are the problem:
        # neither at high resolution nor everywhere (the whole-model passes) nor in conv2
        assert [(s["change"], s["accepted"]) for s in search["steps"][1:3]] == [
            ("int16_stem", False), ("int16_activations", False)]
        assert [(s["layer"], s["precision"], s["accepted"]) for s in search["steps"][3:5]] == [
            ("conv2", "int16", False), ("conv2", "float", True)]
    # bias correction is part of the default recipe, on from full int8: no step of its own, and it stays on
    assert artifact["quantization"]["bias_correction"] and "bias_correction" not in [s.get("change") for s in search["steps"]]
    assert "kept back: conv2 at float" in p.stderr


def test_a_failed_int8_verdict_names_the_layer_and_the_options_that_keep_it_back(tmp_path):
    p = run_cli("convert", BAD, "--input-shape", BAD_SHAPE, "-t", "onnx", "-t", "ort", "--int8", "--calib", DIGITS_CALIB,
                "--eval", DIGITS_EVAL, "--out", tmp_path / "out", "--json")
    assert p.returncode == 1
    for artifact in json.loads(p.stdout)["artifacts"]:  # the .ort's layers are its int8 .onnx's
        assert artifact["verification"]["status"] == "fail"
        note = next(n for n in artifact["verification"]["notes"] if n.startswith("the layers whose float copy gains"))
        assert note.split(": ", 1)[1].startswith("conv2 (+")  # the damaged layer first, by its measured gain
        assert "--keep conv2 keeps the first back; --budget cosine=0.99" in note and "--budget cosine=0.99" in p.stderr
    assert p.stderr.count("ranking the layers") == 1  # that .onnx is ranked once, for both targets
    p, artifact = _convert(tmp_path / "quiet", "--no-attribution", target="onnx")
    assert p.returncode == 1 and not any(n.startswith("the layers") for n in artifact["verification"].get("notes", []))


@pytest.mark.slow
def test_no_bias_correction_is_respected_by_the_search(tmp_path):
    p, artifact = _convert(tmp_path, "--budget", "sqnr_db=20", "--no-bias-correction", target="onnx")
    assert p.returncode == 0, p.stderr
    search = artifact["search"]
    assert "bias_correction" not in [s.get("change") for s in search["steps"]]
    assert [k["layer"] for k in search["kept"]] == ["conv2"] and not artifact["quantization"]["bias_correction"]


def test_the_digits_model_needs_no_step_and_gets_what_a_plain_conversion_makes(tmp_path):
    p, artifact = _convert(tmp_path, "--budget", "cosine=0.99", model=DIGITS, target="onnx")
    assert p.returncode == 0, p.stderr
    assert artifact["search"]["conversions"] == 1 and len(artifact["search"]["steps"]) == 1
    assert artifact["search"]["stopped"] == "met" and artifact["search"]["kept"] == []
    assert artifact["quantization"]["overrides"] == []
    # The search decided on half the calibration samples; the artifact is calibrated on all 200, as without it.
    plain, made = _convert(tmp_path / "plain", model=DIGITS, target="onnx")
    assert plain.returncode == 0, plain.stderr
    assert artifact["calibration"]["samples"] == made["calibration"]["samples"] == 200
    assert artifact["verification"]["metrics"] == made["verification"]["metrics"]


def test_a_budget_missed_at_the_floor_exits_1_and_keeps_the_closest_result(tmp_path):
    p, artifact = _convert(tmp_path, "--budget", "sqnr_db=20", "--min-int8-share", "0.95", target="onnx")
    assert p.returncode == 1, p.stderr
    search = artifact["search"]
    assert "sqnr_db ≥ 20" in search["why"] and "below 0.95" in search["why"]
    assert search["kept"] == [] and artifact["quantization"]["overrides"] == []  # nothing helped within the floor
    assert any("sqnr_db" in r for r in artifact["verification"]["reasons"])


def test_a_kept_layer_is_float_in_the_artifact(tmp_path):
    p, artifact = _convert(tmp_path, "--keep", "conv2", target="tflite")
    assert p.returncode == 0, p.stderr
    assert "CONV_2D" in " ".join(artifact["verification"]["inspection"]["float_ops"])
    assert artifact["quantization"]["overrides"] == [{"layer": "conv2", "precision": "float"}]
    assert "search" not in artifact


@pytest.mark.slow
def test_a_conv_kept_float_stays_float_in_onnxruntime(tmp_path):
    """onnxruntime's WeightBiasQuantization transformer quantizes, at session load, the float weights of a
    Conv that reads a per-tensor DequantizeLinear, per tensor: conv2's weights of 50 would round its
    other weights to zero again. The artifact, loaded with default session options (and baked into
    the .ort), must keep conv2 float."""
    p = run_cli("convert", BAD, "--input-shape", BAD_SHAPE, "-t", "onnx", "-t", "ort", "--int8", "--calib",
                DIGITS_CALIB, "--eval", DIGITS_EVAL, "--out", tmp_path / "out", "--json", "--keep", "conv2")
    assert p.returncode == 0, p.stderr
    for artifact in json.loads(p.stdout)["artifacts"]:
        assert artifact["verification"]["metrics"]["output_0"]["sqnr_db"] > 35, artifact["target"]  # 13 dB before


@pytest.mark.parametrize("keep, target, message", [
    ("conv9", "onnx", "no layer named 'conv9'"),
    ("conv2=int16", "tflite", "cannot keep layer 'conv2' at int16"),
])
def test_an_override_a_backend_cannot_express_exits_2(tmp_path, keep, target, message):
    p, _ = _convert(tmp_path, "--keep", keep, target=target)
    assert p.returncode == 2 and message in p.stderr, p.stderr
    assert "conv2" in p.stderr  # the error names the layers there are, or the one asked for


@pytest.mark.slow
def test_check_searches_records_the_kept_layers_and_starts_from_them_next_time(tmp_path):
    import torch

    from tests.models import one_bad_layer

    torch.export.save(torch.export.export(one_bad_layer(), (torch.rand(1, 1, 8, 8),)), tmp_path / "bad.pt2")
    config = tmp_path / "edgekit.toml"
    config.write_text(f'''
[[models]]
name = "bad"
path = "bad.pt2"
calibration = "{DIGITS_CALIB}"
eval = "{DIGITS_EVAL}"
targets = ["tflite"]
precisions = ["int8"]
search = true
[models.budgets.int8]
sqnr_db = 20
''')
    junit, md = tmp_path / "junit.xml", tmp_path / "summary.md"
    first = run_cli("check", config, "--out", tmp_path / "out", "--update-baseline", "--junit", junit,
                    "--markdown", md, "--json")
    assert first.returncode == 0, first.stderr
    case = json.loads(first.stdout)["cases"][0]
    # full int8 (with bias correction, the default recipe), then conv2 kept float
    assert case["overrides"] == [{"layer": "conv2", "precision": "float"}] and case["search"]["conversions"] == 2
    assert case["search"]["steps"][1]["layer"] == "conv2" and case["bias_correction"]
    assert "kept back: conv2 at float" in junit.read_text()
    assert "| `conv2` | float |" in md.read_text()
    baseline = json.loads((tmp_path / "edgekit.baseline.json").read_text())
    assert baseline["cases"]["bad tflite int8"]["overrides"] == [{"layer": "conv2", "precision": "float"}]

    again = run_cli("check", config, "--out", tmp_path / "out2", "--json")
    assert again.returncode == 0, again.stderr
    search = json.loads(again.stdout)["cases"][0]["search"]
    assert search["conversions"] == 1 and search["steps"][0]["note"] == "the given overrides"
    assert search["overrides"] == [{"layer": "conv2", "precision": "float"}]


def test_a_keras_layer_kept_float_is_float_in_the_tflite(tmp_path):
    from tests.conftest import KERAS, KERAS_CALIB, KERAS_EVAL

    def convert(*keep):
        p = run_cli("convert", KERAS, "-t", "tflite", "--int8", "--calib", KERAS_CALIB, "--eval", KERAS_EVAL,
                    "--out", tmp_path / "-".join(keep), "--json", *(a for k in keep for a in ("--keep", k)))
        return p, (json.loads(p.stdout)["artifacts"][0] if p.stdout.strip() else None)

    p, artifact = convert("conv1")
    assert p.returncode == 0, p.stderr
    assert artifact["verification"]["inspection"]["float_ops"] == ["CONV_2D ×1"]  # conv1; conv2 stays int8
    p, _ = convert("conv9")
    assert p.returncode == 2 and "no layer named 'conv9'" in p.stderr and "conv2" in p.stderr


@pytest.mark.parametrize("flag, name, target", [("--bias-correction", "bias correction", "ptl"),
                                               ("--smooth-quant", "SmoothQuant", "tflite"),
                                               ("--int16-stem", "int16 activations at high resolution", "tflite"),
                                               ("--int16-activations", "int16 activations everywhere", "executorch")])
def test_a_pass_where_the_backend_has_none_exits_2(tmp_path, flag, name, target):
    from tests.conftest import KERAS, KERAS_CALIB

    source = (KERAS, KERAS_CALIB) if target == "tflite" else (DIGITS, DIGITS_CALIB)
    p = run_cli("convert", source[0], "-t", target, "--int8", flag, "--calib", source[1], "--out", tmp_path / "out")
    assert p.returncode == 2 and f"the {target} backend has no {name}" in p.stderr, p.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize("key", ["bias_correction", "smooth_quant", "int16_stem", "int16_activations"])
def test_a_config_pass_that_is_not_a_boolean_exits_2(tmp_path, key):
    config = tmp_path / "edgekit.toml"
    config.write_text(f'[[models]]\nname = "d"\npath = "{DIGITS}"\ncalibration = "{DIGITS_CALIB}"\n'
                      f'targets = ["onnx"]\nprecisions = ["int8"]\n{key} = "yes"\n')
    p = run_cli("check", config, "--out", tmp_path / "out")
    assert p.returncode == 2 and key in p.stderr and "true or false" in p.stderr, p.stderr


def test_a_tflite_op_kept_float_and_quantized_again_is_traced_through():
    """An int8 .tflite with an op kept float (no fp32 op matches it) whose output is quantized again for the int8
    op after it: the search's ranking of g2p-en's GRU after keeping `fc` float failed with "KeyError: 'int8-op261'"
    on that QUANTIZE. It passes the float op's level on, so the op after it is judged on what reached it."""
    from types import SimpleNamespace

    from edgekit.core.drift import rank
    from edgekit.targets.tflite.layers import _keys

    def op(index, name, inputs, outputs):
        return {"index": index, "op_name": name, "inputs": inputs, "outputs": outputs}

    def model(ops, tensors):
        return SimpleNamespace(ops=ops, inputs=[0], activations={0, *(t for o in ops for t in o["outputs"])},
                               tensors={t: {"name": f"t{t}", "dtype": "float32", "shape": [1]} for t in range(tensors)})

    ref = model([op(0, "FULLY_CONNECTED", [0, 9], [1]), op(1, "TANH", [1], [2]), op(2, "ADD", [2, 2], [3])], 10)
    qnt = model([op(0, "QUANTIZE", [0], [1]), op(1, "FULLY_CONNECTED", [1, 9], [2]), op(2, "DEQUANTIZE", [2], [3]),
                 op(3, "TANH", [3], [4]), op(4, "QUANTIZE", [4], [5]), op(5, "ADD", [5, 5], [6])], 10)
    pairs = {1: (ref.ops[0], "FULLY_CONNECTED"), 5: (ref.ops[2], "ADD")}  # the float TANH is matched by nothing
    compare, traced = _keys(ref, qnt, pairs, ("x",))
    assert sorted(key for key, _ in compare.values()) == ["input:0@quantized", "op0", "op2"]
    by_op = {t.op: t for t in traced}
    assert set(by_op["ADD"].inputs) == {"int8-op3@quantized"}
    ranked = {d.tensor: d for d in rank(traced, {"input:0@quantized": 40.0, "op0": 30.0, "op2": 20.0})}
    assert ranked["op2"].loss_db == 10.0  # judged against the FC's 30 dB that reached it through the float TANH
