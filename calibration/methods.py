"""Calibration policy shared by the backends: how much of the calibration data `auto` holds out, and
the mixed-scale rule every backend applies (the methods: edgekit.core.quant.Method; which a backend has:
its converter's Capabilities)."""

from __future__ import annotations

HOLDOUT_FRACTION = 0.2

# A concatenation whose inputs' ranges differ by more than this keeps float, on every backend: at
# one shared int8 scale the smaller part would keep fewer than 256/16 levels (a detector's class
# scores beside pixel boxes).
MIXED_SCALE_RATIO = 16.0


def mixed_scale(peaks: list[float]) -> bool:
    """Whether inputs with these largest magnitudes are too different to share one int8 scale."""
    spans = [p for p in peaks if p > 0]
    return len(spans) > 1 and max(spans) / min(spans) > MIXED_SCALE_RATIO
