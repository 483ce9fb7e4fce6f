"""The onnx target (ONNX): this package is its edgekit.targets.TargetBackend. Importing it imports no framework; each
tool imports its runtime when called."""

from edgekit.targets.onnx.inspect import inspect as inspect_file
from edgekit.targets.onnx.latency import open_onnx as open_timed
from edgekit.targets.onnx.layers import trace as trace_layers
from edgekit.targets.onnx.runner import OnnxRunner as Runner
from edgekit.targets.onnx.runner import lm_entry_points

runtime_only = None  # its runtime imports nothing it does not need

__all__ = ["Runner", "inspect_file", "lm_entry_points", "open_timed", "runtime_only", "trace_layers"]
