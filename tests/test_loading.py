"""Opening PyTorch sources safely and settling their input signature."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
import torch

from edgekit.core.errors import BadInput
from edgekit.sources.loading import SourceOptions, open_source
from tests.conftest import DIGITS
from tests.models import TinyMLP


class _CreatesAFile:
    """Unpickling this would create a file: the proof that code ran."""

    def __init__(self, target: str):
        self.target = target

    def __reduce__(self):
        return (open, (self.target, "w"))


@pytest.mark.parametrize("writer", ["pickle", "torch.save"])
def test_a_malicious_pickle_is_refused_and_its_code_never_runs(tmp_path, writer):
    marker = tmp_path / "pwned"
    path = tmp_path / "model.pt"
    payload = _CreatesAFile(str(marker))
    if writer == "pickle":
        path.write_bytes(pickle.dumps(payload, protocol=2))
    else:
        torch.save(payload, path)
    with pytest.raises(BadInput, match=r"pickled Python object.*refused") as info:
        open_source(str(path), SourceOptions(input_shapes=("x=1,16",)))
    assert info.value.fix.endswith("pass --trust-pickle if you trust its author")
    assert not marker.exists()


def test_a_pickled_module_loads_only_with_trust_pickle(tmp_path):
    path = tmp_path / "full.pt"
    torch.save(TinyMLP().eval(), path)
    with pytest.raises(BadInput, match="unpickling it could run arbitrary code"):
        open_source(str(path), SourceOptions(input_shapes=("x=1,16",)))
    src = open_source(str(path), SourceOptions(trust_pickle=True, input_shapes=("x=1,16",)))
    assert src.artifact.format == "torch-pickle"
    assert [o.shape for o in src.signature.outputs] == [(1, 5)]


def test_state_dict_needs_model_class(tmp_path):
    path = tmp_path / "weights.pt"
    reference = TinyMLP().eval()
    torch.nn.init.constant_(reference.fc2.bias, 0.5)
    torch.save(reference.state_dict(), path)
    with pytest.raises(BadInput, match=r"holds a state_dict") as info:
        open_source(str(path), SourceOptions(input_shapes=("x=1,16",)))
    assert "--model-class" in info.value.fix
    src = open_source(str(path), SourceOptions(model_class="tests.models:TinyMLP", input_shapes=("x=1,16",)))
    x = np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)
    expected = reference(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(src.run({"x": x})[0], expected, rtol=1e-6)


def test_state_dict_for_the_wrong_class(tmp_path):
    path = tmp_path / "weights.pt"
    torch.save(TinyMLP().state_dict(), path)
    with pytest.raises(BadInput, match="does not fit tests.models:TwoInputs"):
        open_source(str(path), SourceOptions(model_class="tests.models:TwoInputs", input_shapes=("x=1,16",)))


def test_exported_program_signature_comes_from_the_program():
    src = open_source(str(DIGITS))
    assert src.artifact.format == "torch-export"
    assert [(s.name, s.shape, s.dtype) for s in src.signature.inputs] == [("x", (1, 1, 8, 8), "float32")]
    assert [(s.name, s.shape) for s in src.signature.outputs] == [("output_0", (1, 10))]
    assert len(src.artifact.sha256) == 64


def test_input_shape_that_does_not_fit_an_exported_program():
    with pytest.raises(BadInput, match=r"input shape x=1,3,32,32 \(float32\) does not fit the model: it takes x=1,1,8,8") as info:
        open_source(str(DIGITS), SourceOptions(input_shapes=("x=1,3,32,32",)))
    assert info.value.fix == "use --input-shape x=1,1,8,8"


def test_import_spec_with_named_inputs_and_two_outputs():
    src = open_source("tests.models:two_inputs", SourceOptions(input_shapes=("image=1,3,8,8", "extra=1,6")))
    assert src.signature.input_names == ("image", "extra")
    assert [o.shape for o in src.signature.outputs] == [(1, 4), (1, 4)]


def test_named_input_shapes_are_taken_in_the_order_forward_takes_them(tmp_path):
    """Silero VAD's scripted model takes (x, state): its shapes given state first did not fit it ("The following
    operation failed in the TorchScript interpreter"). Named as forward's parameters, they are put in its order,
    for a Python module and a TorchScript one alike."""
    import torch

    from tests.models import two_inputs

    src = open_source("tests.models:two_inputs", SourceOptions(input_shapes=("extra=1,6", "image=1,3,8,8")))
    assert src.signature.input_names == ("image", "extra")
    torch.jit.script(two_inputs()).save(str(tmp_path / "two.pt"))
    scripted = open_source(str(tmp_path / "two.pt"), SourceOptions(input_shapes=("extra=1,6", "image=1,3,8,8")))
    assert scripted.signature.input_names == ("image", "extra")
    with pytest.raises(BadInput, match="does not fit"):  # names that are not forward's: taken as given, in order
        open_source("tests.models:two_inputs", SourceOptions(input_shapes=("b=1,6", "a=1,3,8,8")))


def test_import_spec_needs_a_signature_and_a_fitting_one():
    with pytest.raises(BadInput, match="does not record its input shapes"):
        open_source("tests.models:tiny_mlp")
    with pytest.raises(BadInput, match=r"input shape x=1,17 \(float32\) does not fit tests.models:tiny_mlp: mat1 and mat2"):
        open_source("tests.models:tiny_mlp", SourceOptions(input_shapes=("x=1,17",)))
    with pytest.raises(BadInput, match="returned str, not a torch.nn.Module"):
        open_source("tests.models:not_a_model", SourceOptions(input_shapes=("x=1,17",)))
    with pytest.raises(BadInput, match="cannot import 'tests.nowhere'"):
        open_source("tests.nowhere:model", SourceOptions(input_shapes=("x=1,17",)))


def test_example_inputs_give_the_signature(tmp_path):
    np.savez(tmp_path / "ex.npz", x=np.zeros((1, 16), np.float32))
    src = open_source("tests.models:tiny_mlp", SourceOptions(example_inputs=str(tmp_path / "ex.npz")))
    assert src.signature.describe() == "x=1,16 (float32)"


def test_torchscript_source(tmp_path):
    path = tmp_path / "ts.pt"
    torch.jit.save(torch.jit.trace(TinyMLP().eval(), torch.zeros(1, 16)), path)
    src = open_source(str(path), SourceOptions(input_shapes=("x=1,16",)))
    assert src.artifact.format == "torchscript"
    assert [o.shape for o in src.signature.outputs] == [(1, 5)]


def test_bad_input_shape_syntax():
    with pytest.raises(BadInput, match=r"cannot read --input-shape 'x=1;3'"):
        open_source(str(DIGITS), SourceOptions(input_shapes=("x=1;3",)))
