"""Recurrent models to .pte: an `nn.LSTM`/`nn.GRU` unrolled by ExecuTorch's lowering.

A real report: a 3-layer LSTM over 160 frames (a speaker encoder) took 23 minutes at fp32, because the view
ops between its unrolled steps (`squeeze_copy`, `split_with_sizes_copy`) stayed outside XNNPACK and cut the
delegate into one partition per step, each lowered on its own. edgekit.converters.pte_partitions rewrites
them into ops XNNPACK takes, so the steps lower as one partition; at int8 the layer is unrolled before PT2E,
so that its linears are quantized (XNNPACKQuantizer leaves an `aten.lstm` float whole).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.slow

STEPS, FEATURES, HIDDEN, LAYERS = 6, 8, 16, 2


def _encoder(kind: str):
    """A small speaker-encoder-like model: a `kind` RNN over the frames, Linear + ReLU on the last step, L2 norm."""
    import torch

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = getattr(torch.nn, kind)(FEATURES, HIDDEN, num_layers=LAYERS, batch_first=True)
            self.linear = torch.nn.Linear(HIDDEN, HIDDEN)

        def forward(self, mels):
            out, _ = self.rnn(mels)
            e = torch.relu(self.linear(out[:, -1]))
            return e / torch.norm(e, dim=1, keepdim=True)

    torch.manual_seed(0)
    return Encoder().eval()


@pytest.fixture(scope="module", params=["LSTM", "GRU"])
def recurrent(request, tmp_path_factory) -> tuple[str, object]:
    """(its kind, the folder holding the .pt2 and its calibration .npz)."""
    import torch

    work = tmp_path_factory.mktemp(request.param.lower())
    model = _encoder(request.param)
    torch.export.save(torch.export.export(model, (torch.rand(1, STEPS, FEATURES),)), work / "rnn.pt2")
    rng = np.random.default_rng(0)
    np.savez(work / "calib.npz", mels=rng.random((40, 1, STEPS, FEATURES), dtype=np.float32))
    return request.param, work


def _convert(work, *extra) -> dict:
    proc = run_cli("convert", work / "rnn.pt2", "-t", "executorch", "-o", work / "out", "--json", "--no-cache", *extra)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [artifact] = json.loads(proc.stdout)["artifacts"]
    assert artifact["verification"]["status"] == "pass", artifact["verification"].get("reasons")
    return artifact


def test_fp32_steps_lower_as_one_delegate_call(recurrent):
    kind, work = recurrent
    a = _convert(work)
    assert a["verification"]["metrics"]["output_0"]["cosine"] >= 0.9999
    ops = a["verification"]["inspection"]["op_counts"]
    # every step in one XNNPACK call; the L2 norm's sum and power run outside it, and its division after them
    # (one call per step and layer before: STEPS * LAYERS + 1)
    assert ops["delegate:XnnpackBackend"] == 2, ops
    assert not [op for op in ops if op.startswith(("aten::squeeze_copy", "aten::split_with_sizes_copy",
                                                   "aten::unsqueeze_copy", "aten::select_copy"))], ops


def test_int8_quantizes_the_recurrent_layer(recurrent):
    kind, work = recurrent
    a = _convert(work, "--int8", "--calib", work / "calib.npz")
    v = a["verification"]
    assert v["metrics"]["output_0"]["cosine"] >= 0.99
    # the LSTM's/GRU's own weights are int8 (they were float: only the head's Linear was quantized); the rest of
    # the stored bytes are int32 biases
    gates = {"LSTM": 4, "GRU": 3}[kind]
    weights = gates * HIDDEN * (FEATURES + HIDDEN) + gates * HIDDEN * 2 * HIDDEN * (LAYERS - 1) + HIDDEN * HIDDEN
    stored = v["inspection"]["weight_bytes_by_dtype"]
    assert stored.get("int8") == weights and set(stored) <= {"int8", "int32"}, stored
    ops = v["inspection"]["op_counts"]
    # the int8 gates' split stays outside XNNPACK (see pte_partitions): one call per step and layer, plus the head
    assert ops["delegate:XnnpackBackend"] <= STEPS * LAYERS + 2, ops
    assert ops.get("xnnpack:XNNFullyConnected", 0) >= STEPS * LAYERS, ops


def test_non_recurrent_programs_are_left_alone():
    """The rewrite is only for recurrent graphs: a CNN's program is not recurrent, an LSTM's is."""
    import torch

    from edgekit.converters import pte_partitions
    from tests.conftest import DIGITS

    assert not pte_partitions.is_recurrent(torch.export.load(str(DIGITS)))
    lstm = torch.export.export(_encoder("LSTM"), (torch.rand(1, STEPS, FEATURES),))
    assert pte_partitions.is_recurrent(lstm)
    assert pte_partitions.is_recurrent({"forward": lstm})
    unrolled = pte_partitions.unrolled(lstm)
    assert pte_partitions.unrolled(lstm) is unrolled  # made once
    targets = {str(n.target) for n in unrolled.graph.nodes if n.op == "call_function"}
    assert "aten.lstm.input" not in targets and "aten.linear.default" in targets
