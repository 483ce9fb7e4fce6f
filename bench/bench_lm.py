"""Benchmark: edgekit's decoder LM artifacts against the frameworks' own LLM export paths, on one model.

    .venv/bin/python bench/bench_lm.py [--formats executorch,tflite,onnx] [--precisions fp32,int8-weights,int4-weights]
                                       [--model sample_models/tiny_lm] [--eval sample_models/tiny_lm_eval.txt]
                                       [--calib sample_models/tiny_lm_calib.txt] [--rounds 3] [--work DIR]
                                       [--json OUT.json]

For each format × precision two artifacts are made from the same Hugging Face folder:

- edgekit: `edgekit convert FOLDER -t FORMAT... -p PRECISION --max-seq-len 128` (prefill and decode entry
  points, the app writing each call's new keys and values into its KV cache);
- raw: what a user writes with the framework's own LLM tooling (as in the prototype scripts of the
  feature's investigation):
  executorch — transformers' TorchExportableModuleForDecoderOnlyLM (static cache of 128 as mutable buffers,
  method forward(input_ids, cache_position)), torchao's Int8DynamicActivationIntxWeightConfig (int8 per
  channel for int8-weights, int4 in groups of 32 for int4-weights), lowered with the XnnpackPartitioner;
  tflite — litert_torch.generative's decoder builder reading the folder's safetensors, converted by
  converter.convert_to_tflite with prefill (32) and decode signatures, the KV cache as per-layer tensors in and
  out, and its recipes none / weight_only_int8 / dynamic_int4_block32;
  onnx — torch.onnx.export (dynamo) of the transformers model wrapped to take and return the past keys and
  values (a cache that grows by one position per step), then ONNX Runtime's MatMulNBitsQuantizer (8 or 4
  bits, blocks of 32, symmetric, accuracy level 4).

Both are run on the same held-out windows (at most 4 windows of 128 tokens of --eval, read with the
folder's tokenizer, exactly as edgekit's verification cuts them): greedy generation of 32 tokens first
(which also warms the runtime up), then each window teacher-forced, prefill of 32 tokens from an empty
cache and decode one token at a time, through edgekit's own stepping loops (edgekit.targets.lm_child) and
edgekit's runtime adapters for the edgekit side, thin adapters written here for the raw side. Each
artifact runs in its own process, in its format's runtime at 1 thread (ExecuTorch's thread pool reset to 1
thread for both sides). Against the transformers fp32 reference (edgekit.core.lm_verify.lm_metrics): token
agreement and perplexity ratio. Timed: every decode call (median ms per token over all decode steps of the
windows) and every prefill call (median over the windows); file size. With --rounds N each pair of
processes is run N times, edgekit first in even rounds, raw first in odd ones, and the figures are medians
over rounds (the ratio edgekit ÷ raw is the median of the per-round ratios): on a shared machine the
neighbours' load moves a millisecond by tens of percent from one minute to the next.

A raw path that fails to build or to run is a row with its error, not a missing row. Host CPU timings.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_models"
PY = sys.executable
FORMATS = ("executorch", "tflite", "onnx")
PRECISIONS = ("fp32", "int8-weights", "int4-weights")
EXT = {"executorch": ".pte", "tflite": ".tflite", "onnx": ".onnx"}
MAX_SEQ_LEN, PREFILL_LEN, WINDOWS, GENERATE = 128, 32, 4, 32
GROUP = 32  # int4 group / block size on every raw path (edgekit's default --group-size too)
BUILD_TIMEOUT, RUN_TIMEOUT = 1800, 1200


# ----------------------------------------------------------------------------- raw builds (one process each)
def raw_executorch(folder: Path, precision: str, out: Path) -> Path:
    """transformers' exportable static-cache LM → torchao → XNNPACK-lowered .pte (the prototype's et_hf_export.py)."""
    import torch
    import transformers
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge_transform_and_lower
    from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM

    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                              attn_implementation="sdpa").eval()
    model.generation_config.cache_implementation = "static"
    model.generation_config.use_cache = True
    if precision != "fp32":
        from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
        from torchao.quantization.granularity import PerAxis, PerGroup

        if precision == "int8-weights":
            config = Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8, weight_granularity=PerAxis(0))
        else:
            config = Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(GROUP))
        quantize_(model, config)  # nn.Linear only (lm_head included); the embedding stays float
    exportable = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=MAX_SEQ_LEN)
    seq = torch.export.Dim("seq_length_dim", max=MAX_SEQ_LEN - 1)
    with torch.no_grad():
        # strict=False fails in run_decompositions with these versions (the prototype's REPORT.md)
        program = exportable.export(input_ids=torch.zeros(1, 4, dtype=torch.long),
                                    cache_position=torch.arange(4, dtype=torch.long),
                                    dynamic_shapes={"input_ids": {1: seq}, "cache_position": {0: seq}}, strict=True)
    lowered = to_edge_transform_and_lower(
        program, partitioner=[XnnpackPartitioner()],
        compile_config=EdgeCompileConfig(_check_ir_validity=False, _skip_dim_order=True),
    ).to_executorch(ExecutorchBackendConfig(extract_delegate_segments=True))
    path = out / "model.pte"
    path.write_bytes(lowered.buffer)
    return path


def raw_tflite(folder: Path, precision: str, out: Path) -> Path:
    """litert_torch.generative's decoder built from the folder → prefill/decode .tflite (litert_gen_export.py)."""
    import litert_torch.generative.layers.model_config as cfg
    from litert_torch.generative.utilities import converter, export_config, model_builder

    hf = json.loads((folder / "config.json").read_text())
    rope = hf.get("rope_parameters") or {}
    norm = cfg.NormalizationConfig(type=cfg.NormalizationType.RMS_NORM, epsilon=hf["rms_norm_eps"])
    attn = cfg.AttentionConfig(num_heads=hf["num_attention_heads"],
                               head_dim=hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"],
                               num_query_groups=hf["num_key_value_heads"],
                               rotary_base=int(rope.get("rope_theta", hf.get("rope_theta", 10000.0))),
                               rotary_percentage=1.0)
    ff = cfg.FeedForwardConfig(type=cfg.FeedForwardType.GATED, activation=cfg.ActivationConfig(cfg.ActivationType.SILU),
                               intermediate_size=hf["intermediate_size"])
    block = cfg.TransformerBlockConfig(attn_config=attn, ff_config=ff, pre_attention_norm_config=norm,
                                       post_attention_norm_config=norm)
    config = cfg.ModelConfig(vocab_size=hf["vocab_size"], num_layers=hf["num_hidden_layers"],
                             max_seq_len=hf["max_position_embeddings"], embedding_dim=hf["hidden_size"],
                             block_configs=block, final_norm_config=norm,
                             lm_head_share_weight_with_embedding=hf.get("tie_word_embeddings", False))
    model = model_builder.build_decoder_only_model(checkpoint_path=str(folder), config=config,
                                                   tensor_names=model_builder.TENSOR_NAMES,
                                                   model_class=model_builder.DecoderOnlyModel,
                                                   mask_cache_size=MAX_SEQ_LEN)
    recipe = {"fp32": "none", "int8-weights": "weight_only_int8", "int4-weights": f"dynamic_int4_block{GROUP}"}[precision]
    # logits from prefill too (off by default), or the prefill positions could not be scored;
    # export_config=None crashes (the converter reads export_config.mask_as_input)
    path = converter.convert_to_tflite(model, output_path=str(out), output_name_prefix="model",
                                       prefill_seq_len=PREFILL_LEN, kv_cache_max_len=MAX_SEQ_LEN, quantize=recipe,
                                       config=config,
                                       export_config=export_config.ExportConfig(output_logits_on_prefill=True))
    return Path(path)


