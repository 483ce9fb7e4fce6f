"""SmoothQuant (edgekit.calibration.smooth_quant): the same function in float, flatter activations for int8."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from edgekit.calibration import smooth_quant  # noqa: E402
from tests.models import normalized_block  # noqa: E402


def _samples(n=8):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(1, 4, 16, generator=g),) for _ in range(n)]


def test_scales_follow_the_formula_and_leave_dead_channels_alone():
    s = smooth_quant.scales(np.array([16.0, 0.0, 1.0]), np.array([1.0, 2.0, 0.0]))
    assert s[0] == pytest.approx(16.0 ** smooth_quant.ALPHA) and s[1] == 1.0 and s[2] == 1.0


def test_pt2e_smoothing_keeps_the_function_and_flattens_the_linears_input():
    block = normalized_block()
    samples = _samples()
    original = {n: p.detach().clone() for n, p in block.named_parameters()}
    module = torch.export.export(block, samples[0]).module()
    weights = {n: p.detach().clone() for n, p in module.named_parameters()}
    inserted = smooth_quant.smooth_pt2e(module, iter(samples))
    assert len(inserted) == 1  # one Mul for the group of q and k
    (mul,) = [n for n in module.graph.nodes if n.name == inserted[0]]
    assert {u.target for u in mul.users} == {torch.ops.aten.linear.default}  # the residual add reads the norm
    x = samples[0][0]
    with torch.no_grad():
        assert torch.allclose(module(x), block(x), atol=1e-4, rtol=1e-4)
        h = block.norm(x).abs().reshape(-1, 16).amax(0)
        smoothed = h * module.get_buffer(mul.args[1].target)
    assert (h.max() / h.median()) > 10 * (smoothed.max() / smoothed.median())  # the outlier channels tamed
    assert all(torch.equal(p, original[n]) for n, p in block.named_parameters())  # the source model untouched
    assert not torch.equal(dict(module.named_parameters())["q.weight"], weights["q.weight"])


def test_onnx_smoothing_keeps_the_function(tmp_path):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")

    block = normalized_block()
    samples = _samples()
    path = tmp_path / "block.onnx"
    torch.onnx.export(block, samples[0], str(path), input_names=["x"], dynamo=True, external_data=False)
    from edgekit.sources.loading import open_source

    assert smooth_quant.applies(open_source(str(path)))
    inserted = smooth_quant.smooth_onnx(path, tmp_path / "smoothed.onnx", ({"x": s[0].numpy()} for s in samples))
    assert inserted, [n.op_type for n in onnx.load(str(path)).graph.node]
    x = {"x": samples[0][0].numpy()}
    before = ort.InferenceSession(str(path)).run(None, x)[0]
    after = ort.InferenceSession(str(tmp_path / "smoothed.onnx")).run(None, x)[0]
    np.testing.assert_allclose(after, before, rtol=1e-4, atol=1e-4)
    assert [n.op_type for n in onnx.load(str(tmp_path / "smoothed.onnx")).graph.node].count("Mul") > \
        [n.op_type for n in onnx.load(str(path)).graph.node].count("Mul")


def test_a_model_without_normalized_linears_is_left_as_it_is(tmp_path):
    module = torch.export.export(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).eval(),
                                 (torch.randn(1, 4),)).module()
    assert smooth_quant.smooth_pt2e(module, iter([(torch.randn(1, 4),)])) == []


def test_auto_tries_every_method_with_every_combination_of_the_passes():
    from edgekit.core.quant import QuantSpec, auto_specs

    specs = auto_specs(QuantSpec("int8", "auto"), ("minmax", "mse"), ("smooth_quant", "bias_correction"))
    assert [(s.method, s.smooth_quant, s.bias_correction) for s in specs] == [
        (m, sq, bc) for m in ("minmax", "mse") for sq in (False, True) for bc in (False, True)]
    asked = auto_specs(QuantSpec("int8", "auto", smooth_quant=True), ("minmax",), ("smooth_quant", "bias_correction"))
    assert [(s.smooth_quant, s.bias_correction) for s in asked] == [(True, False), (True, True)]  # asked for: always on


def test_the_default_smooths_where_the_backend_has_it_and_the_model_has_the_pattern():
    from edgekit.core.quant import Capabilities, QuantSpec

    has, lacks = Capabilities(methods=("minmax",), smooth_quant=True), Capabilities(methods=("minmax",))
    default = QuantSpec("int8", smooth_quant=None)  # what the command line leaves to edgekit
    assert default.for_backend(has, smoothable=True).smooth_quant is True
    assert default.for_backend(has, smoothable=False).smooth_quant is False
    assert default.for_backend(lacks, smoothable=True).smooth_quant is False  # never a pass the backend lacks
    assert QuantSpec("int8", smooth_quant=False).for_backend(has, smoothable=True).smooth_quant is False  # --no-smooth-quant
    assert lacks.lacks(default.for_backend(lacks, smoothable=True)) is None  # the default is never refused
    assert lacks.lacks(QuantSpec("int8", smooth_quant=True).for_backend(lacks, smoothable=True)) is not None


def test_a_request_leaves_smooth_quant_and_the_onnx_method_to_the_default_unless_told():
    """What `build_request` (the command line's and the API's options) hands the backends: SmoothQuant on for a
    model with the pattern unless `smooth_quant=False`; on onnx a choice of two methods unless one is named, and
    none on a backend with one default method."""
    from edgekit.converters.onnx_quantize import OnnxQuantize
    from edgekit.converters.tf_to_tflite import TfToTflite
    from edgekit.converters.torch_to_pte import TorchToPte
    from edgekit.engine.request import build_request

    default = build_request("m.onnx", ("onnx",), precision="int8")
    assert default.spec_for(OnnxQuantize, smoothable=True).smooth_quant is True
    assert build_request("m.onnx", ("onnx",), precision="int8", smooth_quant=False).spec_for(
        OnnxQuantize, smoothable=True).smooth_quant is False
    assert default.default_choice(OnnxQuantize) == ("minmax", "mean-minmax")
    assert default.default_choice(TfToTflite) == ("minmax", "mean-minmax")
    assert default.default_choice(TorchToPte) == ()
    assert build_request("m.onnx", ("onnx",), precision="int8", calib_method="minmax").default_choice(OnnxQuantize) == ()


def test_smooth_quant_applies_to_models_with_linears_reading_a_normalization(tmp_path):
    from edgekit.sources.loading import SourceOptions, open_source

    assert smooth_quant.applies(open_source("tests.models:normalized_block", SourceOptions(input_shapes=("x=1,4,16",))))
    assert not smooth_quant.applies(open_source("tests.models:one_bad_layer", SourceOptions(input_shapes=("x=1,1,8,8",))))


def test_the_command_line_smooths_by_default_and_not_with_no_smooth_quant(tmp_path):
    import json

    from tests.conftest import run_cli

    args = ("convert", "tests.models:normalized_block", "--input-shape", "x=1,4,16", "-t", "onnx", "--int8",
            "--calib", "random", "--calib-method", "minmax", "--json", "--no-cache", "--no-attribution")
    made = {}
    for name, extra in (("default", ()), ("off", ("--no-smooth-quant",))):
        p = run_cli(*args, *extra, "-o", tmp_path / name)
        assert p.returncode in (0, 1), p.stderr[-2000:]  # converted and verified, whatever the verdict
        [made[name]] = json.loads(p.stdout)["artifacts"]
    assert made["default"]["quantization"]["smooth_quant"] is True
    assert made["off"]["quantization"]["smooth_quant"] is False
