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
from edgekit.targets.lm_cache import writing
from tests.conftest import REPO, run_cli

SAMPLE_LM = REPO / "sample_models" / "tiny_lm"
SAMPLE_TEXT = REPO / "sample_models" / "tiny_lm_eval.txt"
SAMPLE_CALIB = REPO / "sample_models" / "tiny_lm_calib.txt"  # training-side text


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
    p = np.exp(ref[0, 0]) / np.exp(ref[0, 0]).sum()  # the differing position: a near-tie iff its top two are close
    top2 = np.sort(p)[-2:]
    assert m["disagreements"] == 1 and m["near_ties"] == int(top2[1] - top2[0] < 0.05)
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
    for norm in ("inner", "divide"):  # the RMS norm as XNNPACK takes it whole, and as ONNX Runtime fuses it
        decoder = source.decoder(norm)
        # caches full of another text's entries: a call reads only the positions before its own
        k, v = np.random.default_rng(2).normal(size=(2, *source.config.cache_shape(32))).astype(np.float32)

        def call(*args, decoder=decoder):  # numpy in and out, as a runtime's; the host writes the new entries in
            with torch.no_grad():
                return tuple(t.numpy() for t in decoder(*map(torch.from_numpy, args)))

        step = writing(call)
        logits, k, v = step(tokens[:, :8], np.arange(8), k, v)  # prefill
        rows = [logits[0]]
        for pos in range(8, 24):  # then decode, one token at a time through the cache
            logits, k, v = step(tokens[:, pos:pos + 1], np.array([pos]), k, v)
            rows.append(logits[0])
        ours = np.concatenate(rows)
        assert np.abs(ours - reference).max() < 1e-4 * np.abs(reference).max(), norm
        assert (ours.argmax(-1) == reference.argmax(-1)).all(), norm


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


@pytest.fixture(scope="module")
def sample_runs(tmp_path_factory) -> dict:
    """The sample LM converted to every LM target at each precision, one run per precision (as a user runs it)."""
    runs = {}
    for precision in ("fp32", "int8-weights", "int4-weights"):
        out = tmp_path_factory.mktemp(precision)
        ort = ["-t", "ort"] if precision != "fp32" else []  # the quantized .onnx, as ONNX Runtime's mobile format
        proc = run_cli("convert", str(SAMPLE_LM), "-t", "executorch", "-t", "tflite", "-t", "onnx", *ort, "-p", precision,
                       "--eval", str(SAMPLE_TEXT), "-o", str(out), "--json", "--no-cache", timeout=1800)
        assert proc.returncode in (0, 1), proc.stderr[-3000:]  # 1: an artifact failed its verdict
        runs[precision] = ({a["target"]: a for a in json.loads(proc.stdout)["artifacts"]}, proc, out)
    return runs


@pytest.mark.slow
def test_the_sample_lm_at_fp32_predicts_every_token_the_source_does(sample_runs):
    artifacts, proc, out = sample_runs["fp32"]
    assert proc.returncode == 0 and set(artifacts) == {"executorch", "tflite", "onnx"}
    assert "tokens/s" in proc.stderr  # the speed the verification measured, said beside each artifact
    for target, a in artifacts.items():
        m = a["verification"]["metrics"]["logits"]
        assert (m["token_agreement"], m["generated_agreement"], m["positions"]) == (1.0, 1.0, 1024), (target, m)
        assert m["perplexity_ratio"] == pytest.approx(1.0, abs=1e-4)
        speed = a["verification"]["metrics"]["speed"]  # measured by the verification run, on one thread
        assert speed["threads"] == 1 and speed["decode_tokens_per_s"] > 0 and speed["prefill_tokens_per_s"] > 0
        assert speed["peak_memory_mib"] > a["bytes"] / 2**20  # the runtime holds at least the weights
        assert a["lm"]["entry_points"] == ["prefill", "decode"] and a["lm"]["cache_shape"] == [4, 2, 256, 64]
        assert Path(a["path"]).parent == out and Path(a["path"]).is_file()


@pytest.mark.slow
@pytest.mark.parametrize("precision, agreement, ratio, size", [("int8-weights", 0.98, 1.02, 0.30),
                                                               ("int4-weights", 0.90, 1.10, 0.18)])
