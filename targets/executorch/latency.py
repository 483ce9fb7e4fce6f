"""A .pte opened for timing (edgekit.targets.latency): its forward method in the ExecuTorch runtime."""

from __future__ import annotations

import numpy as np

from edgekit.targets.latency import feed, given, input_shape, specs

# ExecuTorch's ScalarType codes (c10) of the dtypes an input can have.
PTE_DTYPES = {0: np.uint8, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.int64, 5: np.float16, 6: np.float32,
              7: np.float64, 11: np.bool_}


def open_pte(path: str, threads: int, inputs: dict, shapes: dict, rng):
    import torch
    from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool
    from executorch.runtime import Runtime

    _unsafe_reset_threadpool(threads)  # XNNPACK's threads; the pool is otherwise sized to the machine
    program = Runtime.get().load_program(path)
    method = program.load_method("forward")
    meta = method.metadata
    feeds = {}
    for i in range(meta.num_inputs()):
        info = meta.input_tensor_meta(i)
        name = f"input_{i}"
        if info.dtype() not in PTE_DTYPES:
            raise ValueError(f"input {i} has ExecuTorch dtype code {info.dtype()}, which edgekit cannot make inputs for")
        g = given(inputs, name, i, info.sizes())
        feeds[name] = feed(input_shape(list(info.sizes()), name, shapes, g), PTE_DTYPES[info.dtype()], g, rng)
    args = [torch.from_numpy(x) for x in feeds.values()]
    return (lambda: method.execute(args)), specs(feeds)
