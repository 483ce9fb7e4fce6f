"""The ptl target (PyTorch Mobile's .ptl, legacy): this package is its edgekit.targets.TargetBackend. Importing it
imports no framework; each tool imports its runtime when called."""

from edgekit.targets.ptl.inspect import inspect as inspect_file
from edgekit.targets.ptl.latency import open_ptl as open_timed
from edgekit.targets.ptl.runner import PtlRunner as Runner

trace_layers = None  # no per-layer tracer for the legacy format
runtime_only = None  # its runtime imports nothing it does not need

lm_entry_points = None  # a decoder LM is not converted to .ptl

__all__ = ["Runner", "inspect_file", "lm_entry_points", "open_timed", "runtime_only", "trace_layers"]
