"""Loading a .pt2 runs no code of its author: every pickled member goes through the weights-only unpickler.

The crafted archives here are the bundled digits CNN with one member rewritten as a pickle that creates
a canary file when unpickled and then returns the member's real content, so that with --trust-pickle
(or plain torch.export.load) the model still loads and converts, and only the canary tells.
"""

from __future__ import annotations

import io
import json
import logging
import operator
import pickle
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from edgekit.core.errors import BadInput
from edgekit.sources.loading import SourceOptions, _load_exported, open_source
from tests.conftest import DIGITS, DIGITS_EVAL, MOBILENET, run_cli

TRUST_FIX = "pass --trust-pickle if you trust its author"


class _Canary:
    """Unpickles by creating `path` (the proof that the archive's code ran)."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


class _ThenReturn:
    """Unpickles as `real`, after unpickling `payload`."""

    def __init__(self, payload, real):
        self.payload, self.real = payload, real

    def __reduce__(self):
        return (operator.getitem, ((self.payload, self.real), 1))


def _saved(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _rewrite(src: Path, dst: Path, edit) -> Path:
    """Copy the archive `src` to `dst`, each member's bytes through edit(name under the root, bytes) ->
    bytes (or None to drop it); edit(None, None) returns {name: bytes} of members to add."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        root = zin.namelist()[0].split("/")[0]
        for info in zin.infolist():
            data = edit(info.filename.split("/", 1)[1], zin.read(info.filename))
            if data is not None:
                zout.writestr(info, data)
        for name, data in (edit(None, None) or {}).items():
            zout.writestr(f"{root}/{name}", data)
    return dst


def crafted_sample_inputs(dst: Path, canary: Path) -> Path:
    """The sample inputs (which torch.export.load unpickles in full when weights-only refuses them)."""
    def edit(name, data):
        if name == "data/sample_inputs/model.pt":
            return _saved(_ThenReturn(_Canary(canary), torch.load(io.BytesIO(data), weights_only=True)))
        return data if name else None
    return _rewrite(DIGITS, dst, edit)


def crafted_weight(dst: Path, canary: Path) -> Path:
    """One weight stored pickled (as torch.export.save stores tensor subclasses): unpickled in full."""
    config_name = "data/weights/model_weights_config.json"
    with zipfile.ZipFile(DIGITS) as z:
        root = z.namelist()[0].split("/")[0]
        config = json.loads(z.read(f"{root}/{config_name}"))
    fqn, meta = next(iter(config["config"].items()))
    meta["use_pickle"] = True

    def edit(name, data):
        if name == config_name:
            return json.dumps(config).encode()
        if name == f"data/weights/{meta['path_name']}":
            sizes = [d["as_int"] for d in meta["tensor_meta"]["sizes"]]
            real = torch.frombuffer(bytearray(data), dtype=torch.float32).reshape(sizes).clone()
            return _saved(_ThenReturn(_Canary(canary), torch.nn.Parameter(real)))
        return data if name else None
    return _rewrite(DIGITS, dst, edit)


def crafted_opaque_constant(dst: Path, canary: Path) -> Path:
    """An opaque-object constant: torch.export.load gives its bytes to pickle.loads."""
    config_name = "data/constants/model_constants_config.json"

    def edit(name, data):
        if name is None:
            payload = _ThenReturn(_Canary(canary), torch.zeros(1))  # an unused constant of the program
            return {"data/constants/opaque_obj_0": pickle.dumps(payload, protocol=2)}
        if name == config_name:
            entry = {"path_name": "opaque_obj_0", "is_param": False, "use_pickle": True, "tensor_meta": None}
            return json.dumps({"config": {"evil": entry}}).encode()
        return data
    return _rewrite(DIGITS, dst, edit)


CRAFTED = {
    "data/sample_inputs/model.pt": crafted_sample_inputs,
    "data/weights/weight_0": crafted_weight,
    "data/constants/opaque_obj_0": crafted_opaque_constant,
}


@pytest.mark.parametrize("member", CRAFTED)
def test_each_crafted_member_is_refused_before_its_code_runs(tmp_path, caplog, member):
    canary = tmp_path / "canary"
    path = CRAFTED[member](tmp_path / "evil.pt2", canary)
    with pytest.raises(BadInput) as info:
        open_source(str(path))
    assert not canary.exists()
    assert f"{path}: member {member} is a pickle that could run arbitrary code" in info.value.message
    assert "the weights-only unpickler refused it (GLOBAL " in info.value.message
    assert info.value.fix == TRUST_FIX
    # the archive is real: torch.export.load runs its code, and so does edgekit when told to trust it
    # (torch's warning on its full-pickle fallback has a broken format string, fatal under pytest's log capture)
    caplog.set_level(logging.ERROR, logger="torch._export.serde.serialize")
    assert open_source(str(path), SourceOptions(trust_pickle=True)).signature.describe() == "x=1,1,8,8 (float32)"
    assert canary.exists()


@pytest.fixture
def evil(tmp_path):
    """The crafted digits archive (sample inputs rewritten) and the canary its payload would create."""
    canary = tmp_path / "canary"
    return crafted_sample_inputs(tmp_path / "evil.pt2", canary), canary


