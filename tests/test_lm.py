"""Decoder LMs: a Hugging Face decoder folder to .pte, .tflite and .onnx with a static KV cache, verified
token by token in each runtime against the source model on held-out text.

The fast tests check the pure parts (the metrics, reading a folder) and that edgekit's static-cache decoder
computes what Hugging Face's own model computes for each architecture it builds (Llama, Qwen2 with q/k/v
biases, Qwen3 with q/k norms; grouped-query attention in all). The slow ones convert the sample LM, trained
on real text (sample_models/train_tiny_lm.py), and run every artifact in its runtime.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from edgekit.core.errors import BadInput
from edgekit.core.formats import detect
from edgekit.core.lm_verify import common_prefix, lm_metrics, lm_verdict, perplexity
from edgekit.core.verify import Status
from edgekit.sources.lm_folder import DecoderConfig
from tests.conftest import REPO, run_cli

SAMPLE_LM = REPO / "sample_models" / "tiny_lm"
SAMPLE_TEXT = REPO / "sample_models" / "tiny_lm_eval.txt"


def test_near_ties_are_the_disagreements_where_the_source_hesitates():
    ref = np.log(np.array([[[0.50, 0.48, 0.02], [0.9, 0.05, 0.05], [0.6, 0.2, 0.2]]]))
    out = np.log(np.array([[[0.40, 0.58, 0.02], [0.1, 0.85, 0.05], [0.6, 0.2, 0.2]]]))
    m = lm_metrics(ref, out, np.array([[0, 1, 2]]), np.array([]), np.array([]))
    assert (m["disagreements"], m["near_ties"]) == (2, 1)  # the first position hesitated (0.50 vs 0.48), the second not


def test_perplexity_is_exp_of_the_mean_negative_log_likelihood():
    logits = np.log(np.array([[[0.5, 0.25, 0.25], [0.1, 0.8, 0.1], [1 / 3, 1 / 3, 1 / 3]]]))
    windows = np.array([[0, 1, 2]])  # next tokens 1 (p 0.25) and 2 (p 0.1)
    assert perplexity(logits, windows) == pytest.approx(np.exp(-(np.log(0.25) + np.log(0.1)) / 2))


def test_lm_metrics_and_verdict():
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(2, 8, 16)).astype(np.float32)
    windows = rng.integers(0, 16, (2, 8))
    same = lm_metrics(ref, ref.copy(), windows, np.arange(5), np.arange(5))
    assert same["token_agreement"] == 1.0 and same["perplexity_ratio"] == 1.0 and same["generated_agreement"] == 1.0
    flipped = ref.copy()
    flipped[0, 0] = -flipped[0, 0]  # one position of 16 now picks another token
    m = lm_metrics(ref, flipped, windows, np.arange(4), np.array([0, 1, 9, 3]))
    assert m["token_agreement"] == pytest.approx(15 / 16)
    assert m["generated_agreement"] == 0.5  # the same up to the first difference, then different texts
    assert m["disagreements"] == 1 and m["near_ties"] in (0, 1)
    verdict = lm_verdict(m, {"token_agreement": 0.98, "perplexity_ratio": 1.5}, 2)
    assert verdict.status == Status.FAIL and verdict.reasons[0].startswith("token_agreement 0.9375 < 0.98 (1 of 16 next tokens differ;")
    assert common_prefix(np.array([1, 2, 3]), np.array([1, 2])) == 2


def _hf_folder(tmp_path: Path, architecture: str) -> Path:
    import torch
    import transformers

    torch.manual_seed(0)
    common = dict(vocab_size=96, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=96, max_position_embeddings=64, initializer_range=0.2)
    config = getattr(transformers, f"{architecture}Config")(**common, **({"head_dim": 16} if architecture != "Qwen2" else {}))
    model = getattr(transformers, f"{architecture}ForCausalLM")(config)
    folder = tmp_path / architecture.lower()
    model.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("architecture", ["Llama", "Qwen2", "Qwen3"])
def test_the_static_cache_decoder_computes_what_transformers_computes(tmp_path, architecture):
    import torch

    from edgekit.sources.lm_source import LMSource

    folder = _hf_folder(tmp_path, architecture)
    assert detect(folder) == "hf-causal-lm"
    source = LMSource(str(folder), max_seq_len=32, prefill_len=8)
    tokens = np.random.default_rng(1).integers(0, 96, (1, 24))
    reference = source.reference_logits(tokens)[0]
    decoder = source.decoder()
    _, _, k, v = source.example_inputs(1)
    rows = []
    with torch.no_grad():
        logits, k, v = decoder(torch.from_numpy(tokens[:, :8]), torch.arange(8), k, v)  # prefill
        rows.append(logits[0])
        for pos in range(8, 24):  # then decode, one token at a time through the cache
            logits, k, v = decoder(torch.from_numpy(tokens[:, pos:pos + 1]), torch.tensor([pos]), k, v)
            rows.append(logits[0])
    ours = torch.cat(rows).numpy()
    assert np.abs(ours - reference).max() < 1e-4 * np.abs(reference).max()
    assert (ours.argmax(-1) == reference.argmax(-1)).all()


def test_a_folder_edgekit_does_not_build_is_refused_naming_the_file(tmp_path):
    folder = tmp_path / "gpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    (folder / "model.safetensors").write_bytes(b"\0" * 16)
    with pytest.raises(BadInput, match="GPT2LMHeadModel.*not a decoder edgekit builds") as e:
        DecoderConfig.read(folder)
    assert str(folder / "config.json") in e.value.message
    proc = run_cli("convert", str(folder), "-t", "onnx", "-o", str(tmp_path / "out"))
    assert proc.returncode == 2 and "config.json" in proc.stderr


def test_damaged_weights_exit_2_naming_the_file(tmp_path):
    folder = _hf_folder(tmp_path, "Llama")
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    proc = run_cli("convert", str(folder), "-t", "onnx", "--eval", str(SAMPLE_TEXT), "-o", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "model.safetensors" in proc.stderr and "not a readable safetensors file" in proc.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def _lm_artifacts(proc) -> dict:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {(a["target"], a["precision"]): a for a in json.loads(proc.stdout)["artifacts"]}


def _fp32_bytes() -> int:
    """The sample LM's weights in float32, once each (its embedding and LM head are tied)."""
    from safetensors import safe_open

    with safe_open(str(SAMPLE_LM / "model.safetensors"), "np") as f:
        return 4 * sum(int(np.prod(f.get_slice(k).get_shape())) for k in f.keys())


