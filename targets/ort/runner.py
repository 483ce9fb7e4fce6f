"""ONNX Runtime (CPU) as the runner of .ort artifacts (ONNX Runtime's mobile format).

The session loads the file as ORT format and runs its graph exactly as saved, with no further
graph optimization: a minimal or mobile build of ONNX Runtime cannot optimize an .ort at load,
so neither does the verifier. Integer I/O parameters (`<model>.ort.io.json`) are applied as for .onnx.
"""

from __future__ import annotations

from edgekit.targets.onnx.runner import OnnxRunner


class OrtRunner(OnnxRunner):
    """OnnxRunner for an .ort: loaded as ORT format and run as saved, with no graph optimization at load."""

    ORT_FORMAT = True


def lm_entry_points(path: str, threads: int = 1) -> dict:
    """A decoder LM .ort's entry points, run as saved (edgekit.targets.onnx.runner.lm_entry_points)."""
    from edgekit.targets.onnx.runner import lm_entry_points as onnx_entry_points  # local: one reader, two formats

    return onnx_entry_points(path, threads, ort_format=True)
