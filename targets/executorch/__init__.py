"""The executorch target (ExecuTorch .pte): this package is its edgekit.targets.TargetBackend. Importing it imports no
framework; each tool imports its runtime when called."""

from edgekit.targets.executorch.inspect import inspect as inspect_file
from edgekit.targets.executorch.latency import open_pte as open_timed
from edgekit.targets.executorch.runner import PteRunner as Runner
from edgekit.targets.executorch.runner import lm_entry_points
from edgekit.targets.executorch.runner import without_compiler as runtime_only

trace_layers = None  # a .pte's layers are traced by its converter on the source (Converter.trace_layers)

__all__ = ["Runner", "inspect_file", "lm_entry_points", "open_timed", "runtime_only", "trace_layers"]