@pytest.mark.slow
@pytest.mark.parametrize("precision, agreement, ratio, size", [("int8-weights", 0.98, 1.02, 0.30),
                                                               ("int4-weights", 0.90, 1.10, 0.18)])
def test_the_sample_lm_converts_to_every_format_and_predicts_the_same_tokens(tmp_path, precision, agreement, ratio, size):
    proc = run_cli("convert", str(SAMPLE_LM), "-t", "executorch", "-t", "tflite", "-t", "onnx", "-p", precision,
                   "--eval", str(SAMPLE_TEXT), "--max-seq-len", "128", "-o", str(tmp_path), "--json", timeout=1800)
    found = _lm_artifacts(proc)
    assert set(found) == {(t, precision) for t in ("executorch", "tflite", "onnx")}
    for (target, _), a in found.items():
        m = a["verification"]["metrics"]["logits"]
        assert a["verification"]["status"] == "pass", (target, a["verification"])
        assert m["token_agreement"] >= agreement and m["perplexity_ratio"] <= ratio, (target, m)
        assert m["positions"] == 512 and m["generated_tokens"] == 32
        assert a["lm"]["entry_points"] == ["prefill", "decode"] and a["lm"]["cache_shape"][2] == 128
        assert Path(a["path"]).is_file() and Path(a["path"]).parent == tmp_path
        if target != "onnx":  # ONNX Runtime's quantizer leaves the int8 embedding table float (its JSON says so)
            assert a["bytes"] <= size * _fp32_bytes(), (target, a["bytes"], _fp32_bytes())