def raw_onnx(folder: Path, precision: str, out: Path) -> Path:
    """torch.onnx.export of the transformers model with its past keys and values as inputs and outputs, then
    MatMulNBitsQuantizer for the weight precisions."""
    import onnx
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                              attn_implementation="sdpa").eval()
    layers, heads = model.config.num_hidden_layers, model.config.num_key_value_heads
    head_dim = getattr(model.config, "head_dim", None) or model.config.hidden_size // model.config.num_attention_heads

    class WithPast(torch.nn.Module):
        """(input_ids, attention_mask, past k/v per layer) → (logits, present k/v per layer): the usual
        decoder ONNX signature, the cache growing by the tokens fed."""

        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, past):
            cache = transformers.DynamicCache(config=model.config)
            for i in range(layers):
                cache.update(past[2 * i], past[2 * i + 1], i)
            got = self.model(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache, use_cache=True)
            return (got.logits, *[t for layer in got.past_key_values.layers for t in (layer.keys, layer.values)])

    names = [f"past_key_values.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    past = tuple(torch.zeros(1, heads, 3, head_dim) for _ in names)
    seq, before, total = (torch.export.Dim("seq", max=MAX_SEQ_LEN), torch.export.Dim("past", max=MAX_SEQ_LEN - 1),
                          torch.export.Dim("total", max=2 * MAX_SEQ_LEN))
    fp32 = out / "model_fp32.onnx" if precision != "fp32" else out / "model.onnx"
    with torch.no_grad():
        example = (torch.zeros(1, 2, dtype=torch.long), torch.ones(1, 5, dtype=torch.long), past)
        torch.onnx.export(WithPast().eval(), example, str(fp32), input_names=["input_ids", "attention_mask", *names],
                          output_names=["logits", *[n.replace("past_key_values", "present") for n in names]],
                          dynamic_shapes=({1: seq}, {1: total}, tuple({2: before} for _ in names)),
                          dynamo=True, external_data=False)
    if precision == "fp32":
        return fp32
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quantizer = MatMulNBitsQuantizer(onnx.load(str(fp32)), bits=8 if precision == "int8-weights" else 4,
                                     block_size=GROUP, is_symmetric=True, accuracy_level=4)
    quantizer.process()
    path = out / "model.onnx"
    quantizer.model.save_model_to_file(str(path), use_external_data_format=False)
    fp32.unlink()
    return path


RAW_BUILDERS = {"executorch": raw_executorch, "tflite": raw_tflite, "onnx": raw_onnx}


def build_child(fmt: str, precision: str, folder: str, out: str) -> int:
    """`build` subcommand: one raw artifact into `out`; its path on stdout's last line, or a one-line error in
    out/error.txt and exit 1."""
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        path = RAW_BUILDERS[fmt](Path(folder), precision, out_dir)
    except Exception as e:  # the framework's own failure is the result
        traceback.print_exc()
        (out_dir / "error.txt").write_text(f"{type(e).__name__}: {_first_line(str(e))}")
        return 1
    print(json.dumps(str(path)))
    return 0


# ----------------------------------------------------------------------------- raw runtime adapters
# Each returns {"prefill", "decode"} called as edgekit's entry points are, (tokens, input_pos, k, v) → (logits, k, v),
# so edgekit's stepping loops drive both sides. The raw artifacts keep their own cache (the .pte in its mutable
# buffers, the .tflite per-layer tensors and the .onnx growing past held here): the k and v given are passed back
# untouched, and a prefill (always from position 0 in those loops) starts the cache empty.
def open_raw_pte(path: str) -> dict:
    # the kernel libraries the prototype's runner (et_run.py) loads for these programs
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401
    import executorch.kernels.quantized  # noqa: F401
    import torch
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(path).load_method("forward")

    def call(tokens, input_pos, k, v):
        # positions beyond the prefill are masked by cache_position, so a new window needs no reset
        args = [torch.from_numpy(np.ascontiguousarray(a)) for a in (tokens, input_pos)]
        return method.execute(args)[0].numpy(), k, v

    return {"prefill": call, "decode": call}


def open_raw_tflite(path: str) -> dict:
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=path, num_threads=1)
    names = interp.get_signature_list()
    pre = interp.get_signature_runner(next(n for n in names if n.startswith("prefill")))
    dec = interp.get_signature_runner("decode")
    empty = {k: np.zeros(d["shape"], d["dtype"]) for k, d in pre.get_input_details().items() if k.startswith("kv_cache")}
    state = {}

    def run(runner, tokens, input_pos, kv):
        got = runner(tokens=tokens.astype(np.int32), input_pos=input_pos.astype(np.int32), **kv)
        state["kv"] = {k: a for k, a in got.items() if k.startswith("kv_cache")}
        return got["logits"]

    def prefill(tokens, input_pos, k, v):
        return run(pre, tokens, input_pos, empty), k, v

    def decode(tokens, input_pos, k, v):
        return run(dec, tokens, input_pos, state["kv"]), k, v

    return {"prefill": prefill, "decode": decode}


