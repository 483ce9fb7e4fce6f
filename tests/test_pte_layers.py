"""Per-layer drift of an int8 ExecuTorch program, traced on the PT2E graph it is lowered from."""

from __future__ import annotations

import math

import pytest

from edgekit.core.drift import rank
from edgekit.calibration.data import load_samples
from edgekit.sources.loading import open_source
from edgekit.converters import pte_layers
from edgekit.converters.torch_to_pte import TorchToPte, quantize_int8
from edgekit.core.quant import Precision, QuantSpec
from tests.conftest import DIGITS, DIGITS_CALIB, DIGITS_EVAL

pytestmark = pytest.mark.slow

METHOD = "minmax"  # the ExecuTorch backend's default
SAMPLES = 50
# The digits CNN's parametrized layers (sample_models/train_digits_cnn.py) and their aten ops.
WEIGHTED = {"features.0": "conv2d", "features.2": "conv2d", "classifier.1": "linear", "classifier.3": "linear"}
DAMAGED = "features.2"  # the middle conv


@pytest.fixture(scope="module")
def digits():
    source = open_source(str(DIGITS))
    calibration = load_samples(DIGITS_CALIB, source.signature, what="calibration data")
    inputs = load_samples(DIGITS_EVAL, source.signature).head(SAMPLES).inputs
    return source, calibration, inputs


def test_every_conv_and_linear_is_ranked_under_its_module_path(digits):
    source, calibration, inputs = digits
    layers = TorchToPte.trace_layers(source, calibration, METHOD, inputs)
    by_layer = {d.layer: d for d in layers}

    for path, op in WEIGHTED.items():
        assert path in by_layer, (path, [d.layer for d in layers])
        assert by_layer[path].op == op
        assert by_layer[path].weight_sqnr_db is not None and 30 < by_layer[path].weight_sqnr_db < 80
    # The activations between them are traced too, and named after their modules.
    assert {"features.1", "features.3", "features.4", "classifier.2"} <= set(by_layer)
    for d in layers:
        assert math.isfinite(d.sqnr_db) and 15 < d.sqnr_db < 80, d.text()
        assert math.isfinite(d.loss_db)
    assert [d.loss_db for d in layers] == sorted((d.loss_db for d in layers), reverse=True)
    assert not any(d.weight_sqnr_db is not None for d in layers if d.op not in ("conv2d", "linear"))


def test_a_layer_with_damaged_weights_is_ranked_first(digits):
    import torch

    source, calibration, inputs = digits
    quantized = quantize_int8(source, calibration, QuantSpec(Precision.INT8, METHOD))
    names = source.signature.input_names

    healthy = rank(*pte_layers.compare(source.exported().module(), quantized, inputs, names))
    before = next(d for d in healthy if d.layer == DAMAGED)
    assert healthy[0].layer != DAMAGED, [d.text() for d in healthy]  # else the test below proves nothing
    assert before.loss_db < 10 and before.sqnr_db > 30, before.text()

    weight = _int8_weight(quantized, DAMAGED)
    weight.copy_(torch.randint(-127, 128, weight.shape, dtype=torch.int8, generator=torch.Generator().manual_seed(0)))
    traced, sqnr = pte_layers.compare(source.exported().module(), quantized, inputs, names)
    damaged = rank(traced, sqnr)

    first = damaged[0]
    assert (first.layer, first.op) == (DAMAGED, "conv2d"), [d.text() for d in damaged]
    assert first.weight_sqnr_db < 5 and first.sqnr_db < 10, first.text()
    assert first.loss_db > before.loss_db + 30
    # The layers before it are untouched; every layer after it inherits the damage but loses little itself.
    after = {d.layer: d for d in damaged}
    assert after["features.0"].sqnr_db == pytest.approx(next(d for d in healthy if d.layer == "features.0").sqnr_db)
    assert after["classifier.3"].sqnr_db < 10
    assert all(d.loss_db < first.loss_db - 20 for d in damaged[1:])


def _int8_weight(quantized, layer: str):
    """The int8 weight tensor convert_pt2e froze for `layer`'s conv/linear (read through its dequantize)."""
    import torch

    (node,) = [n for n in quantized.graph.nodes if n.op == "call_function" and pte_layers._op(n) in ("conv2d", "linear")
               and pte_layers._layer(n) == layer]
    dequantize = node.args[1]
    assert "dequantize_per_channel" in str(dequantize.target)
    frozen = dequantize.args[0]
    assert frozen.op == "get_attr"
    weight = getattr(quantized, frozen.target)
    assert weight.dtype == torch.int8
    return weight
