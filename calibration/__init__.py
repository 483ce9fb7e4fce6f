"""Calibration and evaluation data sources, validated against a model's signature."""

from edgekit.calibration.data import SampleSet, load_samples

__all__ = ["SampleSet", "load_samples"]