def open_raw_onnx(path: str) -> dict:
    from edgekit.targets.onnx.runner import session

    sess = session(path, threads=1)  # a plain CPU session: intra-op 1, inter-op 1, full graph optimization
    past_names = [i.name for i in sess.get_inputs() if i.name.startswith("past_key_values")]
    shape = sess.get_inputs()[2].shape
    empty = {n: np.zeros((1, shape[1], 0, shape[3]), np.float32) for n in past_names}
    state = {}

    def call(tokens, input_pos, k, v):
        past = empty if input_pos[0] == 0 else state["past"]
        total = int(input_pos[-1]) + 1
        got = sess.run(None, {"input_ids": tokens, "attention_mask": np.ones((1, total), np.int64), **past})
        state["past"] = dict(zip(past_names, got[1:]))
        return got[0], k, v

    return {"prefill": call, "decode": call}


def entry_points(tool: str, fmt: str, path: str, needed: list[str]) -> dict:
    """The artifact's prefill and decode calls: edgekit's own adapters for its artifacts, the ones above for raw."""
    if fmt == "executorch":
        from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool

        _unsafe_reset_threadpool(1)  # XNNPACK's pool is otherwise sized to the machine, on either side
    if tool == "raw":
        return {"executorch": open_raw_pte, "tflite": open_raw_tflite, "onnx": open_raw_onnx}[fmt](path)
    import importlib

    for module in needed:  # the kernel libraries the artifact declares (convert's runtime_needs)
        importlib.import_module(module)
    runner = importlib.import_module(f"edgekit.targets.{fmt}.runner")
    return runner.lm_entry_points(path, 1)


