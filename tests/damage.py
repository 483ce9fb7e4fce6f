"""Deliberate damage to real artifacts, for the tests of the CI gate (`edgekit check`).

Each function writes a damaged copy of an artifact with the format's own tools (onnx for .onnx,
the LiteRT flatbuffer utilities for .tflite) and leaves the original alone.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def perturb_onnx_weights(src: Path, dst: Path, layer: str, seed: int = 0) -> Path:
    """Replace the int8 weights of `layer` (a module path, e.g. features.2) with random int8 values."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(src))
    init = _initializer(model, f"{layer}.weight_quantized")
    w = numpy_helper.to_array(init)
    noise = np.random.default_rng(seed).integers(-127, 128, w.shape).astype(w.dtype)
    init.CopyFrom(numpy_helper.from_array(noise, init.name))
    onnx.save(model, str(dst))
    return dst


def swap_onnx_output_channels(src: Path, dst: Path, a: int, b: int) -> Path:
    """Swap output channels `a` and `b` of the last Gemm of a float .onnx (its weight rows and biases)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(src))  # loads the external .onnx.data too; saved back as one file
    gemm = [n for n in model.graph.node if n.op_type == "Gemm"][-1]
    for name in gemm.input[1:3]:
        init = _initializer(model, name)
        w = numpy_helper.to_array(init).copy()
        w[[a, b]] = w[[b, a]]  # Gemm here has transB=1: rows are output channels, as is the bias
        init.CopyFrom(numpy_helper.from_array(w, init.name))
    onnx.save(model, str(dst))
    return dst


def wrong_onnx_input_scale(src: Path, dst: Path, factor: float) -> Path:
    """Make the int8 .onnx dequantize its input with `factor` × the scale it was quantized with."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(src))
    graph_input = model.graph.input[0].name
    dq = next(n for n in model.graph.node
              if n.op_type == "DequantizeLinear" and n.input[0] == f"{graph_input}_QuantizeLinear_Output")
    scale = numpy_helper.to_array(_initializer(model, dq.input[1])) * np.float32(factor)
    name = dq.input[1] + "_wrong"
    model.graph.initializer.append(numpy_helper.from_array(scale.astype(np.float32), name))
    dq.input[1] = name
    onnx.save(model, str(dst))
    return dst


def perturb_tflite_weights(src: Path, dst: Path, layer: str, seed: int = 0) -> Path:
    """Replace the int8 weights of the op of `layer` (a module path, from litert-torch's tensor names)."""
    from ai_edge_litert import schema_py_generated as fb
    from ai_edge_litert.tools import flatbuffer_utils as fbu

    from edgekit.targets.tflite.layers import layer_name

    model = fbu.read_model(str(src))
    graph = model.subgraphs[0]
    weight_ops = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")
    ops = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}
    hit = 0
    for op in graph.operators:
        code = model.operatorCodes[op.opcodeIndex]
        if ops.get(max(code.builtinCode, code.deprecatedBuiltinCode)) not in weight_ops:
            continue
        weight = graph.tensors[op.inputs[1]]
        names = [t.name.decode() if isinstance(t.name, bytes) else t.name
                 for t in (graph.tensors[op.outputs[0]], weight)]
        if layer_name(names, "") != layer or weight.type != fb.TensorType.INT8:
            continue
        buf = model.buffers[weight.buffer]
        buf.data = np.random.default_rng(seed).integers(0, 256, len(buf.data)).astype(np.uint8)
        hit += 1
    if hit != 1:
        raise ValueError(f"{src}: found {hit} int8 weight tensors of {layer}, expected 1")
    fbu.write_model(model, str(dst))
    return dst


def _initializer(model, name: str):
    for init in model.graph.initializer:
        if init.name == name:
            return init
    raise KeyError(f"no initializer {name!r}")
