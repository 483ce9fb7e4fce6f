"""A .ptl opened for timing (edgekit.targets.latency): the lite interpreter, on the given input shapes."""

from __future__ import annotations

import numpy as np

from edgekit.targets.latency import feed, given, specs
from edgekit.targets.ptl.runner import ENGINE


def open_ptl(path: str, threads: int, inputs: dict, shapes: dict, rng):
    import torch
    from torch.jit.mobile import _load_for_lite_interpreter

    if not shapes:
        raise ValueError("a .ptl file does not record its input shapes: pass --input-shape NAME=1,3,224,224 "
                         "(one per input, in call order)")
    torch.set_num_threads(threads)
    if ENGINE in torch.backends.quantized.supported_engines:
        torch.backends.quantized.engine = ENGINE
    module = _load_for_lite_interpreter(path, map_location="cpu")
    feeds = {}
    for i, (name, shape) in enumerate(shapes.items()):
        feeds[name] = feed(shape, np.float32, given(inputs, name, i, shape), rng)
    args = [torch.from_numpy(x) for x in feeds.values()]

    def call():
        with torch.no_grad():
            return module(*args)

    return call, specs(feeds)
