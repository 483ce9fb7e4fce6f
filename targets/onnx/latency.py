"""An .onnx opened for timing (edgekit.targets.latency): an ONNX Runtime session, as the verifier opens it."""

from __future__ import annotations

from edgekit.targets.latency import feed, given, input_shape, specs
from edgekit.targets.onnx.runner import ORT_TYPES
from edgekit.targets.onnx.runner import session as onnx_session


def open_onnx(path: str, threads: int, inputs: dict, shapes: dict, rng, *, ort_format: bool = False):
    session = onnx_session(path, threads=threads, ort_format=ort_format)  # as the verifier runs it
    feeds = {}
    for i, x in enumerate(session.get_inputs()):
        if x.type not in ORT_TYPES:
            raise ValueError(f"input {x.name} has type {x.type}, which edgekit cannot make inputs for")
        g = given(inputs, x.name, i, x.shape)
        feeds[x.name] = feed(input_shape(list(x.shape), x.name, shapes, g), ORT_TYPES[x.type], g, rng)
    return (lambda: session.run(None, feeds)), specs(feeds)
