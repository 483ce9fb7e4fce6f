"""edgekit's PT2E quantizer on small graphs that have the patterns real models have."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from edgekit.calibration import pt2e  # noqa: E402

pytestmark = pytest.mark.slow


def _xnnpack(edgekit: bool):
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )

    backend = pt2e.configure(XNNPACKQuantizer(), get_symmetric_quantization_config, method="minmax", dynamic=False)
    return pt2e.edgekit_quantizer(backend, get_symmetric_quantization_config, "xnnpack") if edgekit else backend


def _quantize(module, example, quantizer, samples):
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    prepared = prepare_pt2e(torch.export.export(module.eval(), example).module(), quantizer)
    with torch.no_grad():
        for s in samples:
            prepared(*s)
    return convert_pt2e(prepared)


def _scales_after(graph_module, op_name: str) -> list[float]:
    """Scales of the quantize ops that read the output of each `op_name` node."""
    out = []
    for node in graph_module.graph.nodes:
        if node.op == "call_function" and op_name in str(node.target):
            for user in node.users:
                if "quantize_per_tensor" in str(user.target):
                    out.append(float(user.args[1]))
    return out


class ConvRelu6(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.bn = torch.nn.BatchNorm2d(8)
        self.act = torch.nn.ReLU6()
        self.head = torch.nn.Conv2d(8, 4, 1)

    def forward(self, x):
        return self.head(self.act(self.bn(self.conv(x))))


def test_relu6_after_a_conv_is_quantized_over_its_own_range():
    """XNNPACKQuantizer observes the clamp with the conv's pre-clamp range; edgekit's observes
    0..6, the 256 levels spent where the activation lives."""
    samples = [(torch.randn(1, 3, 16, 16) * 20,) for _ in range(8)]
    plain = _scales_after(_quantize(ConvRelu6(), samples[0], _xnnpack(False), samples), "hardtanh")
    ours = _scales_after(_quantize(ConvRelu6(), samples[0], _xnnpack(True), samples), "hardtanh")
    assert ours and ours[0] == pytest.approx(6 / 255, rel=0.02)
    assert plain and plain[0] > 4 * ours[0]  # what the backend alone gives


class Positions(torch.nn.Module):
    """Token and position embeddings, the way BERT-class encoders compute position ids."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.tokens = torch.nn.Embedding(100, 16)
        self.positions = torch.nn.Embedding(8, 16)
        self.proj = torch.nn.Linear(16, 4)

    def forward(self, ids, mask):
        position_ids = torch.arange(ids.shape[1]).unsqueeze(0) + 0
        h = self.tokens(ids) + self.positions(position_ids)
        scores = self.proj(h) + (1.0 - mask.unsqueeze(-1).float()) * torch.finfo(torch.float32).min
        return scores.softmax(dim=1)


def test_integer_position_ids_and_masks_stay_exact():
    ids = torch.randint(0, 100, (1, 8))
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 0, 0]])
    samples = [(torch.randint(0, 100, (1, 8)), mask) for _ in range(8)]
    # The backend alone turns the ids into floats (a real encoder fails the same way, with
    # "tensors used as indices must be long" from an index op).
    with pytest.raises((IndexError, RuntimeError), match="(?i)long"):
        _quantize(Positions(), (ids, mask), _xnnpack(False), samples)
    quantized = _quantize(Positions(), (ids, mask), _xnnpack(True), samples)
    with torch.no_grad():
        expected, got = Positions().eval()(ids, mask), quantized(ids, mask)
    assert torch.equal(got[0, 6:], expected[0, 6:])  # masked positions exactly zero, not a quantized blur
    assert torch.nn.functional.cosine_similarity(got.flatten(), expected.flatten(), dim=0) > 0.99
    # the token table is stored int8, per row
    weights = [n for n in quantized.graph.nodes if "dequantize_per_channel" in str(n.target)]
    assert weights, "no int8 embedding table"


