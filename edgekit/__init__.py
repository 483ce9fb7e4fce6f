"""edgekit: PyTorch models to LiteRT/TFLite, ExecuTorch and ONNX, each proven in its own runtime.

Importing edgekit loads no framework; torch, litert, executorch and onnxruntime are imported
by the converter or runner that needs them.
"""

from edgekit.core.artifact import ModelArtifact
from edgekit.core.errors import BadInput, ConversionFailed, EdgekitError, MissingDependency
from edgekit.core.formats import detect
from edgekit.core.signature import Signature, TensorSpec

__version__ = "0.1.0"
__all__ = [
    "BadInput",
    "ConversionFailed",
    "EdgekitError",
    "MissingDependency",
    "ModelArtifact",
    "Signature",
    "TensorSpec",
    "convert",
    "detect",
]


def convert(source: str, targets=("all",), **options):
    """Convert `source` to `targets`, verify each artifact in its runtime; see ConvertRequest."""
    from edgekit.engine.pipeline import ConvertRequest, convert as run  # local: keeps the engine (~0.4 s) off `import edgekit`
    from edgekit.sources.loading import SourceOptions  # local: keeps the sources off `import edgekit`, which every command runs

    source_keys = {"trust_pickle", "model_class", "input_shapes", "example_inputs", "trust_model_code"}
    src_opts = SourceOptions(**{k: options.pop(k) for k in list(options) if k in source_keys})
    return run(ConvertRequest(source, tuple(targets), source_options=src_opts, **options))
