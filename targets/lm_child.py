"""Child-process entry point: a decoder LM artifact run token by token in its own runtime, with its cache.

    python -m edgekit.targets.lm_child FORMAT ARTIFACT JOB.json OUT.npz

JOB.json: `windows` (an .npz whose `tokens` is windows × positions of token ids), `prefill_len`,
`cache_shape`, `generate` (how many tokens to generate greedily after the first window's prefill),
`threads` and `needed` (the modules the artifact declares it needs beyond its runtime: a kernel library).
Each window is fed as an app feeds it — `prefill` with its first `prefill_len` tokens from an
empty cache, then `decode` one token at a time, each step's cache going into the next — and the logits
of every position are kept (teacher forcing: the next token fed is the text's, not the artifact's guess).
OUT.npz: `logits` (windows × positions × vocabulary, float32), `generated` (the greedy tokens),
`prefill_seconds`, `decode_seconds` (per window: the prefill call, and all its decode calls together) and
`peak_bytes` (this process's peak resident memory: the runtime, the artifact and its caches).
Only the artifact's runtime is imported; a native crash ends only this process.
"""

from __future__ import annotations

import importlib
import json
import resource
import sys
import time

import numpy as np

from edgekit.core.process import die_with_parent
from edgekit.targets import by_format, runtime_only


def step_windows(calls: dict, windows: np.ndarray, prefill_len: int, cache_shape) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(logits per window and position, seconds of each window's prefill, seconds of its decode steps)."""
    logits, prefill_s, decode_s = [], [], []
    for window in windows:
        k = np.zeros(cache_shape, np.float32)
        v = np.zeros(cache_shape, np.float32)
        started = time.perf_counter()
        out, k, v = calls["prefill"](window[None, :prefill_len], np.arange(prefill_len, dtype=np.int64), k, v)
        prefill_s.append(time.perf_counter() - started)
        rows = [np.asarray(out, np.float32).reshape(prefill_len, -1)]
        started = time.perf_counter()
        for pos in range(prefill_len, len(window)):
            out, k, v = calls["decode"](window[None, pos:pos + 1], np.array([pos], np.int64), k, v)
            rows.append(np.asarray(out, np.float32).reshape(1, -1))
        decode_s.append(time.perf_counter() - started)
        logits.append(np.concatenate(rows))
    return np.stack(logits), np.array(prefill_s), np.array(decode_s)


def generate(calls: dict, prompt: np.ndarray, count: int, cache_shape) -> np.ndarray:
    """`count` greedy tokens after `prompt` (exactly the prefill length), stopping at the cache's end."""
    k = np.zeros(cache_shape, np.float32)
    v = np.zeros(cache_shape, np.float32)
    out, k, v = calls["prefill"](prompt[None], np.arange(len(prompt), dtype=np.int64), k, v)
    tokens: list[int] = []
    pos = len(prompt)
    while len(tokens) < count and pos < cache_shape[2]:
        tokens.append(int(np.asarray(out).reshape(-1, np.asarray(out).shape[-1])[-1].argmax()))
        out, k, v = calls["decode"](np.array([[tokens[-1]]], np.int64), np.array([pos], np.int64), k, v)
        pos += 1
    return np.array(tokens, np.int64)


def timed_calls(calls: dict, prefill_len: int, cache_shape, vocab: int, seed: int = 0) -> dict:
    """What `edgekit bench` times of a decoder LM: `prefill` (its `prefill_len` tokens from an empty cache, as an
    app's first call) and `decode` (one token at the next position, the cache kept from call to call, the
    position wrapping back to `prefill_len` at the cache's end), on seeded random tokens."""
    rng = np.random.default_rng(seed)
    prompt = rng.integers(0, vocab, (1, prefill_len), dtype=np.int64)
    first = (np.zeros(cache_shape, np.float32), np.zeros(cache_shape, np.float32))  # prefill's own: it writes them
    state = {"k": np.zeros(cache_shape, np.float32), "v": np.zeros(cache_shape, np.float32), "pos": prefill_len}

    def prefill():
        calls["prefill"](prompt, np.arange(prefill_len, dtype=np.int64), *first)

    def decode():
        token = rng.integers(0, vocab, (1, 1), dtype=np.int64)
        _, state["k"], state["v"] = calls["decode"](token, np.array([state["pos"]], np.int64), state["k"], state["v"])
        state["pos"] = state["pos"] + 1 if state["pos"] + 1 < cache_shape[2] else prefill_len

    return {"prefill": prefill, "decode": decode}


def main(argv: list[str]) -> int:
    die_with_parent()
    fmt, path, job_path, out_path = argv
    runtime_only(fmt)
    with open(job_path) as f:
        job = json.load(f)
    for module in job.get("needed", ()):  # what the artifact declares it needs beyond its runtime, and only that
        importlib.import_module(module)
    calls = by_format(fmt).backend.lm_entry_points(path, job.get("threads", 1))
    missing = [n for n in ("prefill", "decode") if n not in calls]
    if missing:
        print(f"{path} has no {' or '.join(missing)} entry point (it has {', '.join(calls) or 'none'}): "
              "it is not a decoder LM edgekit made", file=sys.stderr)
        return 3
    windows = np.load(job["windows"])["tokens"].astype(np.int64)
    shape, prefill = tuple(job["cache_shape"]), int(job["prefill_len"])
    logits, prefill_s, decode_s = step_windows(calls, windows, prefill, shape)
    generated = generate(calls, windows[0, :prefill], int(job.get("generate", 0)), shape)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # bytes (Linux reports KiB)
    np.savez(out_path, logits=logits, generated=generated, prefill_seconds=prefill_s, decode_seconds=decode_s,
             peak_bytes=np.array(peak))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