def test_the_sample_lm_quantized_in_every_format(sample_runs, precision, agreement, ratio, size):
    """Sizes and perplexity within the targets everywhere; token agreement judged against its threshold, a miss
    named with how many of the differing tokens are ones the source itself hesitates on."""
    fp32 = sample_runs["fp32"][0]
    artifacts, proc, _ = sample_runs[precision]
    assert set(artifacts) == {"executorch", "tflite", "onnx", "ort"}
    for target, a in artifacts.items():
        m, v = a["verification"]["metrics"]["logits"], a["verification"]
        whole = fp32["onnx" if target == "ort" else target]["bytes"]
        assert a["bytes"] <= size * whole, (target, a["bytes"], whole)
        assert m["perplexity_ratio"] <= ratio and m["logits_cosine"] >= 0.99, (target, m)
        assert v["thresholds"] == {"token_agreement": agreement, "perplexity_ratio": ratio}
        assert (v["status"] == "pass") == (m["token_agreement"] >= agreement), (target, v)
        if v["status"] == "fail":
            assert v["reasons"][0].startswith(f"token_agreement {m['token_agreement']:.6g} < {agreement:g} "
                                              f"({m['disagreements']} of 1024 next tokens differ; {m['near_ties']} of them")
    assert proc.returncode == (1 if any(a["verification"]["status"] == "fail" for a in artifacts.values()) else 0)
    assert artifacts["executorch"]["lm"]["weights"]["embedding"] == "int8 per row (embedding_byte)"
    # the LM head and the table stay int8 at int4 (an int4 table loses far more); .tflite and .onnx store the
    # tied head's int8 weights once, as the table
    assert artifacts["executorch"]["lm"]["weights"]["lm_head"] == "int8 per channel (weight-only)"
    tflite = artifacts["tflite"]["lm"]["weights"]
    assert tflite["embedding"] == tflite["lm_head"] and tflite["lm_head"].startswith("int8 per channel")
    assert artifacts["onnx"]["lm"]["weights"]["embedding"] == "int8 in blocks of 32, the LM head's"
    assert artifacts["onnx"]["lm"]["weights"]["lm_head"] == "int8 in blocks of 32"
    if precision == "int8-weights":  # weight-only on XNNPACK's f32-qc8w kernel, within its target
        assert artifacts["executorch"]["lm"]["activations"] == "float32"
        assert artifacts["executorch"]["verification"]["status"] == "pass"


@pytest.mark.slow
def test_a_check_budget_on_an_lm_fails_when_a_broken_weight_pushes_perplexity_past_it(tmp_path, sample_runs):
    import onnx
    from onnx import numpy_helper

    made = sample_runs["fp32"][0]["onnx"]
    model = onnx.load(made["path"])
    weights = [i for i in model.graph.initializer if len(i.dims) == 2 and i.dims[0] == 640]  # a down_proj (640 → 256)
    broken = numpy_helper.to_array(weights[-1]) * 4  # the last layer's MLP output four times too large
    weights[-1].CopyFrom(numpy_helper.from_array(broken, weights[-1].name))
    (tmp_path / "given").mkdir()
    onnx.save(model, str(tmp_path / "given" / "tiny_lm.onnx"))
    for name, artifact in (("intact", made["path"]), ("broken", str(tmp_path / "given" / "tiny_lm.onnx"))):
        config = tmp_path / f"{name}.toml"
        config.write_text(f'[[models]]\nname = "tiny_lm"\npath = "{SAMPLE_LM}"\neval = "{SAMPLE_TEXT}"\n'
                          f'artifacts = ["{artifact}"]\n[models.budgets]\nmin_token_agreement = 0.98\n'
                          'max_perplexity_ratio = 1.02\n')
        checked = run_cli("check", str(config), "-o", str(tmp_path / f"out-{name}"))
        if name == "intact":
            assert checked.returncode == 0, checked.stdout + checked.stderr[-2000:]
        else:
            assert checked.returncode == 1, checked.stdout + checked.stderr[-2000:]
            assert "FAIL tiny_lm onnx fp32" in checked.stdout and "perplexity_ratio" in checked.stdout
            assert "> 1.02" in checked.stdout