def _refused(proc, path: Path, canary: Path) -> None:
    assert not canary.exists()
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert f"{path}: member data/sample_inputs/model.pt is a pickle that could run arbitrary code" in proc.stderr
    assert "GLOBAL _operator.getitem" in proc.stderr and TRUST_FIX in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".pt2", ".pt"])
def test_convert_refuses_the_crafted_archive(evil, tmp_path, suffix):
    path, canary = evil
    if suffix != ".pt2":
        path = Path(shutil.copyfile(path, path.with_suffix(suffix)))
    proc = run_cli("convert", path, "--target", "onnx", "--out", tmp_path / "out")
    _refused(proc, path, canary)


@pytest.mark.slow
def test_check_refuses_the_crafted_archive(evil, tmp_path):
    path, canary = evil
    config = tmp_path / "edgekit.toml"
    config.write_text(f'[[models]]\nname = "evil"\npath = "{path.name}"\ntargets = ["onnx"]\n')
    proc = run_cli("check", config, "-o", tmp_path / "out")
    _refused(proc, path, canary)


def _int8_onnx(path: Path) -> Path:
    """A tiny ONNX model whose weights are int8 (what `edgekit layers` accepts as the artifact)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["w", "scale"], ["wf"]), helper.make_node("MatMul", ["x", "wf"], ["y"])],
        "int8", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        [numpy_helper.from_array(np.ones((64, 10), np.int8), "w"),
         numpy_helper.from_array(np.array(0.1, np.float32), "scale")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


@pytest.mark.slow
def test_layers_refuses_the_crafted_source(evil, tmp_path):
    path, canary = evil
    proc = run_cli("layers", _int8_onnx(tmp_path / "int8.onnx"), "--source", path, "--eval", DIGITS_EVAL)
    _refused(proc, path, canary)


@pytest.mark.slow
def test_with_trust_pickle_the_crafted_archive_runs_its_payload(evil, tmp_path):
    path, canary = evil
    proc = run_cli("convert", path, "--target", "onnx", "--out", tmp_path / "out", "--trust-pickle")
    assert proc.returncode == 0, proc.stderr
    assert canary.exists()


class _WithConstants(torch.nn.Module):
    """A registered buffer, a non-persistent buffer and a tensor constant beside the parameters."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(1, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)
        self.register_buffer("scale", torch.linspace(0.5, 2.0, 4).reshape(4, 1, 1))
        self.register_buffer("shift", torch.arange(4.0).reshape(4, 1, 1), persistent=False)
        self.offset = torch.tensor([0.25])

    def forward(self, x):
        return (self.bn(self.conv(x)) * self.scale + self.shift + self.offset).flatten(1)


@pytest.fixture
def with_constants(tmp_path):
    model = _WithConstants().eval()
    path = tmp_path / "constants.pt2"
    torch.export.save(torch.export.export(model, (torch.randn(1, 1, 8, 8),)), path)
    return model, path


@pytest.mark.parametrize("path", [DIGITS, MOBILENET], ids=["digits", "mobilenet"])
def test_bundled_samples_load_as_torch_loads_them(path):
    ours, theirs = _load_exported(str(path)), torch.export.load(path)
    assert ours.state_dict.keys() == theirs.state_dict.keys()
    for k, v in ours.state_dict.items():
        assert type(v) is type(theirs.state_dict[k]) and torch.equal(v, theirs.state_dict[k]), k
    args, _ = theirs.example_inputs
    assert torch.equal(ours.module()(*args), theirs.module()(*args))


def test_buffers_and_constants_load_as_saved(with_constants):
    model, path = with_constants
    ep = _load_exported(str(path))
    assert set(ep.constants) == {"shift", "offset"} and "scale" in ep.state_dict
    x = torch.randn(1, 1, 8, 8)
    with torch.no_grad():
        assert torch.allclose(ep.module()(x), model(x), atol=1e-6)


@pytest.mark.slow
def test_a_model_with_buffers_and_constants_still_converts(with_constants, tmp_path):
    _, path = with_constants
    proc = run_cli("convert", path, "--target", "onnx", "--out", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "constants.onnx").is_file()


def test_a_graph_call_that_is_not_a_torch_operator_is_refused():
    """torch's deserializer resolves any `torch.*` path as a call target; one of them imports the module
    the graph names when the program runs. Only dispatcher operators and arithmetic pass."""
    import torch.export.custom_ops as custom_ops

    from edgekit.sources.safe_pt2 import load_exported_program, refuse_code_targets

    ep = load_exported_program(str(DIGITS))
    refuse_code_targets(ep, "digits_cnn.pt2")  # every call is an aten operator
    node = next(n for n in ep.graph.nodes if n.op == "call_function")
    node.target = custom_ops._call_custom_autograd_function_in_pre_dispatch
    with pytest.raises(BadInput, match=rf"node {node.name} calls torch.export.custom_ops."
                                       r"_call_custom_autograd_function_in_pre_dispatch, which is not a torch operator"):
        refuse_code_targets(ep, "digits_cnn.pt2")