class TinyDetector(torch.nn.Module):
    """A YOLO-style head: pixel boxes and sigmoid class scores concatenated into one output."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.features = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU())
        self.boxes = torch.nn.Conv2d(16, 4, 1)
        self.scores = torch.nn.Conv2d(16, 6, 1)

    def forward(self, x):
        h = self.features(x)
        boxes = torch.sigmoid(self.boxes(h)) * 320.0
        scores = torch.sigmoid(self.scores(h) - 4.0)
        return torch.cat([boxes, scores], dim=1).flatten(2)


def test_a_cat_of_pixel_boxes_and_scores_stays_float_and_scores_survive(tmp_path):
    """In the real runtime (ExecuTorch): XNNPACKQuantizer's cat shares one scale between boxes
    (0..320) and scores (0..1); edgekit keeps that cat float. (LiteRT's converter refuses this
    head at int8 with or without edgekit: its sigmoid's fixed scale meets a transpose it inserts.)"""
    from edgekit.calibration.sources import CalibrationSpec
    from edgekit.engine.request import build_request
    from edgekit.engine.pipeline import convert
    from edgekit.core.verify import METRICS

    rng = np.random.default_rng(0)
    images = rng.uniform(0, 1, (24, 1, 3, 16, 16)).astype(np.float32)
    np.savez(tmp_path / "calib.npz", x=images[:16])
    np.savez(tmp_path / "eval.npz", x=images[16:])
    model = TinyDetector().eval()
    torch.export.save(torch.export.export(model, (torch.from_numpy(images[0]),)), tmp_path / "det.pt2")

    samples = [(torch.from_numpy(i),) for i in images[:16]]
    with torch.no_grad():
        ref = np.stack([model(torch.from_numpy(i)).numpy() for i in images[16:]])
        plain = _quantize(TinyDetector(), samples[0], _xnnpack(False), samples)
        collapsed = np.stack([plain(torch.from_numpy(i)).numpy() for i in images[16:]])
    assert METRICS["channel_cosine"](ref, collapsed) < 0.5  # the backend alone

    result = convert(build_request(str(tmp_path / "det.pt2"), ("executorch",), str(tmp_path / "out"),
                                    precision="int8", eval_data=str(tmp_path / "eval.npz"),
                                    calibration=CalibrationSpec(str(tmp_path / "calib.npz"))))
    for r in result.artifacts:
        m = r.verdict.metrics["output_0"]
        assert r.verdict.status == "pass", (r.target, r.verdict.reasons)
        assert m["channel_cosine"] > 0.95 and m["channel_cosine_min"] > 0.9, (r.target, m)


def test_the_percentile_observer_cuts_the_rare_outliers_that_minmax_keeps():
    import torch
    from torchao.quantization.pt2e.observer import MinMaxObserver

    from edgekit.calibration.pt2e import PERCENTILE, percentile_observer

    torch.manual_seed(0)
    x = torch.randn(3_000_000)
    x[:5] = 50.0  # 5 in 3 million: beyond the 99.999th percentile
    kwargs = dict(dtype=torch.int8, qscheme=torch.per_tensor_affine, quant_min=-128, quant_max=127)
    percentile, minmax = percentile_observer()(**kwargs), MinMaxObserver(**kwargs)
    percentile(x), minmax(x)
    low, high = percentile._non_linear_param_search()
    expected = torch.quantile(x[:1_000_000], torch.tensor([1 - PERCENTILE / 100, PERCENTILE / 100])).tolist()
    assert abs(float(low) - expected[0]) < 0.15 and abs(float(high) - expected[1]) < 0.15  # one 2048th of the range
    assert float(minmax.max_val) == 50.0
    assert float(percentile.calculate_qparams()[0]) < float(minmax.calculate_qparams()[0]) / 5
    # --calib-method percentile reaches the backend's config as this observer
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )

    quantizer = pt2e.configure(XNNPACKQuantizer(), get_symmetric_quantization_config, method="percentile", dynamic=False)
    assert isinstance(quantizer.global_config.input_activation.observer_or_fake_quant_ctr(), percentile_observer())


def test_one_range_observer_gives_each_methods_own_range():
    """`auto` observes the calibration samples once (edgekit.calibration.pt2e_statistics): a RangeObserver set to
    a method gives that method's own observer's scale and zero point on the same values."""
    from torchao.quantization.pt2e.observer import HistogramObserver, MinMaxObserver

    from edgekit.calibration.pt2e import percentile_observer, range_observer

    torch.manual_seed(0)
    batches = [torch.randn(250_000) * (1 + i) + i for i in range(4)]  # the range grows: the histogram is rebinned
    batches[2][:3] = 40.0  # rare outliers: the three methods' ranges differ
    kwargs = dict(dtype=torch.int8, qscheme=torch.per_tensor_affine, quant_min=-128, quant_max=127, eps=2 ** -12)
    shared = range_observer()(**kwargs)
    own = {"minmax": MinMaxObserver(**kwargs), "percentile": percentile_observer()(**kwargs),
           "mse": HistogramObserver(**kwargs)}
    for x in batches:
        shared(x)
        for observer in own.values():
            observer(x)
    scales = {}
    for method, observer in own.items():
        shared.method = method
        (scale, zero), (want_scale, want_zero) = shared.calculate_qparams(), observer.calculate_qparams()
        assert float(scale) == float(want_scale) and int(zero) == int(want_zero), method
        scales[method] = float(scale)
    assert len(set(scales.values())) == 3, scales