def test_a_decoder_lm_at_a_precision_it_does_not_take_exits_2_naming_the_ones_it_does(tmp_path):
    proc = run_cli("convert", str(SAMPLE_LM), "-t", "onnx", "-p", "int8", "-o", str(tmp_path))
    assert proc.returncode == 2 and "a hf-causal-lm source is converted at fp32, int8-weights or int4-weights, not int8" in proc.stderr
    proc = run_cli("convert", str(SAMPLE_LM), "-t", "ptl", "-p", "int4-weights", "-o", str(tmp_path))
    assert proc.returncode == 2 and "no route from hf-causal-lm to ptl at int4-weights" in proc.stderr


def test_an_lm_precision_keeps_weights_float_but_takes_no_int8_only_option():
    from edgekit.core.quant import QuantSpec, parse_overrides

    assert QuantSpec("int4-weights", overrides=parse_overrides(["lm_head"])).overrides[0].precision == "float"
    with pytest.raises(BadInput, match="--bias-correction needs --precision int8"):
        QuantSpec("int4-weights", bias_correction=True)
    with pytest.raises(BadInput, match="--group-size 48 is not one edgekit builds"):
        QuantSpec("int4-weights", group_size=48)


def test_the_lm_view_reads_entry_points_cache_and_weight_groups_from_inputs_outputs_and_uses():
    from edgekit.targets.inspection import lm_view

    cache = ("float32", [2, 1, 16, 8])
    new = ("float32", [2, 1, 4, 8])  # the 4 tokens' keys and values
    step = {"inputs": [("int64", [1, 4]), ("int64", [4]), cache, cache],
            "outputs": [("float32", [1, 4, 50]), new, new]}
    uses = [{"role": "lookup", "dtype": "int8", "dims": [50, 16], "bytes": 800, "scheme": "per row"},
            {"role": "lookup", "dtype": "float32", "dims": [16, 4], "bytes": 256, "scheme": ""},  # RoPE, by position
            {"role": "matmul", "dtype": "int4", "dims": [32, 16], "bytes": 256, "scheme": "blocks of 32"},
            {"role": "matmul", "dtype": "int4", "dims": [16, 32], "bytes": 256, "scheme": "blocks of 32"},
            {"role": "matmul", "dtype": "int4", "dims": [50, 16], "bytes": 400, "scheme": "blocks of 32"}]
    view = lm_view({"prefill": step, "decode": {**step, "inputs": [("int64", [1, 1])] + step["inputs"][1:]}}, uses)
    assert view["entry_points"] == {"prefill": 4, "decode": 1} and (view["vocab"], view["max_seq_len"]) == (50, 16)
    assert view["cache"] == {"shape": [2, 1, 16, 8], "dtype": "float32", "bytes": 2 * 2 * 16 * 8 * 4}
    assert [(w["group"], w["tensors"], w["bytes"]) for w in view["weights"]] == [
        ("embedding", 1, 800), ("linears", 2, 512), ("lm_head", 1, 400)]
    image = {"inputs": [("float32", [1, 3, 8, 8])], "outputs": [("float32", [1, 10])]}
    assert lm_view({"graph": image}, uses) is None  # not a decoder LM: no LM view
    whole = {**step, "outputs": [("float32", [1, 4, 50]), ("float32", [2, 1, 4, 9]), new]}
    assert lm_view({"graph": whole}, uses) is None  # new keys of another head size: not this form


