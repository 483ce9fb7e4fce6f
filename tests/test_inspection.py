"""The "did it really quantize" inspection, on real fp32 and int8 artifacts built from digits_cnn."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from edgekit.core.errors import BadInput
from edgekit.core.inspection import Inspection
from edgekit.targets.inspection import inspect_artifact
from tests.conftest import DIGITS, DIGITS_CALIB, REPO

pytestmark = pytest.mark.slow

CALIB_SAMPLES = 16


def _calib() -> np.ndarray:
    return np.load(DIGITS_CALIB)["x"][:CALIB_SAMPLES].astype(np.float32)


def _pt2e(quantizer, **convert_kw):
    """digits_cnn quantized with `quantizer` through PT2E: (quantized module, example args)."""
    import torch
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    args = (torch.from_numpy(_calib()[:1]),)
    module = torch.export.load(str(DIGITS)).module()
    prepared = prepare_pt2e(torch.export.export(module, args).module(), quantizer)
    for x in _calib():
        prepared(torch.from_numpy(x[None]))
    return convert_pt2e(prepared, **convert_kw), args


@pytest.fixture(scope="module")
def fp32(converted_digits) -> dict[str, str]:
    return {r.artifact.format: r.artifact.path for r in converted_digits[0].artifacts}


@pytest.fixture(scope="module")
def tflite_int8(tmp_path_factory) -> str:
    import litert_torch
    from litert_torch.quantize.pt2e_quantizer import PT2EQuantizer, get_symmetric_quantization_config
    from litert_torch.quantize.quant_config import QuantConfig

    quantizer = PT2EQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    module, args = _pt2e(quantizer, fold_quantize=False)
    path = str(tmp_path_factory.mktemp("tflite") / "digits_int8.tflite")
    litert_torch.convert(module, args, quant_config=QuantConfig(pt2e_quantizer=quantizer)).export(path)
    return path


@pytest.fixture(scope="module")
def onnx_int8(fp32, tmp_path_factory) -> dict[str, str]:
    """ONNX Runtime static QDQ (per-channel int8) and dynamic quantization of the fp32 ONNX."""
    import onnxruntime as ort
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType, quant_pre_process,
                                          quantize_dynamic, quantize_static)

    out = tmp_path_factory.mktemp("onnx")
    pre, qdq, dyn = (str(out / f"digits_{n}.onnx") for n in ("pre", "qdq", "dyn"))
    quant_pre_process(fp32["onnx"], pre)
    name = ort.InferenceSession(pre, providers=["CPUExecutionProvider"]).get_inputs()[0].name

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter({name: x[None]} for x in _calib())

        def get_next(self):
            return next(self.feeds, None)

    quantize_static(pre, qdq, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    quantize_dynamic(pre, dyn, weight_type=QuantType.QInt8)
    return {"qdq": qdq, "dynamic": dyn}


@pytest.fixture(scope="module")
def pte_int8(tmp_path_factory) -> dict[str, str]:
    """XNNPACK-quantized digits_cnn, lowered to XNNPACK and (the trap) left on portable kernels."""
    import executorch.kernels.quantized  # noqa: F401 - registers the quantized_decomposed out variants
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (XNNPACKQuantizer,
                                                                         get_symmetric_quantization_config)
    from executorch.exir import to_edge, to_edge_transform_and_lower

    module, args = _pt2e(XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True)))
    out = tmp_path_factory.mktemp("pte")
    paths = {"xnnpack": str(out / "digits_int8.pte"), "portable": str(out / "digits_int8_portable.pte")}
    lowered = to_edge_transform_and_lower(torch.export.export(module, args), partitioner=[XnnpackPartitioner()])
    (out / "digits_int8.pte").write_bytes(lowered.to_executorch().buffer)
    (out / "digits_int8_portable.pte").write_bytes(to_edge(torch.export.export(module, args)).to_executorch().buffer)
    return paths


def _float_types(r: Inspection) -> str:
    return " ".join(r.float_ops)


def _check_fp32(r: Inspection, heavy_ops: tuple[str, ...]):
    assert r.int8_weight_share == 0 and r.int8_compute_share == 0
    assert r.weight_bytes_by_dtype["float32"] > 150_000
    assert all(o.mode == "float" for o in r.ops)
    for op in heavy_ops:
        assert op in _float_types(r), (op, r.float_ops)


def _check_static_int8(r: Inspection):
    assert r.int8_weight_share >= 0.9, r.weight_bytes_by_dtype
    assert r.int8_compute_share >= 0.9, r.float_ops
    assert r.largest_tensors[0]["dtype"] == "int8" and r.largest_tensors[0]["bytes"] == 64 * 512


def test_fp32_tflite(fp32):
    r = inspect_artifact("tflite", fp32["tflite"])
    _check_fp32(r, ("CONV_2D", "FULLY_CONNECTED ×2", "MAX_POOL_2D ×1"))
    assert r.op_counts["CONV_2D"] == 1 and r.io_dtypes == {"inputs": ["float32"], "outputs": ["float32"]}
    assert r.delegated is None


def test_fp32_onnx(fp32):
    r = inspect_artifact("onnx", fp32["onnx"])  # weights sit in .onnx.data: sized without reading them
    _check_fp32(r, ("Conv ×2", "Gemm ×2"))
    assert r.op_counts["Conv"] == 2
    assert any("external data" in n for n in r.notes)


def test_fp32_pte(fp32):
    r = inspect_artifact("pte", fp32["pte"])
    _check_fp32(r, ("xnnpack:XNNConv2d", "xnnpack:XNNFullyConnected ×2"))
    assert r.delegated["XnnpackBackend"]["calls"] == 1 and r.delegated["XnnpackBackend"]["ops"] >= 5


def test_int8_tflite_is_int8_end_to_end(tflite_int8):
    r = inspect_artifact("tflite", tflite_int8)
    _check_static_int8(r)
    assert r.int8_compute_share == 1.0 and r.float_ops == ()
    assert r.op_counts["CONV_2D"] == 1 and r.op_counts["FULLY_CONNECTED"] == 2
    assert r.io_dtypes["inputs"] == ["int8"]  # litert-torch PT2E makes integer I/O
    assert any("quantize with the input tensor's scale" in n for n in r.notes)


def test_tflite_buffers_stored_after_the_flatbuffer(tflite_int8, tmp_path):
    """Large-model layout: constant data at offset/size past the flatbuffer gives the same numbers."""
    from ai_edge_litert.tools import flatbuffer_utils as fbu

    model = fbu.read_model(tflite_int8)
    blobs = {}
    for i, b in enumerate(model.buffers):
        if b.data is not None and len(b.data):
            blobs[i], b.data, b.offset, b.size = bytes(b.data), None, 1, len(b.data)
    out = bytearray(fbu.convert_object_to_bytearray(model))
    root = fbu.Model.GetRootAs(out, 0)
    for i, data in blobs.items():
        out += b"\0" * (-len(out) % 16)
        fbu.update_packed_buffer(root.Buffers(i), offset=len(out))
        out += data
    path = tmp_path / "offset.tflite"
    path.write_bytes(bytes(out))
    a, b = inspect_artifact("tflite", tflite_int8), inspect_artifact("tflite", str(path))
    assert b.weight_bytes_by_dtype == a.weight_bytes_by_dtype and b.ops == a.ops


def test_int8_onnx_qdq(onnx_int8):
    r = inspect_artifact("onnx", onnx_int8["qdq"])
    _check_static_int8(r)
    assert r.op_counts["Conv"] == 2 and r.op_counts["Gemm"] == 2 and r.op_counts["DequantizeLinear"] > 0
    # int32 biases come through DequantizeLinear too: they must not make Conv/Gemm look weight-only
    assert "int32" in r.weight_bytes_by_dtype
    assert {o.mode for o in r.ops if o.type in ("Conv", "Gemm")} == {"int8"}
    assert r.executed["int8_heavy_op_share"] == 1.0  # ONNX Runtime fuses every one into its int8 kernels


def test_what_onnx_runtime_runs_is_read_from_the_graph_it_makes(tmp_path):
    """conv → SiLU → conv → ReLU quantized int8 × int8 (as onnxruntime's quantizer makes it): the file asks for
    int8 in both convs; ONNX Runtime fuses the second into its int8 kernel and runs the first, which feeds the
    SiLU, in float between dequantize and quantize. The file's reading says the first, what the runtime runs
    (`executed`) the second, in the JSON, `inspect` and the bench."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    from edgekit.features.bench import slow_int8_reasons
    from tests.conftest import run_cli
    from tests.models import photo_crops

    p = run_cli("convert", "tests.models:conv_silu_conv", "--input-shape", "x=1,3,32,32", "-t", "onnx",
                "-o", tmp_path / "out", "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    [artifact] = json.loads(p.stdout)["artifacts"]
    crops = photo_crops(16, 0, 32)

    class Reader:
        def __init__(self):
            self.rows = iter(crops)

        def get_next(self):
            x = next(self.rows, None)
            return None if x is None else {"x": x[None]}

    path = tmp_path / "int8.onnx"
    quantize_static(artifact["path"], str(path), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    read = inspect_artifact("onnx", str(path))
    assert read.int8_heavy_op_share == 1.0 and read.float_ops == ()
    ran = read.executed
    assert ran["runtime"].startswith("onnxruntime ") and ran["compute_ops"] == 4
    assert ran["float_ops"][0] == "Conv ×1 (qdq_float)" and ran["int8_heavy_op_share"] == 0.5
    assert ran["ops_by_mode"] == {"qdq_float": 3, "int8": 1}  # the conv, the Sigmoid and the Mul; the fused conv
    assert read.to_json()["executed"] == ran
    shown = run_cli("inspect", path)
    assert shown.returncode == 0 and "as it runs" in shown.stdout and "25.0% int8 of 4 compute ops" in shown.stdout
    reasons = slow_int8_reasons(read)
    # the float conv is the small one: 3 → 16 channels (442,368 MACs) against 16 → 16 (2,359,296)
    assert "50% of the conv/matmul ops (16% of their MACs) are float kernels: Conv ×1 (qdq_float)" in reasons[0]
    assert ran["heavy_macs"] == 442_368 + 2_359_296
    # the verdict's int8 compute gate reads what the runtime runs, not the file's 100%
    from edgekit.core.verify import compare

    same = [np.ones((4, 16), np.float32)]
    verdict = compare(same, same, {"int8_heavy_op_share": 0.6}, inspection=read)
    assert verdict.status == "fail" and verdict.reasons[0].startswith(
        "did not really quantize as onnxruntime CPUExecutionProvider runs it: only 50.0% of the convolution/matmul "
        "ops run in int8"), verdict.reasons
    assert compare(same, same, {"int8_heavy_op_share": 0.5}, inspection=read).status == "pass"


def test_edgekit_quantizes_onnx_in_the_types_onnx_runtime_fuses_on_this_cpu(tmp_path):
    """The same model through edgekit: where this CPU's int8 products do not saturate it makes uint8 × int8 and
    int8 × int8, reads each as ONNX Runtime runs it and keeps the one whose convs all run int8 (the conv feeding
    the SiLU fuses with uint8 activations), recording both; where they saturate, uint8 × uint8 alone."""
    from edgekit.core.cpu import int8_products_saturate
    from tests.conftest import run_cli
    from tests.models import photo_crops

    np.savez(tmp_path / "calib.npz", x=photo_crops(16, 0, 32))
    np.savez(tmp_path / "eval.npz", x=photo_crops(8, 1, 32))
    p = run_cli("convert", "tests.models:conv_silu_conv", "--input-shape", "x=1,3,32,32", "-t", "onnx", "--int8",
                "--calib", tmp_path / "calib.npz", "--eval", tmp_path / "eval.npz", "-o", tmp_path / "out", "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    [artifact] = json.loads(p.stdout)["artifacts"]
    types, ran = artifact["int8_types"], artifact["verification"]["inspection"]["executed"]
    assert artifact["verification"]["status"] == "pass"
    assert ran["int8_heavy_op_share"] == 1.0, ran  # both convs run ONNX Runtime's int8 kernel
    if int8_products_saturate():
        assert (types["activations"], types["weights"]) == ("uint8", "uint8") and "saturates" in types["why"]
        return
    assert (types["activations"], types["weights"]) == ("uint8", "int8") and types["optimize"] == "latency"
    chosen, other = sorted(types["candidates"], key=lambda c: not c["chosen"])
    assert chosen["chosen"] and (other["activations"], other["weights"]) == ("int8", "int8")
    assert chosen["int8_compute_share_as_run"] > other["int8_compute_share_as_run"]
    assert abs(chosen["sqnr_db"] - other["sqnr_db"]) < 1.0
    assert "int8 types: uint8 activations × int8 weights, ONNX Runtime runs the most compute ops" in p.stderr
    assert "against_fp32" not in types  # every compute op runs an int8 kernel: nothing to time against float


def test_an_onnx_activation_without_an_int8_kernel_is_timed_against_the_float_model(tmp_path):
    """conv → hardsigmoid → conv: ONNX Runtime has no int8 HardSigmoid, so the int8 model is timed against the
    float one it came from; the JSON records both latencies and the op, and `convert` says so where int8 is not
    faster."""
    from tests.conftest import run_cli
    from tests.models import photo_crops

    np.savez(tmp_path / "calib.npz", x=photo_crops(16, 0, 32))
    p = run_cli("convert", "tests.models:conv_hardsigmoid_conv", "--input-shape", "x=1,3,32,32", "-t", "onnx", "--int8",
                "--calib", tmp_path / "calib.npz", "-o", tmp_path / "out", "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    [artifact] = json.loads(p.stdout)["artifacts"]
    assert artifact["verification"]["inspection"]["executed"]["float_ops"] == ["HardSigmoid ×1 (qdq_float)"]
    timed = artifact["int8_types"]["against_fp32"]
    assert timed["float_ops"] == ["HardSigmoid ×1 (qdq_float)"] and timed["int8_ms"] > 0 and timed["fp32_ms"] > 0
    assert timed["vs_fp32"] == pytest.approx(timed["int8_ms"] / timed["fp32_ms"], rel=0.01)
    said = "runs {:.2f}× the float model's latency".format(timed["vs_fp32"]) in p.stderr
    assert said == (timed["vs_fp32"] >= 1), p.stderr[-1500:]
    if said:
        assert "HardSigmoid ×1 (qdq_float) have no int8 kernel there" in p.stderr and "-p fp32" in p.stderr


def test_the_executed_int8_share_by_macs_weighs_each_conv_and_matmul_by_its_work():
    """One formula for channels-last convs, depthwise convs and linears (the weight's elements per output channel
    times the output's elements), the shared dimension for a matmul; a small int8 op beside a big float one
    is a small share of the MACs however the ops count."""
    from edgekit.core.inspection import OpInfo
    from edgekit.targets.inspection import executed_view, heavy_macs

    assert heavy_macs([1, 8, 8, 16], [16, 3, 3, 4]) == 64 * 16 * 36  # conv: 3×3 over 4 input channels
    assert heavy_macs([1, 8, 8, 16], [1, 3, 3, 16]) == 64 * 16 * 9  # depthwise
    assert heavy_macs([1, 10], [10, 64]) == 640  # fully connected
    assert heavy_macs([1, 16, 8, 8], [16, 4, 3, 3], channels=1) == 64 * 16 * 36  # an ONNX conv, channels first
    assert heavy_macs([2, 4, 4], inner=8) == 256  # batch matmul
    assert heavy_macs([1, -1, 10], [10, 64]) == 0 and heavy_macs([1, 10]) == 0  # a shape not known
    ops = [OpInfo("CONV_2D", "int8", "a"), OpInfo("CONV_2D", "qdq_float", "b"), OpInfo("ADD", "int8", "c")]
    view = executed_view("tflite", "test", ops, macs={"a": 100, "b": 300})
    assert view["int8_heavy_op_share"] == 0.5 and view["int8_mac_share"] == 0.25 and view["heavy_macs"] == 400
    assert "int8_mac_share" not in executed_view("onnx", "test", ops)  # a reader without shapes gives none
    assert "int8_mac_share" not in executed_view("onnx", "test", ops, macs={"a": 100})  # nor one missing a conv
    from edgekit.targets.inspection import HEAVY_OPS

    assert [t for t in ("QLinearConv", "QLinearMatMul", "QGemm", "aten::linear", "FULLY_CONNECTED",
                        "xnnpack:XNNBatchMatrixMultiply", "QLinearMul", "QLinearAdd", "QuantizeLinear")
            if HEAVY_OPS.search(t)] == ["QLinearConv", "QLinearMatMul", "QGemm", "aten::linear", "FULLY_CONNECTED",
                                        "xnnpack:XNNBatchMatrixMultiply"]  # ONNX Runtime's QLinear elementwise ops are not


def test_int8_onnx_dynamic(onnx_int8):
    r = inspect_artifact("onnx", onnx_int8["dynamic"])
    assert r.int8_weight_share >= 0.9
    heavy = [o for o in r.ops if o.type in ("ConvInteger", "MatMulInteger")]
    assert len(heavy) == 4 and all(o.mode == "dynamic" for o in heavy)
    assert 0 < r.int8_compute_share < 0.5  # the float Mul/Add rescaling around each kernel counts too
    assert r.io_dtypes["inputs"] == ["float32"]


def test_int8_pte_xnnpack(pte_int8):
    r = inspect_artifact("pte", pte_int8["xnnpack"])
    _check_static_int8(r)
    assert r.executed["delegate_partitions"] == 1 and r.executed["outside_delegate"] == []
    assert r.int8_compute_share == 1.0
    assert r.op_counts["xnnpack:XNNConv2d"] == 1 and r.op_counts["xnnpack:XNNFullyConnected"] == 2
    assert r.io_dtypes["inputs"] == ["float32"] and "XnnpackBackend" in r.delegated


def test_undelegated_int8_pte_is_caught(pte_int8):
    """Int8 weights, but every conv/addmm is a float portable kernel between quantize/dequantize."""
    r = inspect_artifact("pte", pte_int8["portable"])
    assert r.int8_weight_share >= 0.9
    assert r.int8_compute_share == 0
    assert r.delegated == {}
    assert "aten::convolution ×2 (qdq_float)" in r.float_ops and "aten::addmm ×2 (qdq_float)" in r.float_ops
    assert any("XnnpackPartitioner" in n for n in r.notes)
    ran = r.executed  # what the runtime runs: every compute op in a portable kernel, no delegate
    assert ran["delegate_partitions"] == 0 and ran["int8_compute_share"] == 0
    assert "aten::convolution ×2 (qdq_float)" in ran["outside_delegate"]
    from edgekit.features.bench import slow_int8_reasons

    assert "run outside the XNNPACK delegate, in the runtime's own kernels, and nothing runs in the delegate" in \
        " ".join(slow_int8_reasons(r))


def test_to_json_is_plain_json_and_reads_back(pte_int8, fp32, onnx_int8):
    for fmt, path in (("pte", pte_int8["portable"]), ("onnx", fp32["onnx"]), ("tflite", fp32["tflite"]),
                      ("onnx", onnx_int8["qdq"])):
        made = inspect_artifact(fmt, path)
        d = json.loads(json.dumps(made.to_json()))
        assert d["format"] == fmt and d["compute_ops"] == len(d["ops"]) and isinstance(d["float_ops"], list)
        assert Inspection.from_json(d) == made  # what a child process, the cache and a result document carry


def test_a_summary_without_its_ops_reads_back_with_their_counts(pte_int8):
    made = inspect_artifact("pte", pte_int8["portable"])
    summary = {k: v for k, v in made.to_json().items() if k != "ops"}  # as a document of a large model has it
    read = Inspection.from_json(summary)
    assert read.ops == () and read.compute_ops == made.compute_ops > 0 and read.ops_by_mode == made.ops_by_mode
    assert read.int8_compute_share == made.int8_compute_share and read.needs == made.needs
    assert Inspection.from_json(made.to_json(everything=True)).ops == made.ops


def test_unknown_format_is_bad_input():
    with pytest.raises(BadInput):
        inspect_artifact("coreml", "model.mlpackage")


def test_import_loads_no_framework():
    code = ("import sys, edgekit.targets.inspection; "
            "print(sorted(m for m in ('torch', 'onnx', 'onnxruntime', 'executorch', 'ai_edge_litert', "
            "'litert_torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_optimize_accuracy_keeps_the_most_accurate_pair_and_an_unknown_goal_is_refused(tmp_path):
    """`--optimize accuracy` keeps the ONNX integer types with the best SQNR on the calibration samples and says so;
    an unknown goal is refused before any work, with the choices."""
    from tests.conftest import run_cli
    from tests.models import photo_crops

    np.savez(tmp_path / "calib.npz", x=photo_crops(16, 0, 32))
    args = ("convert", "tests.models:conv_silu_conv", "--input-shape", "x=1,3,32,32", "-t", "onnx", "--int8",
            "--calib", tmp_path / "calib.npz", "-o", tmp_path / "out", "--json")
    bad = run_cli(*args, "--optimize", "speed")
    assert bad.returncode == 2 and "unknown --optimize 'speed'" in bad.stderr and "latency, size, accuracy" in bad.stderr
    p = run_cli(*args, "--optimize", "accuracy")
    assert p.returncode == 0, p.stderr[-2000:]
    [artifact] = json.loads(p.stdout)["artifacts"]
    types = artifact["int8_types"]
    assert types["optimize"] == "accuracy"
    if len(types.get("candidates", ())) > 1:  # one pair only where this CPU's int8 products saturate
        best = max(c["sqnr_db"] for c in types["candidates"])
        [chosen] = [c for c in types["candidates"] if c["chosen"]]
        assert chosen["sqnr_db"] == best and types["why"].startswith("the most accurate on 8 calibration samples")


def test_a_global_average_pool_written_as_reduce_mean_is_rewritten_and_runs_int8(tmp_path):
    """ReduceMean over H and W keeping its dimensions (torch's export of adaptive_avg_pool2d(1), every
    squeeze-and-excite block) becomes GlobalAveragePool with the same name and outputs; over one axis, or dropping
    them, it stays. Quantized, ONNX Runtime runs the pool as an int8 kernel, where it runs ReduceMean in float."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper
    from onnxruntime.quantization import QuantFormat, QuantType, quant_pre_process, quantize_static

    from edgekit.converters.onnx_simplify import simplify

    axes = helper.make_tensor("hw", TensorProto.INT64, [2], [2, 3])
    one = helper.make_tensor("w", TensorProto.INT64, [1], [3])
    nodes = [helper.make_node("ReduceMean", ["x", "hw"], ["pooled"], name="pool"),
             helper.make_node("ReduceMean", ["x", "w"], ["rows"], name="rows_mean"),
             helper.make_node("ReduceMean", ["x", "hw"], ["flat"], name="flat_mean", keepdims=0)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("pooled", "rows", "flat")],
                              initializer=[axes, one])
    src, prepared = tmp_path / "m.onnx", tmp_path / "pre.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), src)
    quant_pre_process(str(src), str(prepared))  # gives the rank the rewrite reads
    x = np.random.default_rng(0).standard_normal((1, 4, 6, 6)).astype(np.float32)
    before = ort.InferenceSession(str(prepared), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert simplify(prepared) == 1
    ops = {n.name: n.op_type for n in onnx.load(str(prepared)).graph.node}
    assert ops == {"pool": "GlobalAveragePool", "rows_mean": "ReduceMean", "flat_mean": "ReduceMean"}
    after = ort.InferenceSession(str(prepared), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for b, a in zip(before, after):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)

    class Reader:
        rows = iter([x, x * 0.5])

        def get_next(self):
            v = next(self.rows, None)
            return None if v is None else {"x": v}

    quantized = tmp_path / "int8.onnx"
    quantize_static(str(prepared), str(quantized), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, op_types_to_quantize=["GlobalAveragePool"])
    ran = inspect_artifact("onnx", str(quantized)).executed
    assert ran["ops_by_mode"].get("int8") == 1 and not any(f.startswith("GlobalAveragePool") for f in ran["float_ops"]), ran


def test_an_int8_op_the_xnnpack_delegate_does_not_take_is_named_with_the_parts_it_splits(tmp_path):
    """conv → hardswish → conv quantized by TFLiteConverter: LiteRT's XNNPACK delegate takes both int8 convs and
    not the int8 HARD_SWISH between them, which then runs in the interpreter's own kernel and splits the delegated
    graph in two. The inspection, `inspect` and the bench say so; the file's own reading sees only int8 ops."""
    import keras
    import tensorflow as tf

    from edgekit.features.bench import slow_int8_reasons
    from tests.conftest import run_cli

    inputs = keras.Input((8, 8, 3))
    y = keras.layers.Conv2D(4, 3, padding="same")(inputs)
    y = keras.layers.Conv2D(4, 3, padding="same")(keras.layers.Activation("hard_swish")(y))
    converter = tf.lite.TFLiteConverter.from_keras_model(keras.Model(inputs, y))
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    rng = np.random.default_rng(0)
    converter.representative_dataset = lambda: ([rng.standard_normal((1, 8, 8, 3)).astype(np.float32)] for _ in range(8))
    path = tmp_path / "hard_swish.int8.tflite"
    path.write_bytes(converter.convert())
    read = inspect_artifact("tflite", str(path))
    assert read.float_ops == () and read.int8_compute_share == 1.0
    ran = read.executed
    assert ran["outside_delegate"] == ["HARD_SWISH ×1 (int8)"] and ran["delegate_partitions"] == 2, ran
    assert "HARD_SWISH ×1 (int8) run outside the XNNPACK delegate" in " ".join(slow_int8_reasons(read))
    shown = run_cli("inspect", path)
    assert shown.returncode == 0 and "HARD_SWISH ×1 (int8): the delegated graph runs in 2 parts" in shown.stdout
