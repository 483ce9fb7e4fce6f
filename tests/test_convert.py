"""Each converter and each runner, for real, on the bundled digits model."""

from __future__ import annotations

import json
import time

import numpy as np
import onnx
import pytest

from edgekit.core.artifact import ModelArtifact
from edgekit.core.errors import BadInput, ConversionFailed
from edgekit.sources.loading import SourceOptions
from edgekit.engine.request import build_request
from edgekit.engine.pipeline import convert
from edgekit.engine import isolation, pipeline
from edgekit.engine.isolation import run_isolated
from edgekit.core.signature import Signature, TensorSpec
from tests.conftest import DIGITS, DIGITS_EVAL

pytestmark = pytest.mark.slow


def test_every_target_passes_with_the_source_models_accuracy(converted_digits):
    result, out = converted_digits
    assert [r.target for r in result.artifacts] == ["tflite", "executorch", "ptl", "onnx", "ort"]
    with np.load(DIGITS_EVAL) as data:
        n_eval = len(data["labels"])
    for r in result.artifacts:
        v = r.verdict
        assert v.status == "pass", (r.target, v.reasons)
        assert v.samples == n_eval
        assert v.metrics["output_0"]["cosine"] >= 0.9999
        assert v.metrics["output_0"]["top1_agreement"] == 1.0
        acc = v.task_accuracy
        assert acc["reference"] > 0.95
        assert abs(acc["artifact"] - acc["reference"]) <= 0.005
        assert r.artifact.bytes > 10_000
        via_onnx = ["onnx"] if r.target == "ort" else []
        assert list(r.artifact.meta.route) == ["torch-export", *via_onnx, r.artifact.format]
        assert r.artifact.meta.seconds > 0
    assert {p.name for p in out.iterdir()} == {"digits_cnn.tflite", "digits_cnn.pte", "digits_cnn.ptl",
                                               "digits_cnn.onnx", "digits_cnn.onnx.data", "digits_cnn.ort",
                                               "digits_cnn.required_operators.config"}


def test_tool_versions_are_recorded(converted_digits):
    versions = {r.target: r.artifact.meta.tool_versions for r in converted_digits[0].artifacts}
    assert set(versions["tflite"]) >= {"torch", "litert-torch", "ai-edge-litert"}
    assert set(versions["executorch"]) >= {"torch", "executorch"}
    assert set(versions["onnx"]) >= {"torch", "onnx", "onnxscript"}


def test_onnx_external_data_counts_in_size_and_hash(converted_digits):
    onnx_result = next(r for r in converted_digits[0].artifacts if r.target == "onnx")
    art = onnx_result.artifact
    assert len(art.files) == 2 and art.files[1].endswith(".onnx.data")
    model_only = ModelArtifact("onnx", art.path, art.signature, files=(art.path,))
    assert art.bytes > model_only.bytes
    assert art.sha256 != model_only.sha256
    model = onnx.load(art.path)  # loads the external data from beside the model
    onnx.checker.check_model(model)
    assert [i.name for i in model.graph.input] == ["x"]


def test_runners_reproduce_the_source_outputs_in_child_processes(converted_digits):
    """Each runtime, on its own, gives back the verified outputs for the same inputs."""
    from edgekit.sources.loading import open_source

    result, _ = converted_digits
    src = open_source(str(DIGITS))
    with np.load(DIGITS_EVAL) as data:
        x = data["x"][:8].reshape(8, 1, 1, 8, 8)
    expected = np.stack([src.run({"x": x[i]})[0] for i in range(8)])
    for r in result.artifacts:
        (got,), _ = run_isolated(r.artifact, {"x": x})
        assert got.shape == (8, 1, 10)
        np.testing.assert_allclose(got, expected, atol=1e-4, err_msg=r.target)


def _maps(pid: int) -> str:
    with open(f"/proc/{pid}/maps") as f:
        return f.read()


