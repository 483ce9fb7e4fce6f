"""A .tflite opened for timing (edgekit.targets.latency): LiteRT's signature runner, as an app calls it."""

from __future__ import annotations

from edgekit.targets.latency import feed, given, input_shape, specs


def open_tflite(path: str, threads: int, inputs: dict, shapes: dict, rng):
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=path, num_threads=threads)
    signatures = interp.get_signature_list()
    if signatures:
        runner = interp.get_signature_runner(next(iter(signatures)))
        details = runner.get_input_details()
        feeds = {}
        for i, (key, d) in enumerate(details.items()):
            g = given(inputs, key, i, d["shape"])
            feeds[key] = feed(input_shape(list(d["shape"]), key, shapes, g), d["dtype"], g, rng)
        return (lambda: runner(**feeds)), specs(feeds)
    details = interp.get_input_details()
    for i, d in enumerate(details):
        shape = input_shape(list(d["shape_signature"]), d["name"], shapes, given(inputs, d["name"], i, d["shape"]))
        if tuple(shape) != tuple(d["shape"]):
            interp.resize_tensor_input(d["index"], shape)
    interp.allocate_tensors()
    feeds = {}
    for i, d in enumerate(interp.get_input_details()):
        g = given(inputs, d["name"], i, d["shape"])
        feeds[d["name"]] = feed(tuple(d["shape"]), d["dtype"], g, rng)
        interp.set_tensor(d["index"], feeds[d["name"]])
    return interp.invoke, specs(feeds)
