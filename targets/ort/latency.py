"""An .ort opened for timing (edgekit.targets.latency): an ONNX Runtime session of the ORT format."""

from __future__ import annotations

from edgekit.targets.onnx.latency import open_onnx


def open_ort(path: str, threads: int, inputs: dict, shapes: dict, rng):
    return open_onnx(path, threads, inputs, shapes, rng, ort_format=True)