def test_a_runtime_worker_imports_its_runtime_before_its_first_job():
    isolation.close_workers()
    isolation.start_workers({"onnx"})
    worker = isolation._WORKERS[("onnx", ())]
    deadline = time.monotonic() + 120
    while "onnxruntime_pybind11_state" not in _maps(worker.proc.pid):  # ONNX Runtime's native library
        assert worker.alive and time.monotonic() < deadline, "the onnx worker never loaded ONNX Runtime"
        time.sleep(0.2)
    assert isolation._WORKERS[("onnx", ())] is worker  # no job has been sent: the import happened at start


def test_convert_starts_the_runtime_workers_before_it_opens_the_source(tmp_path, monkeypatch):
    isolation.close_workers()
    workers_at_open = {}
    open_source = pipeline.open_source

    def spy(location, options, say):
        workers_at_open.update({fmt: w.alive for (fmt, _), w in isolation._WORKERS.items()})
        return open_source(location, options, say)

    monkeypatch.setattr(pipeline, "open_source", spy)
    result = convert(build_request(str(DIGITS), ("tflite", "onnx"), str(tmp_path), eval_data=str(DIGITS_EVAL)))
    assert all(r.verdict.status == "pass" for r in result.artifacts)
    assert workers_at_open == {"tflite": True, "onnx": True}


def test_a_damaged_artifact_fails_in_its_runtime_not_in_edgekit(converted_digits, tmp_path):
    tflite = next(r for r in converted_digits[0].artifacts if r.target == "tflite").artifact
    damaged = tmp_path / "damaged.tflite"
    whole = open(tflite.path, "rb").read()
    damaged.write_bytes(whole[: len(whole) // 3])  # still starts with the TFL3 identifier
    art = ModelArtifact("tflite", str(damaged), tflite.signature)
    with pytest.raises(ConversionFailed, match=r"LiteRT interpreter \(ai_edge_litert\) failed running damaged.tflite"):
        run_isolated(art, {"x": np.zeros((1, 1, 1, 8, 8), np.float32)})


def test_two_inputs_two_outputs_across_targets(tmp_path):
    result = convert(build_request("tests.models:two_inputs", ("all",), str(tmp_path),
                                    source_options=SourceOptions(input_shapes=("image=1,3,8,8", "extra=1,6"))))
    assert result.warnings and "seeded random inputs" in result.warnings[0]
    for r in result.artifacts:
        assert r.verdict.status == "pass", (r.target, r.verdict.reasons)
        assert set(r.verdict.metrics) == {"output_0", "output_1"}


def test_conversion_failure_exits_3_and_leaves_no_file(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(ConversionFailed, match=r"torch_to_onnx: DispatchError: No ONNX function found for .*linalg_svd") as info:
        convert(build_request("tests.models:unlowerable", ("onnx",), str(out),
                               source_options=SourceOptions(input_shapes=("x=1,8,8",))))
    assert info.value.exit_code == 3
    assert not out.exists()  # not even the temporary folder, nor the output folder the run created


def test_everything_is_checked_before_any_work(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(BadInput, match="unknown target 'coreml'"):
        convert(build_request(str(DIGITS), ("tflite", "coreml"), str(out)))
    bad_eval = tmp_path / "eval.npz"
    np.savez(bad_eval, x=np.zeros((4, 3, 8, 8), np.float32))
    with pytest.raises(BadInput, match=r"input 'x' has shape \(4, 3, 8, 8\), expected \(N, 1, 8, 8\)"):
        convert(build_request(str(DIGITS), ("tflite",), str(out), eval_data=str(bad_eval)))
    assert not out.exists()


def test_a_strict_threshold_fails_the_verdict_but_keeps_the_reported_artifact(tmp_path):
    result = convert(build_request(str(DIGITS), ("onnx",), str(tmp_path), eval_data=str(DIGITS_EVAL),
                                    thresholds={"max_abs": 0.0}))
    (r,) = result.artifacts
    if r.verdict.metrics["output_0"]["max_abs"] == 0.0:
        pytest.skip("onnxruntime reproduced torch bit for bit; nothing to fail on")
    assert result.failed and r.verdict.status == "fail"
    assert r.verdict.reasons[0].startswith("output_0 max_abs")
    assert json.loads(json.dumps(result.to_json()))["artifacts"][0]["verification"]["status"] == "fail"
    assert (tmp_path / "digits_cnn.onnx").is_file()
