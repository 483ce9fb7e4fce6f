"""Calibration policy shared by the backends: how much of the calibration data `auto` holds out, and
the mixed-scale and level rules every backend applies (the methods: edgekit.core.quant.Method; which a backend has:
its converter's Capabilities)."""

from __future__ import annotations

import numpy as np

HOLDOUT_FRACTION = 0.2

# A concatenation whose inputs' ranges differ by more than this keeps float, on every backend: at
# one shared int8 scale the smaller part would keep fewer than 256/16 levels (a detector's class
# scores beside pixel boxes).
MIXED_SCALE_RATIO = 16.0


def mixed_scale(peaks: list[float]) -> bool:
    """Whether inputs with these largest magnitudes are too different to share one int8 scale."""
    spans = [p for p in peaks if p > 0]
    return len(spans) > 1 and max(spans) / min(spans) > MIXED_SCALE_RATIO


LEVEL_SPREAD_DB = 30.0  # quietest to loudest calibration sample of an input, beyond which int8 floors the quiet
# (int8 spans 48 dB from one step to full scale: a sample 30 dB down is left 4 bits)


def spread_db(samples) -> float:
    """How far below the loudest of these samples (N × …) the quietest 5% are, in dB by RMS; 0 for integer
    inputs. Raw audio spreads widely (silence and speech: Silero VAD's chunks, 47 dB); images and normalized
    features do not (their samples are within a few dB of each other)."""
    x = np.asarray(samples)
    if x.dtype.kind != "f" or len(x) < 2:
        return 0.0
    rms = np.sqrt(np.mean(np.square(x.reshape(len(x), -1), dtype=np.float64), axis=1))
    rms = rms[rms > 0]
    return float(20 * np.log10(rms.max() / np.percentile(rms, 5))) if len(rms) > 1 else 0.0


LEVEL_WHY = ("on the level path of input '{inputs}', whose calibration samples are {db:.0f} dB apart: {how} up to "
             "the first op that compresses a level; one int8 scale set by the loud samples rounds the quiet ones to zero")
ON_INT8_WEIGHTS = "float arithmetic on int8 weights"
