"""What a decoder LM's artifacts are judged against (`TokenReference`, the tokens kind of
edgekit.engine.reference), and its calibration text: a run builds, judges and places an LM's artifacts as any
other's (edgekit.engine.job.TargetJob), each run token by token through its own runtime with its cache on
held-out text and judged against the source by edgekit.core.lm_verify.

The held-out text is `--eval` (a .txt read with the folder's tokenizer, or a .npz of token ids named
`tokens`), cut into at most `WINDOWS` windows of `max_seq_len` tokens. Each window is the source's in one
forward pass and the artifact's as an app runs it: prefill, then decode step by step.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgekit.core.errors import BadInput, reading
from edgekit.core.lm_verify import lm_metrics, lm_verdict
from edgekit.core.quant import Precision
from edgekit.core.verify import LM_FP32, LM_METRICS, THRESHOLDS
from edgekit.engine.build import Progress
from edgekit.engine.isolation import inspect_isolated, lm_steps_isolated

WINDOWS = 4  # windows of held-out text each artifact is run on
GENERATED = 32  # greedy tokens compared after the first window's prefill
CALIB_WINDOWS = 64  # windows of `--calib` text GPTQ takes its Hessians on


def eval_windows(source, eval_data: str | None, windows: int = WINDOWS, what: str = "the eval text") -> np.ndarray:
    """The held-out token ids as windows × positions: as many whole windows of `max_seq_len` tokens as the
    text holds (up to `windows`), or one shorter window when it holds less than one. `what`: the text's name
    in errors."""
    if eval_data is None:
        raise BadInput("a decoder LM is verified on held-out text: none was given",
                       fix="pass --eval text.txt (read with the model's tokenizer) or --eval tokens.npz")
    path = Path(eval_data)
    with reading(path, what):
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as data:
                if "tokens" not in data.files:
                    raise BadInput(f"{path} has no array named 'tokens'", fix="save the token ids as tokens=...")
                tokens = np.asarray(data["tokens"]).reshape(-1).astype(np.int64)
        else:
            tokens = source.tokenize(path.read_text(encoding="utf-8"))
    if len(tokens) and (tokens.min() < 0 or tokens.max() >= source.config.vocab_size):
        raise BadInput(f"{path}: token ids outside the vocabulary 0..{source.config.vocab_size - 1}",
                       fix="tokenize the text with this model's tokenizer")
    need = source.prefill_len + 2
    if len(tokens) < need:
        raise BadInput(f"{path} holds {len(tokens)} tokens: too few to verify a decoder with a prefill of "
                       f"{source.prefill_len}", fix=f"give at least {need} tokens of text")
    width = min(source.max_seq_len, len(tokens))
    count = max(1, min(windows, len(tokens) // width))
    return tokens[: count * width].reshape(count, width)


def thresholds_for(precision: str, asked: dict) -> dict:
    """edgekit's LM thresholds at `precision` with the user's (`--threshold token_agreement=0.99`) on top."""
    base = LM_FP32 if precision == Precision.FP32 else THRESHOLDS.get(precision, {})
    return {**base, **{k: v for k, v in asked.items() if k in LM_METRICS}}


def speed(ran: dict, prefill_len: int) -> dict:
    """What the verification run measured of the runtime, on one thread: prefill and decode tokens per second
    (the median window's prefill call; every decode call, its new entries written into the cache as an app does)
    and the child process's peak memory. Host CPU figures from a verification, not a benchmark's repeated timing."""
    windows, width = ran["logits"].shape[:2]
    steps = windows * (width - prefill_len)
    return {"threads": 1, "prefill_tokens_per_s": round(prefill_len / float(np.median(ran["prefill_seconds"])), 1),
            "decode_tokens_per_s": round(steps / float(ran["decode_seconds"].sum()), 1) if steps else None,
            "peak_memory_mib": round(float(ran["peak_bytes"]) / 2**20, 1)}


class TokenReference:
    """What every artifact of one LM run is judged against (an edgekit.engine.reference.Reference of the tokens
    kind): the held-out windows, the source's logits on them and its greedy tokens, computed once."""

    def __init__(self, source, eval_data: str | None, say: Progress):
        self.source = source
        self.windows = eval_windows(source, eval_data)
        say(f"running the source model on {self.windows.shape[0]} window(s) of {self.windows.shape[1]} tokens")
        self.reference = source.reference_logits(self.windows)
        self.count = min(GENERATED, source.max_seq_len - source.prefill_len)
        self.generated = source.reference_generate(self.windows[0, :source.prefill_len], self.count)

    @property
    def what(self) -> str:
        """"on N tokens of held-out text, …"."""
        return f"on {self.windows.size} tokens of held-out text, token by token with its cache"

    def thresholds(self, precision: str, asked: dict) -> dict:
        """edgekit's LM thresholds at `precision`, the user's LM metrics on top (`thresholds_for`)."""
        return thresholds_for(precision, asked)

    def unnamed_precision(self, inspection) -> str:
        """fp32: edgekit names the LM files it quantizes (model.int4-weights.pte); one named otherwise is judged as float."""
        return Precision.FP32

    def run_by(self, runner) -> "TokenReference":
        """Itself: an LM artifact runs token by token in its own child, never on samples."""
        return self

    def judge(self, artifact, thresholds: dict, asked: dict, tell: Progress):
        """The artifact run token by token in its runtime (loading only what it declares it needs), judged;
        `asked` is already in `thresholds` (LM thresholds have no exceptions by what the artifact is)."""
        source = self.source
        inspection = inspect_isolated(artifact.format, artifact.path)
        needed = tuple(sorted({m for need in inspection.needs for m in need.modules}))
        ran = lm_steps_isolated(artifact.format, artifact.path, self.windows, prefill_len=source.prefill_len,
                                cache_shape=source.config.cache_shape(source.max_seq_len), generate=self.count,
                                needed=needed)
        metrics = lm_metrics(self.reference, ran["logits"], self.windows, self.generated, ran["generated"])
        return lm_verdict(metrics, thresholds, len(self.windows), inspection, speed=speed(ran, source.prefill_len))


def calibration_windows(source, req, say: Progress) -> np.ndarray | None:
    """`--calib` text for the weight precisions' data-aware rounding (GPTQ), as up to CALIB_WINDOWS windows of
    `max_seq_len` tokens; None without it. At fp32 nothing is rounded: --calib is refused."""
    if req.calibration is None:
        return None
    if req.precision == Precision.FP32:
        raise BadInput("--calib rounds an LM's weights by GPTQ: at fp32 nothing is rounded",
                       fix="leave --calib out, or give -p int8-weights or -p int4-weights")
    if Path(req.calibration.source).resolve() == Path(req.eval_data or "").resolve():
        raise BadInput(f"--calib and --eval are the same text ({req.calibration.source}): the verification "
                       "would judge the weights on the text they were fitted to", fix="give held-out text to --eval")
    windows = eval_windows(source, req.calibration.source, CALIB_WINDOWS, "the calibration text")
    say(f"calibration text: {windows.shape[0]} window(s) of {windows.shape[1]} tokens for GPTQ")
    return windows
