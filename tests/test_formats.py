"""Format detection reads content, not only the extension."""

from __future__ import annotations

import pickle
import shutil

import pytest
import torch

from edgekit.core.errors import BadInput
from edgekit.core.formats import detect
from tests.conftest import DIGITS
from tests.models import TinyMLP


def test_exported_program_is_detected_by_content_even_when_named_pt(tmp_path):
    copy = tmp_path / "model.pt"
    shutil.copy(DIGITS, copy)
    assert detect(DIGITS) == "torch-export"
    assert detect(copy) == "torch-export"


def test_torchscript_state_dict_and_pickles(tmp_path):
    model = TinyMLP().eval()
    torch.jit.save(torch.jit.trace(model, torch.zeros(1, 16)), tmp_path / "ts.pt")
    torch.save(model.state_dict(), tmp_path / "sd.pt")
    torch.save(model, tmp_path / "full.pth")
    (tmp_path / "legacy.pt").write_bytes(pickle.dumps({"a": 1}, protocol=2))
    assert detect(tmp_path / "ts.pt") == "torchscript"
    assert detect(tmp_path / "sd.pt") == "torch-pickle"
    assert detect(tmp_path / "full.pth") == "torch-pickle"
    assert detect(tmp_path / "legacy.pt") == "torch-pickle"


def test_import_spec_and_savedmodel_directory(tmp_path):
    assert detect("tests.models:tiny_mlp") == "torch-python"
    (tmp_path / "sm").mkdir()
    (tmp_path / "sm" / "saved_model.pb").write_bytes(b"\x08\x01")
    assert detect(tmp_path / "sm") == "tf-savedmodel"


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: None, r"model not found: .*missing\.pt2"),
        (lambda p: p.write_bytes(b""), r"is empty \(0 bytes\)"),
        (lambda p: p.write_bytes(DIGITS.read_bytes()[:40_000]), r"damaged or truncated zip archive"),
    ],
    ids=["missing", "empty", "truncated"],
)
def test_bad_pt2_files_are_refused_with_the_reason(tmp_path, make, message):
    path = tmp_path / "missing.pt2"
    make(path)
    with pytest.raises(BadInput, match=message) as info:
        detect(path)
    assert info.value.exit_code == 2


def test_text_file_named_pt_is_not_a_model(tmp_path):
    path = tmp_path / "model.pt"
    path.write_text("this is a README, not weights\n")
    with pytest.raises(BadInput, match=r"model\.pt is not a PyTorch model: its content is text"):
        detect(path)


def test_content_contradicting_the_extension_is_an_error(tmp_path):
    model = TinyMLP().eval()
    path = tmp_path / "model.pt2"
    torch.jit.save(torch.jit.trace(model, torch.zeros(1, 16)), path)
    with pytest.raises(BadInput, match=r"named \.pt2 but holds a TorchScript archive"):
        detect(path)


def test_directory_without_saved_model(tmp_path):
    with pytest.raises(BadInput, match="not a TensorFlow SavedModel"):
        detect(tmp_path)


def test_converted_artifacts_are_detected_by_their_flatbuffer_or_protobuf(converted_digits, tmp_path):
    result, _ = converted_digits
    for r in result.artifacts:
        renamed = tmp_path / f"artifact-{r.target}.model"
        shutil.copy(r.artifact.path, renamed)
        assert detect(r.artifact.path) == r.artifact.format
        if r.artifact.format != "onnx":  # ONNX has no magic number; it is recognised by parsing
            assert detect(renamed) == r.artifact.format
