"""`edgekit inspect` on real artifacts, input/output shapes everywhere (convert, report, inspect), and
verification at a second size of a dynamic dimension, on the real runtimes."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.slow

DIGITS_IN, DIGITS_OUT = [1, 1, 8, 8], [1, 10]
FORMATS = ("tflite", "pte", "ptl", "onnx", "ort")


@pytest.fixture(scope="module")
def digits(converted_digits) -> dict[str, str]:
    """format → the digits CNN's fp32 artifact of that format."""
    return {r.artifact.format: r.artifact.path for r in converted_digits[0].artifacts}


def _static(shape: list) -> dict:
    return {"shape": shape, "dynamic": []}


def _shapes(entry: dict) -> tuple[list, list]:
    return [{k: e[k] for k in ("shape", "dynamic")} for e in entry["inputs"]], \
        [{k: e[k] for k in ("shape", "dynamic")} for e in entry["outputs"]]


def test_inspect_json_on_every_format(digits):
    paths = [digits[f] for f in FORMATS]
    proc = run_cli("inspect", *paths, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "edgekit.inspect/1"
    assert [a["path"] for a in doc["artifacts"]] == paths and [a["format"] for a in doc["artifacts"]] == list(FORMATS)
    for a in doc["artifacts"]:
        ins = a["inspection"]
        assert a["precision"] == "fp32" and a["bytes"] == sum(Path(f["path"]).stat().st_size for f in a["files"])
        assert ins["int8_weight_share"] == 0 and ins["int8_compute_share"] == 0
        assert ins["weight_bytes_by_dtype"]["float32"] > 150_000, a["format"]
        assert ins["float_ops"] and sum(ins["op_counts"].values()) >= 5
        assert ins["largest_tensors"][0]["bytes"] == 64 * 512 * 4  # the 512 → 64 linear's float weight
        assert ins["io_dtypes"] == {"inputs": ["float32"], "outputs": ["float32"]}
        inputs, outputs = _shapes(ins["io_shapes"])
        if a["format"] == "ptl":  # a .ptl does not record its shapes: said, not guessed
            assert inputs == [{"shape": None, "dynamic": None}] and outputs == [{"shape": None, "dynamic": None}]
            assert any("shapes are unknown" in n for n in ins["notes"])
        else:
            assert inputs == [_static(DIGITS_IN)] and outputs == [_static(DIGITS_OUT)], a["format"]
    by_format = {a["format"]: a["inspection"] for a in doc["artifacts"]}
    assert by_format["onnx"]["io_shapes"]["inputs"][0]["name"] == "x"
    assert by_format["pte"]["delegated"]["XnnpackBackend"]["calls"] == 1
    assert [Path(f["path"]).name for f in doc["artifacts"][3]["files"]] == ["digits_cnn.onnx", "digits_cnn.onnx.data"]


def test_inspect_table_on_every_format(digits):
    proc = run_cli("inspect", *(digits[f] for f in FORMATS))
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    for fmt in FORMATS:
        assert Path(digits[fmt]).name in text
    assert len(re.findall(r"^│ input ", text, re.M)) == len(FORMATS) == len(re.findall(r"^│ output ", text, re.M))
    assert text.count("1×1×8×8 float32") == len(FORMATS) - 1 and text.count("1×10 float32") == len(FORMATS) - 1
    assert "? float32; shape not recorded" in text  # the .ptl
    assert "XnnpackBackend: 1 call" in text and "0.0% of the weight bytes" in text


def test_shapes_in_the_convert_json_and_table(converted_digits):
    from rich.console import Console

    from edgekit.cli.render import render_result

    result, _ = converted_digits
    for r in result.artifacts:
        doc = r.to_json()["verification"]
        inputs, outputs = _shapes(doc["inspection"]["io_shapes"])
        if r.artifact.format != "ptl":
            assert inputs == [_static(DIGITS_IN)] and outputs == [_static(DIGITS_OUT)], r.target
        assert "second_size" not in doc and "notes" not in doc  # nothing dynamic: one size
    out = io.StringIO()
    render_result(result, Console(file=out, width=200))
    table = out.getvalue()
    assert "shapes" in table and table.count("1×1×8×8 → 1×10") == len(result.artifacts) - 1
    assert "? → ?" in table  # the .ptl


def test_shapes_in_the_report(digits):
    proc = run_cli("report", digits["onnx"], digits["tflite"], "--json")
    assert proc.returncode == 0, proc.stderr
    for a in json.loads(proc.stdout)["artifacts"]:
        assert _shapes(a["io_shapes"]) == ([_static(DIGITS_IN)], [_static(DIGITS_OUT)])
    md = run_cli("report", digits["onnx"], "--markdown")
    assert md.returncode == 0 and "I/O shapes" in md.stdout and "1×1×8×8 → 1×10" in md.stdout
    table = run_cli("report", digits["onnx"])
    assert table.returncode == 0 and "1×1×8×8 → 1×10" in table.stdout


def _linear_onnx(path: Path, mix_batch: bool = False) -> Path:
    """y = x·W + b with a dynamic batch axis N; `mix_batch`: every row of y is the sum over the batch
    instead (the same at a batch of one, wrong at two, as a model mixing its samples would be)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    init = [numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w"),
            numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"]),
             helper.make_node("Add", ["xw", "b"], ["y" if not mix_batch else "r"])]
    if mix_batch:
        init += [numpy_helper.from_array(np.array([0], np.int64), "axes"),
                 numpy_helper.from_array(np.zeros(1, np.float32), "zero")]
        nodes += [helper.make_node("ReduceSum", ["r", "axes"], ["s"], keepdims=1),
                  helper.make_node("Mul", ["r", "zero"], ["z"]),  # keeps y's shape N×3
                  helper.make_node("Add", ["s", "z"], ["y"])]
    graph = helper.make_graph(nodes, "linear", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])], init)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_dynamic_batch_is_shown_and_verified_at_two_sizes(tmp_path):
    model = _linear_onnx(tmp_path / "linear.onnx")
    out = tmp_path / "out"
    proc = run_cli("convert", model, "-t", "onnx", "-t", "ort", "-p", "fp16", "--input-shape", "x=1,4", "-o", out, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [a["target"] for a in doc["artifacts"]] == ["onnx", "ort"]
    for a in doc["artifacts"]:
        v = a["verification"]
        assert v["status"] == "pass", v.get("reasons")
        shapes = v["inspection"]["io_shapes"]
        assert shapes["inputs"] == [{"name": "x", "shape": ["N", 4], "dynamic": [0]}], a["target"]
        assert shapes["outputs"] == [{"name": "y", "shape": ["N", 3], "dynamic": [0]}], a["target"]
        second = v["second_size"]
        assert second["dims"] == [{"input": "x", "axis": 0, "symbol": "N", "batch": True, "sizes": [1, 2]}]
        assert second["shapes"] == {"x": [2, 4]} and second["runs"] == 1 and second["reference"] == "source"
        assert second["status"] == "pass" and second["metrics"]["output_0"]["cosine"] >= 0.999
    assert "N×4 → N×3" in proc.stderr and "verified at a second size: x axis 0 (batch) 1 → 2: pass" in proc.stderr
    import onnxruntime as ort  # the .ort's shapes, read from the file, are what a session on it reports

    opts = ort.SessionOptions()
    opts.add_session_config_entry("session.load_model_format", "ORT")
    session = ort.InferenceSession(doc["artifacts"][1]["path"], opts, providers=["CPUExecutionProvider"])
    assert [session.get_inputs()[0].shape, session.get_outputs()[0].shape] == [["N", 4], ["N", 3]]

    onnx_artifact = doc["artifacts"][0]["path"]
    table = run_cli("inspect", onnx_artifact)
    assert table.returncode == 0 and "N×4 float32; dynamic dims 0" in table.stdout, table.stdout + table.stderr


def test_a_mismatch_at_the_second_size_fails_the_verdict(tmp_path):
    """A given artifact that agrees with the source at a batch of one and mixes the samples of a batch of two."""
    source = _linear_onnx(tmp_path / "linear.onnx")
    good = shutil.copy(source, tmp_path / "same.onnx")
    mixing = _linear_onnx(tmp_path / "mixing.onnx", mix_batch=True)
    config = tmp_path / "edgekit.toml"
    config.write_text(f'[[models]]\nname = "linear"\npath = "{source}"\ninput_shape = ["x=1,4"]\n'
                      f'artifacts = ["{good}", "{mixing}"]\n')
    proc = run_cli("check", config, "--json", "-o", tmp_path / "out")
    assert proc.returncode == 1, proc.stderr
    cases = {Path(c["path"]).name: c for c in json.loads(proc.stdout)["cases"]}
    assert cases["same.onnx"]["status"] == "pass", cases["same.onnx"]["reasons"]
    bad = cases["mixing.onnx"]
    assert bad["status"] == "fail" and bad["metrics"]["output_0"]["cosine"] >= 0.9999  # right at a batch of one
    assert len(bad["reasons"]) >= 1 and all(r.startswith("at the second size (x 2×4): output_0 ") for r in bad["reasons"])


@pytest.mark.parametrize("kind", ["truncated", "garbage"])
def test_a_damaged_file_exits_2_naming_it(digits, tmp_path, kind):
    if kind == "truncated":
        data = Path(digits["tflite"]).read_bytes()
        damaged = tmp_path / "broken.tflite"
        damaged.write_bytes(data[: len(data) // 3])
    else:
        damaged = tmp_path / "noise.onnx"
        damaged.write_bytes(np.random.default_rng(0).integers(0, 256, 4096).astype(np.uint8).tobytes())
    proc = run_cli("inspect", digits["onnx"], damaged)
    assert proc.returncode == 2, proc.stderr
    assert str(damaged) in proc.stderr and proc.stderr.startswith("edgekit: error: ") and "Traceback" not in proc.stderr
    assert proc.stdout == ""