@pytest.mark.slow
def test_inspect_report_and_bench_read_an_lm_artifact_from_its_file_alone(sample_runs, tmp_path):
    artifacts, _, out = sample_runs["int4-weights"]
    proc = run_cli("inspect", *(artifacts[t]["path"] for t in ("executorch", "tflite", "onnx")), "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    views = {a["format"]: a["inspection"]["lm"] for a in json.loads(proc.stdout)["artifacts"]}
    assert views["pte"]["entry_points"] == views["tflite"]["entry_points"] == {"prefill": 32, "decode": 1}
    assert views["onnx"]["entry_points"] == {"graph": None}  # one graph, any token count
    for fmt, view in views.items():
        assert view["cache"] == {"shape": [4, 2, 256, 64], "dtype": "float32", "bytes": 2 * 4 * 2 * 256 * 64 * 4}
        groups = {(w["group"], w["dtype"], w["scheme"]) for w in view["weights"]}
        assert ("linears", "int4", "blocks of 32") in groups, (fmt, view["weights"])
    assert ("embedding", "int8", "per row") in {(w["group"], w["dtype"], w["scheme"]) for w in views["pte"]["weights"]}
    for fmt, scheme in (("pte", "per channel"), ("tflite", "shared with the embedding"), ("onnx", "shared with the embedding")):
        # the LM head stays int8 at int4; .tflite and .onnx read the embedding's rows from its weights
        assert ("lm_head", "int8", scheme) in {(w["group"], w["dtype"], w["scheme"]) for w in views[fmt]["weights"]}, views[fmt]["weights"]
    assert "outside_delegate" in views["pte"] and "outside_delegate" not in views["onnx"]
    # the decoder's norms and attention run inside XNNPACK (one delegate call per method): only the per-call
    # preamble (positions, masks, the embedding lookup) is left outside
    pte = next(a["inspection"] for a in json.loads(proc.stdout)["artifacts"] if a["format"] == "pte")
    assert pte["delegated"]["XnnpackBackend"]["calls"] == 2, pte["delegated"]
    assert not [op for op in views["pte"]["outside_delegate"] if op.startswith(("aten::mean", "aten::expand"))]
    # and the .onnx's RMS norms are in the form ONNX Runtime fuses: one op each (two per layer and the final one)
    import onnx
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(artifacts["onnx"]["path"], options, providers=["CPUExecutionProvider"])
    fused = [n for n in onnx.load(options.optimized_model_filepath).graph.node if n.op_type == "SimplifiedLayerNormalization"]
    assert len(fused) == 2 * artifacts["onnx"]["lm"]["cache_shape"][0] + 1
    report = json.loads(run_cli("report", str(out), "--json").stdout)
    assert {a["format"] for a in report["artifacts"] if "lm" in a} == {"pte", "tflite", "onnx", "ort"}
    timed = run_cli("bench", str(out), "--threads", "1", "--min-seconds", "0.2", "--json")
    assert timed.returncode == 0, timed.stderr[-2000:]
    for a in json.loads(timed.stdout)["artifacts"]:
        t = a["timings"][0]  # per decoded token, and the prefill call, on seeded random tokens
        assert t["decode_tokens_per_s"] == pytest.approx(1000 / t["median_ms"]) and t["prefill_tokens_per_s"] > 0, a
        assert a["peak_rss_bytes"] > a["runtime_rss_bytes"] > 0


@pytest.mark.parametrize("fmt, bits, group", [("pte", 4, 32), ("tflite", 4, 32), ("onnx", 4, 32), ("pte", 8, 64),
                                              ("tflite", 8, 64), ("onnx", 8, 32)])
def test_gptq_weights_stay_on_the_frameworks_grid_and_move_the_outputs_less_than_rounding(fmt, bits, group):
    """The stored weights give the framework the same scales back (each group's largest is kept) and sit on
    its levels, so its own rounding stores GPTQ's values; on correlated inputs the layer's outputs move less
    than with round-to-nearest."""
    import torch

    from edgekit.calibration.lm_gptq import gptq_round
    from edgekit.converters.lm_grids import grid

    g = torch.Generator().manual_seed(0)
    W = torch.randn(48, 64, generator=g)
    X = torch.randn(2048, 8, generator=g) @ torch.randn(8, 64, generator=g) + 0.1 * torch.randn(2048, 64, generator=g)
    before = grid(fmt, bits, W, group)
    stored = gptq_round(W, (2 * X.T @ X / len(X)).double(), before)
    after = grid(fmt, bits, stored, group)
    assert torch.equal(after["s"], before["s"])  # the framework computes the same scales from what is stored
    steps = stored.reshape(48, 64 // group, group) / before["s"][..., None]
    largest = torch.zeros_like(steps, dtype=torch.bool).scatter_(-1, before["ext"][..., None], True)
    assert torch.allclose(steps[~largest], steps[~largest].round(), atol=1e-3)  # the others on a level of the grid
    levels = torch.clamp(steps.round(), -(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    gptq = (levels * before["d"][..., None]).reshape(48, 64)
    rtn_levels = torch.clamp((W.reshape(48, 64 // group, group) / before["s"][..., None]).round(),
                             -(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    rtn = (rtn_levels * before["d"][..., None]).reshape(48, 64)
    assert ((X @ (W - gptq).T) ** 2).mean() < 0.8 * ((X @ (W - rtn).T) ** 2).mean()


@pytest.mark.slow
def test_calibration_text_rounds_the_sample_lm_by_gptq_past_its_int4_target(tmp_path, sample_runs):
    rtn = sample_runs["int4-weights"][0]["onnx"]["verification"]["metrics"]["logits"]["token_agreement"]
    proc = run_cli("convert", str(SAMPLE_LM), "-t", "onnx", "-p", "int4-weights", "--eval", str(SAMPLE_TEXT),
                   "--calib", str(SAMPLE_CALIB), "-o", str(tmp_path), "--json", timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    a = json.loads(proc.stdout)["artifacts"][0]
    agreement = a["verification"]["metrics"]["logits"]["token_agreement"]
    assert a["verification"]["status"] == "pass" and agreement >= max(0.90, rtn + 0.02), (agreement, rtn)
    assert a["lm"]["weights"]["rounding"].startswith("GPTQ on 64 windows of calibration text")


def test_calibration_text_is_refused_where_it_rounds_nothing_or_is_the_eval_text(tmp_path):
    at_fp32 = run_cli("convert", str(SAMPLE_LM), "-t", "onnx", "--eval", str(SAMPLE_TEXT), "--calib",
                      str(SAMPLE_CALIB), "-o", str(tmp_path / "a"))
    assert at_fp32.returncode == 2 and "at fp32 nothing is rounded" in at_fp32.stderr
    same = run_cli("convert", str(SAMPLE_LM), "-t", "onnx", "-p", "int4-weights", "--eval", str(SAMPLE_TEXT),
                   "--calib", str(SAMPLE_TEXT), "-o", str(tmp_path / "b"))
    assert same.returncode == 2 and "are the same text" in same.stderr


def test_a_weight_only_int8_linear_runs_inside_xnnpack_on_float_activations_as_computed(tmp_path):
    """The class behind ExecuTorch int8-weights: a linear whose weight is int8 per channel and whose
    activations stay float. XNNPACK's partitioner takes it (its f32-qc8w kernel), nothing is left outside the
    delegate, the program stores int8, and its outputs are the float input times the dequantized weight; the
    scales are the ones GPTQ's "pte" int8 grid rounds to."""
    import torch
    from executorch.runtime import Runtime

    from edgekit.converters.lm_grids import grid
    from edgekit.converters.lm_to_pte import _int8_weight_only
    from edgekit.converters.torch_to_pte import lower

    torch.manual_seed(0)
    float_linear = torch.nn.Linear(256, 192)
    module = torch.nn.Sequential(_int8_weight_only(float_linear), torch.nn.SiLU())
    assert torch.equal(module[0].scales, grid("pte", 8, float_linear.weight.detach(), 256)["s"][:, 0])
    x = torch.randn(1, 3, 256)
    program = torch.export.export(module, (x,))
    lowered, left_out = lower(program)
    graph = lowered.exported_program().graph_module.graph
    ops = [str(n.target) for n in graph.nodes if n.op == "call_function"]
    assert left_out == [] and ops == ["executorch_call_delegate", "<built-in function getitem>"], ops
    buffer = lowered.to_executorch().buffer
    assert len(buffer) < 256 * 192 * 4 / 2  # int8 weights, not float
    out = Runtime.get().load_program(buffer).load_method("forward").execute([x])[0]
    dequantized = module[0].weight.float() * module[0].scales[:, None]
    expected = torch.nn.functional.silu(x @ dequantized.T + float_linear.bias)
    assert torch.allclose(out, expected, atol=1e-4), (out - expected).abs().max()
    assert (expected - torch.nn.functional.silu(float_linear(x))).abs().max() > 1e-4  # the weights were rounded


@pytest.mark.slow
def test_an_lm_run_is_placed_from_the_artifact_cache_as_it_was_verified(tmp_path):
    args = (str(SAMPLE_LM), "-t", "onnx", "--eval", str(SAMPLE_TEXT), "--max-seq-len", "64", "--json")
    first = run_cli("convert", *args, "-o", str(tmp_path / "a"), timeout=900)
    assert first.returncode == 0, first.stderr[-3000:]
    second = run_cli("convert", *args, "-o", str(tmp_path / "b"), timeout=900)
    assert second.returncode == 0 and "onnx: placed from the cache (pass when verified" in second.stderr, second.stderr[-2000:]
    made, placed = (json.loads(p.stdout)["artifacts"][0] for p in (first, second))
    assert placed["verification"] == made["verification"] and placed["lm"] == made["lm"] and placed["cached"]
    assert Path(placed["path"]) == tmp_path / "b" / "tiny_lm.onnx" and Path(placed["path"]).read_bytes() == Path(made["path"]).read_bytes()


def test_an_lm_runs_cache_key_holds_its_cache_length_calibration_text_and_group_size(tmp_path):
    """Each of what an LM's artifact depends on beyond an image model's request is a different key."""
    from edgekit.engine.cache import ArtifactCache
    from edgekit.engine.plan import plan
    from edgekit.engine.request import build_request
    from edgekit.sources.loading import SourceOptions

    def key(precision="int4-weights", calib=None, group=32, length=None):
        req = build_request(str(SAMPLE_LM), ("onnx",), str(tmp_path), precision=precision, calibration=calib,
                            eval_data=str(SAMPLE_TEXT), group_size=group, source_options=SourceOptions(max_seq_len=length))
        return ArtifactCache(tmp_path / "cache").keys(plan(req))["onnx"]

    base = key()
    assert key() == base
    variants = [key(calib=str(SAMPLE_CALIB)), key(group=64), key(length=128), key(precision="int8-weights")]
    assert len({base, *variants}) == 5


@pytest.mark.slow
def test_keep_holds_the_named_weights_float_in_every_format(tmp_path):
    """--keep names modules of the decoder; in each file those weights stay float (as its inspection reads
    them back) and the rest are quantized. On .tflite the tied head and the embedding share one table, so it
    stays float for both."""
    proc = run_cli("convert", str(SAMPLE_LM), "-t", "executorch", "-t", "tflite", "-t", "onnx", "-p", "int8-weights",
                   "--keep", "lm_head", "--keep", "model.layers.0.mlp.down_proj", "--max-seq-len", "64",
                   "--eval", str(SAMPLE_TEXT), "-o", str(tmp_path / "out"), "--json", timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for a in json.loads(proc.stdout)["artifacts"]:
        tied = ["model.embed_tokens"] if a["target"] == "tflite" else []  # kept with the head it shares a table with
        assert a["lm"]["weights"]["kept_float"] == ["lm_head", "model.layers.0.mlp.down_proj", *tied]
        view = json.loads(run_cli("inspect", a["path"], "--json").stdout)["artifacts"][0]["inspection"]["lm"]
        by = {(w["group"], w["dtype"]): w for w in view["weights"]}
        assert by[("linears", "float32")]["bytes"] == 640 * 256 * 4, (a["target"], view["weights"])  # down_proj alone
        assert by[("linears", "int8")]["tensors"] == 27, (a["target"], view["weights"])
        assert ("lm_head", "float32") in by, (a["target"], view["weights"])
    tflite = next(a for a in json.loads(proc.stdout)["artifacts"] if a["target"] == "tflite")
    assert tflite["lm"]["weights"]["embedding"] == "float32"


def test_gptq_takes_each_linears_hessian_from_the_inputs_a_full_forward_gives_it(tmp_path, monkeypatch):
    """GPTQ runs each layer on inputs kept from the layer before; with rounding that changes nothing, every
    linear's Hessian must be 2/N Σ x xᵀ of what that linear sees in a plain forward pass of the decoder."""
    import torch

    from edgekit.calibration import lm_gptq
    from edgekit.sources.lm_decoder import example_inputs
    from edgekit.sources.lm_source import LMSource

    module = LMSource(str(_hf_folder(tmp_path, "Qwen2")), 16, 4).decoder()
    windows = np.random.default_rng(0).integers(0, 96, (3, 16))
    seen = {}
    monkeypatch.setattr(lm_gptq, "gptq_round", lambda weight, H, name: (seen.setdefault(name, H), weight)[1])
    names = [n for n, m in module.named_modules() if isinstance(m, torch.nn.Linear)]
    assert lm_gptq.gptq_decoder(module, windows, lambda name, w: name) == len(names) == len(seen)  # the "grid": its name
    inputs = {n: [] for n in names}
    hooks = [m.register_forward_hook(lambda m, i, o, n=n: inputs[n].append(i[0].reshape(-1, i[0].shape[-1]).double()))
             for n, m in module.named_modules() if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        for w in windows:
            module(torch.as_tensor(w)[None], torch.arange(16), *example_inputs(module.cfg, 16, 1)[2:])
    for h in hooks:
        h.remove()
    for name, H in seen.items():
        x = torch.cat(inputs[name])
        assert torch.allclose(H, 2 * x.T @ x / len(x), rtol=1e-5, atol=1e-8), name
