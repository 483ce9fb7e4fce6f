"""Verification that fits a language model: the artifact's logits, token by token with its cache, against
the source's on held-out text (pure functions on arrays; the runs are edgekit.engine.lm_job's).

- `token_agreement`: share of positions whose greedy next token (arg-max) is the source's;
- `logits_cosine`: mean cosine of the logits rows;
- `perplexity_source`, `perplexity_artifact` and their `perplexity_ratio`, on the text's own next tokens;
- `generated_agreement`: the share of the source's first N greedy tokens the artifact generates the same,
  up to the first that differs (after that the two continue different texts).
Where the next tokens differ, `near_ties` counts the positions at which the source itself hesitates (its top
two tokens within NEAR_TIE of probability): a small LM hesitates often, and any rounding flips some of those.
"""

from __future__ import annotations

import numpy as np

from edgekit.core.verify import LM_METRICS, Status, Verdict

NEAR_TIE = 0.05  # a position whose source gives its top two tokens probabilities this close is a near-tie


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def perplexity(logits: np.ndarray, windows: np.ndarray) -> float:
    """exp of the mean negative log-likelihood of each window's next tokens (windows × positions × vocabulary)."""
    logp = _log_softmax(logits[:, :-1])
    nll = -np.take_along_axis(logp, windows[:, 1:, None], axis=-1)
    return float(np.exp(nll.mean()))


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """How many leading tokens `a` and `b` share."""
    n = min(len(a), len(b))
    differ = np.nonzero(a[:n] != b[:n])[0]
    return int(differ[0]) if len(differ) else n


def lm_metrics(reference: np.ndarray, artifact: np.ndarray, windows: np.ndarray,
               ref_generated: np.ndarray, generated: np.ndarray) -> dict:
    """Every LM metric of `artifact`'s logits against `reference`'s on `windows` (their token ids)."""
    r = reference.reshape(-1, reference.shape[-1]).astype(np.float64)
    o = artifact.reshape(-1, artifact.shape[-1]).astype(np.float64)
    norms = np.linalg.norm(r, axis=1) * np.linalg.norm(o, axis=1)
    cos = np.where(norms > 0, (r * o).sum(axis=1) / np.maximum(norms, 1e-300), 1.0)
    ppl_ref, ppl_out = perplexity(reference, windows), perplexity(artifact, windows)
    differ = r.argmax(1) != o.argmax(1)
    probs = np.exp(_log_softmax(r[differ]))
    top2 = np.sort(probs, axis=1)[:, -2:] if len(probs) else np.zeros((0, 2))
    out = {"token_agreement": round(float(np.mean(~differ)), 6),
           "disagreements": int(differ.sum()), "near_ties": int(np.sum(top2[:, 1] - top2[:, 0] < NEAR_TIE)),
           "logits_cosine": round(float(cos.mean()), 6),
           "perplexity_source": round(ppl_ref, 4), "perplexity_artifact": round(ppl_out, 4),
           "perplexity_ratio": round(ppl_out / ppl_ref, 6), "positions": int(r.shape[0])}
    if len(ref_generated):
        same = common_prefix(ref_generated, generated)
        out.update({"generated_agreement": round(same / len(ref_generated), 6), "generated_tokens": int(len(ref_generated))})
    return out


def lm_verdict(metrics: dict, thresholds: dict, windows: int, inspection=None, speed: dict | None = None) -> Verdict:
    """pass when every LM threshold holds (minimums for agreements and cosine, maximums for the ratio); the
    runtime's speed as the verification measured it, if given, beside the logits' metrics (never judged)."""
    reasons = []
    for key, limit in thresholds.items():
        if key not in LM_METRICS or key not in metrics:
            continue
        value = metrics[key]
        if (value < limit) if LM_METRICS[key] else (value > limit):
            reason = f"{key} {value:.6g} {'<' if LM_METRICS[key] else '>'} {limit:g}"
            if key == "token_agreement":
                reason += (f" ({metrics['disagreements']} of {metrics['positions']} next tokens differ; "
                           f"{metrics['near_ties']} of them where the source's top two are within {NEAR_TIE:g} of probability)")
            reasons.append(reason)
    return Verdict(Status.FAIL if reasons else Status.PASS, windows, {"logits": metrics, **({"speed": speed} if speed else {})},
                   dict(thresholds), reasons=tuple(reasons), inspection=inspection)