# ----------------------------------------------------------------------------- the run (one process per artifact)
def timed(calls: dict, log: dict[str, list[float]]) -> dict:
    """`calls` with each call's seconds appended to log[name]."""
    def wrap(name, fn):
        def call(*args):
            started = time.perf_counter()
            out = fn(*args)
            log[name].append(time.perf_counter() - started)
            return out
        return call
    return {name: wrap(name, fn) for name, fn in calls.items()}


def run_child(tool: str, fmt: str, path: str, ref_path: str, out_path: str, needed: list[str]) -> int:
    """`run` subcommand: generate, then the windows teacher-forced and timed; logits and timings to out_path."""
    from edgekit.targets.lm_child import generate, step_windows

    with np.load(ref_path) as ref:
        windows, shape = ref["windows"], tuple(int(d) for d in ref["cache_shape"])
    log: dict[str, list[float]] = {"prefill": [], "decode": []}
    calls = timed(entry_points(tool, fmt, path, needed), log)
    generated = generate(calls, windows[0, :PREFILL_LEN], GENERATE, shape)  # also the warm-up
    for times in log.values():
        times.clear()
    logits, _, _ = step_windows(calls, windows, PREFILL_LEN, shape)
    np.savez(out_path, logits=logits, generated=generated, prefill=np.array(log["prefill"]),
             decode=np.array(log["decode"]))
    return 0


# ----------------------------------------------------------------------------- the benchmark
def reference(folder: Path, eval_text: Path, work: Path) -> Path:
    """The eval windows, the transformers fp32 logits and greedy tokens, as edgekit's verification makes them."""
    from edgekit.engine.lm_job import eval_windows
    from edgekit.sources.lm_source import LMSource

    source = LMSource(str(folder), MAX_SEQ_LEN, PREFILL_LEN)
    windows = eval_windows(source, str(eval_text), WINDOWS)
    path = work / "reference.npz"
    np.savez(path, windows=windows, logits=source.reference_logits(windows),
             generated=source.reference_generate(windows[0, :PREFILL_LEN], GENERATE),
             cache_shape=np.array(source.config.cache_shape(MAX_SEQ_LEN)))
    return path


