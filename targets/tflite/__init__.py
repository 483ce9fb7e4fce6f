"""The tflite target (LiteRT / TFLite): this package is its edgekit.targets.TargetBackend. Importing it imports no
framework; each tool imports its runtime when called."""

from edgekit.targets.tflite.inspect import inspect as inspect_file
from edgekit.targets.tflite.latency import open_tflite as open_timed
from edgekit.targets.tflite.layers import trace as trace_layers
from edgekit.targets.tflite.runner import TfliteRunner as Runner
from edgekit.targets.tflite.runner import lm_entry_points

runtime_only = None  # its runtime imports nothing it does not need

__all__ = ["Runner", "inspect_file", "lm_entry_points", "open_timed", "runtime_only", "trace_layers"]
