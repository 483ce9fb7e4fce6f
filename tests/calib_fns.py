"""Calibration functions for tests (import specs tests.calib_fns:NAME)."""

import numpy as np

from tests.conftest import DIGITS_CALIB


def digit_tuples():
    with np.load(DIGITS_CALIB) as data:
        x = data["x"][:30]
    return ((x[i : i + 1].copy(),) for i in range(len(x)))


def wrong_arity():
    return [(np.zeros((1, 1, 8, 8), np.float32), np.zeros(3))]


def broken():
    return [1 / 0]
