"""ONNX Runtime (CPU) as the runner of .ort artifacts (ONNX Runtime's mobile format).

The session loads the file as ORT format and runs its graph exactly as saved, with no further
graph optimization: a minimal or mobile build of ONNX Runtime cannot optimize an .ort at load,
so neither does the verifier. Integer I/O parameters (`<model>.ort.io.json`) are applied as for .onnx.
"""

from __future__ import annotations

from edgekit.targets.onnx import OnnxRunner


class OrtRunner(OnnxRunner):
    def configure(self, opts) -> None:
        import onnxruntime as ort

        opts.add_session_config_entry("session.load_model_format", "ORT")
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
