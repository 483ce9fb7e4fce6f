"""The verdict against the task: a corpus of artifacts' outputs, good and bad by what the output is for.

Each case is a source's outputs on its samples and an artifact's, made the way each failure class shows up in
int8 artifacts (rounding noise on a silent frame, a near-tie flipped, an octave error, a phantom detection, a
missing mask, a clear decision flipped while the cosine stays high), and a task metric computed apart from the
verifier's metrics (pitch within a bin, voicing, confident decisions kept, mask IoU, an embedding's worst cosine).
The corpus's labels are checked first (each case really is good or bad by its task), then the int8 verdict must
agree with the task on every case: no false fail, no false pass.
"""

from __future__ import annotations

import numpy as np
import pytest

from edgekit.core.verify import METRICS, THRESHOLDS, _cosines, compare

INT8 = {k: v for k, v in THRESHOLDS["int8"].items() if k in METRICS}


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


# ------------------------------------------------------------------------------------------ pitch (CREPE-like)

BINS = 360


def _pitch_frames(rng, voiced: int, silent: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-frame sigmoid activations over 360 pitch bins: a bump (peak ≈ 0.9, a few bins wide) on voiced frames,
    near-zero activations on silent ones. (activations, the voiced frames' true bins)"""
    bins = rng.integers(40, 320, voiced)
    grid = np.arange(BINS)
    loud = 0.9 * np.exp(-0.5 * ((grid[None] - bins[:, None]) / 1.8) ** 2) + rng.uniform(0, 0.02, (voiced, BINS))
    quiet = rng.uniform(0, 0.004, (silent, BINS))  # a silent frame: every bin near zero
    return np.concatenate([loud, quiet]).astype(np.float32), bins


def _int8_output(x: np.ndarray, rng, scale: float = 1 / 255) -> np.ndarray:
    """An int8 artifact's rendering of an output in [0, 1]: the inner noise of the model, then the output's uint8 grid."""
    noisy = x + rng.normal(0, 0.004, x.shape)
    return (np.clip(np.round(noisy / scale), 0, 255) * scale).astype(np.float32)


def pitch_task(ref: np.ndarray, out: np.ndarray) -> bool:
    """A pitch tracker does its task when the voicing decision (peak > 0.5) agrees on ≥ 98% of frames and the
    pitch bin is within one of the source's on ≥ 98% of the voiced frames."""
    voiced_r, voiced_o = ref.max(1) > 0.5, out.max(1) > 0.5
    near = np.abs(ref.argmax(1) - out.argmax(1)) <= 1
    return np.mean(voiced_r == voiced_o) >= 0.98 and np.mean(near[voiced_r]) >= 0.98


def pitch_cases():
    rng = np.random.default_rng(10)
    ref, _ = _pitch_frames(rng, 70, 10)
    good = _int8_output(ref, rng)
    octave = good.copy()  # 20% of the voiced frames an octave (60 bins) off: a wrong pitch, confidently
    for i in range(0, 70, 5):
        octave[i] = np.roll(good[i], 60)
    phantom = good.copy()  # silent frames given a confident pitch
    phantom[70:] = _int8_output(_pitch_frames(rng, 10, 0)[0], rng)
    return [("pitch: int8 rounding, silent frames included", ref, good),
            ("pitch: octave errors on a fifth of the voiced frames", ref, octave),
            ("pitch: a pitch found in every silent frame", ref, phantom)]


# ------------------------------------------------------------------------------------------ classifier

def _logits(rng, n: int, classes: int = 1000, near_ties: int = 8) -> np.ndarray:
    """Logits with a clear winner per sample, but for `near_ties` samples whose top two are 0.002 apart."""
    x = rng.normal(0, 1.5, (n, classes))
    top = rng.integers(0, classes, n)
    x[np.arange(n), top] += 6.0
    for i in range(near_ties):
        second = (top[i] + 1) % classes
        x[i, second] = x[i, top[i]] - 0.002
    return x.astype(np.float32)


def classifier_task(ref: np.ndarray, out: np.ndarray) -> bool:
    """A classifier does its task when it keeps the decisions the source makes with confidence (softmax gap
    between its top two ≥ 0.1) on ≥ 95% of such samples; a near-tie may go either way."""
    p = np.exp(ref - ref.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    top2 = np.sort(p, 1)[:, -2:]
    decided = (top2[:, 1] - top2[:, 0]) >= 0.1
    return np.mean(ref.argmax(1)[decided] == out.argmax(1)[decided]) >= 0.95


def classifier_cases():
    rng = np.random.default_rng(11)
    ref = _logits(rng, 64)
    good = ref + rng.normal(0, 0.02, ref.shape).astype(np.float32)
    for i in range(8):  # every near-tie decided the other way, by a hair
        a, b = np.argsort(ref[i])[-2:]
        good[i, a], good[i, b] = ref[i, b] + 0.001, ref[i, a] - 0.001
    swapped = good.copy()  # a fifth of the confident decisions go to the runner-up: two of 1000 logits swapped
    for i in range(8, 64, 5):
        a, b = np.argsort(ref[i])[-2:]
        swapped[i, [a, b]] = swapped[i, [b, a]]
    return [("classifier: near-ties flip, every confident decision kept", ref, good),
            ("classifier: confident decisions go to the runner-up (the cosine stays high)", ref, swapped)]


# ------------------------------------------------------------------------------------------ embedding

def embedding_task(ref: np.ndarray, out: np.ndarray) -> bool:
    """An embedding does its task when every sample's embedding keeps cosine ≥ 0.95 with the source's (it is
    compared one sample at a time: a speaker, a sentence)."""
    return bool(np.min(_cosines(ref, out)) >= 0.95)


def embedding_cases():
    rng = np.random.default_rng(12)
    ref = rng.normal(0, 1, (40, 256))
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    good = ref + rng.normal(0, 0.004, ref.shape)
    one = good.copy()
    one[17] = rng.normal(0, 1, 256) / 16  # one speaker's embedding gone wrong, at full energy
    return [("embedding: int8 noise", ref, good), ("embedding: one sample wrong", ref, one)]


# ------------------------------------------------------------------------------------------ segmentation

def _masks(rng, n: int, empty: int) -> np.ndarray:
    """n×1×1×32×32 probability maps: a blob per image (text, a person), all but `empty` images; the empty ones
    near zero everywhere (a page without text)."""
    yy, xx = np.mgrid[:32, :32]
    maps = np.zeros((n, 1, 1, 32, 32), np.float32)
    for i in range(n - empty):
        cy, cx, r = rng.integers(8, 24), rng.integers(8, 24), rng.integers(4, 8)
        maps[i, 0, 0] = _sigmoid(4 * (r - np.hypot(yy - cy, xx - cx)))
    maps[n - empty:] = rng.uniform(0, 0.003, (empty, 1, 1, 32, 32))
    return maps


def segmentation_task(ref: np.ndarray, out: np.ndarray) -> bool:
    """A segmentation net does its task when every image's mask (> 0.5) has IoU ≥ 0.8 with the source's (an empty
    mask matching an empty one) and no empty image gains more than 4 pixels."""
    for r, o in zip(ref > 0.5, out > 0.5):
        union = (r | o).sum()
        if (union > 4 and (r & o).sum() / union < 0.8) or (not r.any() and o.sum() > 4):
            return False
    return True


def segmentation_cases():
    rng = np.random.default_rng(13)
    ref = _masks(rng, 24, 4)
    good = _int8_output(ref, rng)
    missing = good.copy()
    missing[5] = _int8_output(np.zeros_like(ref[5]), rng)  # one image's mask is gone
    return [("segmentation: int8 rounding, empty pages included", ref, good),
            ("segmentation: one image's mask missing", ref, missing)]


# ------------------------------------------------------------------------------------------ a decoder's tokens

TOKENS, STEPS, END = 74, 20, 3


def _readings(rng, n: int) -> np.ndarray:
    """A greedy decoder's logits per step (n × 20 × 74): a clear winner per step up to its end token, then the
    end token's one-hot (the decoder has stopped), as a seq2seq model exported at a fixed length writes them."""
    x = rng.normal(0, 1.5, (n, STEPS, TOKENS))
    x[..., END] -= 10
    ends = rng.integers(4, 14, n)
    for i, end in enumerate(ends):
        x[i, np.arange(end), rng.integers(4, TOKENS, end)] += 9.0
        x[i, end, END] = x[i, end].max() + 6.0
        x[i, end + 1:] = np.arange(TOKENS) == END
    return x.astype(np.float32)


def _diverge(x: np.ndarray, i: int, clear: bool, rng) -> None:
    """Sample i's reading changes at its last token: from a near-tie in the source (`clear` False: the runner-up
    0.002 behind) or from a clear winner (True), the artifact taking the runner-up."""
    step = int(np.argmax(x[i].argmax(1) == END)) - 1
    top = int(x[i, step].argmax())
    other = (top + 1 - 4) % (TOKENS - 4) + 4
    if not clear:
        x[i, step, other] = x[i, step, top] - 0.002
    return step, top, other


def reading_task(ref: np.ndarray, out: np.ndarray) -> bool:
    """A decoder does its task when ≥ 95% of the samples read the same tokens as the source up to its end token."""
    def read(x):
        tokens = list(x.argmax(-1))
        return tokens[:tokens.index(END)] if END in tokens else tokens
    return np.mean([read(r) == read(o) for r, o in zip(ref, out)]) >= 0.95


def reading_cases():
    rng = np.random.default_rng(14)
    ref = _readings(rng, 48)
    steps = [_diverge(ref, i, clear=i >= 2, rng=rng) for i in range(8)]
    noisy = ref + rng.normal(0, 0.05, ref.shape).astype(np.float32)
    near, clear = noisy.copy(), noisy.copy()
    for i, (step, top, other) in enumerate(steps):
        # the runner-up wins, and the decoder, fed it, reads on differently: the rest of the sample's logits change
        went = noisy[i, step].copy()
        went[[top, other]] = went[[other, top]]
        rest = np.concatenate([went[None], _readings(rng, 1)[0, :STEPS - step - 1]])
        if i < 2:  # two near-ties go the other way
            near[i, step:] = rest
        clear[i, step:] = rest  # and six clear decisions with them
    return [("decoder: two near-tie tokens flip, 46 of 48 readings kept", ref, near),
            ("decoder: clear tokens flip, 40 of 48 readings kept", ref, clear)]


CASES = [(*case, task) for cases, task in ((pitch_cases, pitch_task), (classifier_cases, classifier_task),
                                           (embedding_cases, embedding_task), (segmentation_cases, segmentation_task),
                                           (reading_cases, reading_task))
         for case in cases()]
GOOD = {"pitch: int8 rounding, silent frames included", "classifier: near-ties flip, every confident decision kept",
        "embedding: int8 noise", "segmentation: int8 rounding, empty pages included",
        "decoder: two near-tie tokens flip, 46 of 48 readings kept"}
# A decoder's logits over steps cannot be told from a map over positions by their shape: the user says what they
# are (--output-kind), as for g2p-en's in the zoo.
KINDS = {"decoder": {"output_0": "sequence"}}


@pytest.mark.parametrize("name, ref, out, task", CASES, ids=[c[0] for c in CASES])
def test_the_int8_verdict_agrees_with_the_task(name, ref, out, task):
    good = task(ref, out)
    assert good == (name in GOOD), f"the corpus case is not what it says: task {'met' if good else 'missed'}"
    verdict = compare([ref], [out], INT8, kinds=KINDS.get(name.split(":")[0]))
    assert (verdict.status == "pass") == good, (name, verdict.reasons, verdict.metrics)


def test_the_classes_the_old_verdict_got_wrong():
    """What made the corpus: the plain per-sample cosine failed a good pitch tracker and a good segmentation net
    on their quiet samples, and passed a classifier whose confident decisions flipped."""
    plain_min = lambda r, o: float(np.min(_cosines(r.reshape(len(r), -1).astype(float), o.reshape(len(o), -1).astype(float))))  # noqa: E731
    (_, ref, good), *_ = pitch_cases()
    assert plain_min(ref, good) < INT8["cosine_min"] <= compare([ref], [good], INT8).metrics["output_0"]["cosine_min"]
    (_, ref, good), _ = segmentation_cases()
    assert plain_min(ref, good) < INT8["cosine_min"]
    _, (_, ref, swapped) = classifier_cases()
    m = compare([ref], [swapped], {}).metrics["output_0"]
    assert m["cosine"] > 0.99 and m["cosine_min"] > INT8["cosine_min"]  # the cosines alone pass it
    assert m["clear_top1_agreement"] < INT8["clear_top1_agreement"]
    # a decoder's readings: the worst sample's cosine failed one near-tie token flipped; 46 of 48 readings kept
    (_, ref, near), _ = reading_cases()
    assert METRICS["cosine_min"](ref, near) < INT8["cosine_min"] and reading_task(ref, near)
    m = compare([ref], [near], INT8, kinds=KINDS["decoder"]).metrics["output_0"]
    # 46 of 48 read alike; the cosines are of those 46
    assert m["sequence_agreement"] == 46 / 48 and m["cosine_min"] > 0.99 and m["step_top1_agreement"] < 1


def test_each_kind_is_read_from_the_values_and_shown():
    (_, ref, good), *_ = pitch_cases()
    verdict = compare([ref], [good], INT8)
    assert verdict.kinds["output_0"]["kind"] == "probabilities"
    assert "decision_agreement" in verdict.metrics["output_0"] and "clear_top1_agreement" not in verdict.metrics["output_0"]
    (_, ref, good), _ = classifier_cases()
    assert compare([ref], [good], INT8).kinds["output_0"]["kind"] == "scores"