def edgekit_convert(folder: Path, eval_text: Path, formats: list[str], precision: str, out: Path,
                    calib: Path | None = None) -> dict:
    """{format: {"path", "bytes", "needed", "seconds", "verdict"} or {"error"}} from one `edgekit convert --json`
    (with `--calib` text below fp32 when given: GPTQ)."""
    targets = [a for f in formats for a in ("-t", f)] + (["--calib", str(calib)] if calib and precision != "fp32" else [])
    started = time.perf_counter()
    proc = subprocess.run([PY, "-m", "edgekit", "convert", str(folder), *targets, "-p", precision,
                           "--max-seq-len", str(MAX_SEQ_LEN), "--prefill-len", str(PREFILL_LEN), "--eval", str(eval_text),
                           "-o", str(out), "--json", "--no-cache"], capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    seconds = time.perf_counter() - started
    if proc.returncode not in (0, 1):  # 1: an artifact failed its verdict, still an artifact to measure
        error = _last_error(proc.stderr) or f"exit {proc.returncode}"
        return {f: {"error": f"edgekit convert: {error}"} for f in formats}
    found = {}
    for a in json.loads(proc.stdout)["artifacts"]:
        ver = a.get("verification") or {}
        needs = (ver.get("inspection") or {}).get("runtime_needs", [])
        found[a["target"]] = {"path": a["path"], "bytes": a["bytes"], "seconds": a.get("seconds", seconds),
                              "verdict": ver.get("status"), "needed": sorted({m for n in needs for m in n["modules"]})}
    return {f: found.get(f, {"error": "edgekit convert wrote no artifact for it"}) for f in formats}


def raw_build(folder: Path, fmt: str, precision: str, out: Path) -> dict:
    """{"path", "bytes", "seconds"} or {"error"}: the raw path built in its own process."""
    started = time.perf_counter()
    try:
        proc = subprocess.run([PY, __file__, "build", fmt, precision, str(folder), str(out)],
                              capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        return {"error": f"build timed out after {BUILD_TIMEOUT} s"}
    seconds = time.perf_counter() - started
    (out / "build.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        note = out / "error.txt"
        error = note.read_text() if note.exists() else (_last_error(proc.stderr) or _signal(proc.returncode))
        return {"error": error}
    path = Path(json.loads(proc.stdout.strip().splitlines()[-1]))
    return {"path": str(path), "bytes": _size(path), "seconds": round(seconds, 1), "needed": []}


def run_side(tool: str, fmt: str, built: dict, ref_path: Path, out: Path) -> dict:
    """The artifact's logits, generated tokens and call times from its own process, or {"error"}."""
    try:
        proc = subprocess.run([PY, __file__, "run", tool, fmt, built["path"], str(ref_path), str(out), *built["needed"]],
                              capture_output=True, text=True, timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        return {"error": f"run timed out after {RUN_TIMEOUT} s"}
    if proc.returncode != 0:
        return {"error": f"run: {_last_error(proc.stderr) or _signal(proc.returncode)}"}
    with np.load(out) as got:
        return {k: got[k] for k in got.files}


def measure(fmt: str, precision: str, sides: dict, ref_path: Path, runs: Path, rounds: int) -> dict:
    """Per tool: metrics from the first round, medians of the timings over rounds (or its error)."""
    from edgekit.core.lm_verify import lm_metrics

    with np.load(ref_path) as ref:
        windows, ref_logits, ref_generated = ref["windows"], ref["logits"], ref["generated"]
    results = {tool: dict(built) for tool, built in sides.items()}
    for round_ in range(rounds):
        order = ("edgekit", "raw") if round_ % 2 == 0 else ("raw", "edgekit")
        for tool in order:
            res = results[tool]
            if "error" in res:
                continue
            got = run_side(tool, fmt, sides[tool], ref_path, runs / f"{fmt}-{precision}-{tool}-{round_}.npz")
            if "error" in got:
                res["error"] = got["error"]
                continue
            if round_ == 0:
                res["metrics"] = lm_metrics(ref_logits, got["logits"], windows, ref_generated, got["generated"])
            res.setdefault("decode_ms", []).append(1e3 * float(np.median(got["decode"])))
            res.setdefault("prefill_ms", []).append(1e3 * float(np.median(got["prefill"])))
        print(f"  {fmt} {precision}: round {round_ + 1}/{rounds} done", file=sys.stderr, flush=True)
    ours, theirs = results["edgekit"], results["raw"]
    if "error" not in ours and "error" not in theirs:  # paired within each round
        ours["decode_ratio"] = statistics.median(a / b for a, b in zip(ours["decode_ms"], theirs["decode_ms"]))
    return results


def table(rows: list[dict]) -> str:
    head = ("format", "precision", "tool", "size MB", "token agreement", "perplexity ratio", "decode ms/token",
            "prefill ms (32 tokens)", "decode edgekit ÷ raw")
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in rows:
        cells = [r["format"], r["precision"], r["tool"]]
        if "error" in r:
            cells += [f"FAILED: {_cell(r['error'])}", "—", "—", "—", "—", "—"]
        else:
            m = r["metrics"]
            cells += [f"{r['bytes'] / 1e6:.2f}", f"{m['token_agreement']:.2%}", f"{m['perplexity_ratio']:.4f}",
                      f"{statistics.median(r['decode_ms']):.3f}", f"{statistics.median(r['prefill_ms']):.2f}",
                      f"{r['decode_ratio']:.2f}" if "decode_ratio" in r else "—"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def bench(args, work: Path) -> list[dict]:
    started = time.perf_counter()
    ref_path = reference(args.model, args.eval, work)
    print(f"reference ready ({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
    runs = work / "runs"
    runs.mkdir(exist_ok=True)
    rows = []
    for precision in args.precisions:
        ours = edgekit_convert(args.model, args.eval, args.formats, precision, work / "edgekit" / precision, args.calib)
        print(f"edgekit convert {precision} done ({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
        for fmt in args.formats:
            theirs = raw_build(args.model, fmt, precision, work / "raw" / f"{fmt}-{precision}")
            print(f"raw {fmt} {precision} built: {theirs.get('error', 'ok')} ({time.perf_counter() - started:.0f} s)",
                  file=sys.stderr, flush=True)
            results = measure(fmt, precision, {"edgekit": ours[fmt], "raw": theirs}, ref_path, runs, args.rounds)
            for tool, res in results.items():
                rows.append({"format": fmt, "precision": precision, "tool": tool, **res})
    return rows


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["build"]:
        return build_child(*argv[1:5])
    if argv[:1] == ["run"]:
        return run_child(*argv[1:6], argv[6:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--formats", type=_names(FORMATS), default=list(FORMATS))
    parser.add_argument("--precisions", type=_names(PRECISIONS), default=list(PRECISIONS))
    parser.add_argument("--model", type=Path, default=SAMPLES / "tiny_lm")
    parser.add_argument("--eval", type=Path, default=SAMPLES / "tiny_lm_eval.txt")
    parser.add_argument("--calib", type=Path, help="edgekit's side below fp32: --calib this text (GPTQ); the raw "
                                                   "paths round to nearest, as their tools do by default")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each pair of processes (timings: median)")
    parser.add_argument("--work", type=Path, help="keep the artifacts and runs here (default: a temporary folder)")
    parser.add_argument("--json", type=Path, help="also write every figure (and error) here")
    args = parser.parse_args(argv)
    args.model, args.eval = args.model.resolve(), args.eval.resolve()
    started = time.perf_counter()
    if args.work:
        args.work.mkdir(parents=True, exist_ok=True)
        rows = bench(args, args.work.resolve())
    else:
        with tempfile.TemporaryDirectory(prefix="edgekit-bench-lm-") as tmp:
            rows = bench(args, Path(tmp))
    seconds = time.perf_counter() - started
    print(f"\n{args.model.name}: {WINDOWS} windows of {MAX_SEQ_LEN} tokens of {args.eval.name} at most, prefill "
          f"{PREFILL_LEN}, 1 thread, {args.rounds} round(s); token agreement and perplexity ratio against transformers "
          f"fp32; timings are medians (host CPU)\n")
    print(table(rows))
    print(f"\ntotal {seconds / 60:.1f} min")
    if args.json:
        doc = {"model": str(args.model), "eval": str(args.eval), "max_seq_len": MAX_SEQ_LEN, "prefill_len": PREFILL_LEN,
               "rounds": args.rounds, "seconds": round(seconds, 1), "rows": rows}
        args.json.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    return 0


# ----------------------------------------------------------------------------- small helpers
def _names(allowed: tuple[str, ...]):
    def parse(text: str) -> list[str]:
        names = [n.strip() for n in text.split(",") if n.strip()]
        bad = [n for n in names if n not in allowed]
        if bad or not names:
            raise argparse.ArgumentTypeError(f"{', '.join(bad) or 'nothing'}: choose from {', '.join(allowed)}")
        return names
    return parse


def _size(path: Path) -> int:
    """The artifact's bytes with its external data files (model.onnx.data and the like), if any."""
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def _first_line(text: str) -> str:
    line = next((s.strip() for s in text.splitlines() if s.strip()), "")
    return line[:300]


def _last_error(stderr: str) -> str:
    """The last line of a traceback that names an exception (or the last non-empty line)."""
    lines = [s.strip() for s in stderr.splitlines() if s.strip()]
    for line in reversed(lines):
        head = line.split(":", 1)[0]
        if head.endswith(("Error", "Exception", "Failed")) or line.startswith("edgekit: error"):
            return line[:300]
    return lines[-1][:300] if lines else ""


def _signal(code: int) -> str:
    return f"process died with signal {-code}" if code < 0 else f"exit {code}"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")[:200]


if __name__ == "__main__":
    sys.exit(main())
