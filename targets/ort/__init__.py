"""The ort target (ONNX Runtime's ORT format): this package is its edgekit.targets.TargetBackend. Importing it imports
no framework; each tool imports its runtime when called."""

from edgekit.targets.ort.inspect import inspect as inspect_file
from edgekit.targets.ort.latency import open_ort as open_timed
from edgekit.targets.ort.runner import OrtRunner as Runner
from edgekit.targets.ort.runner import lm_entry_points

trace_layers = None  # an .ort's layers are its .onnx's: trace those
runtime_only = None  # its runtime imports nothing it does not need

__all__ = ["Runner", "inspect_file", "lm_entry_points", "open_timed", "runtime_only", "trace_layers"]
