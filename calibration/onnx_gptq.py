"""GPTQ rounding (Frantar et al., 2022) of the layers an ONNX model keeps at float arithmetic on int8 weights
(the onnx and ort targets): a level path from a loud-and-quiet input (edgekit.converters.onnx_quantize.level_path).

Such a layer reads its float inputs, whose neighbours are strongly correlated (an audio frame's 256 samples),
and in a front end its weights are often a fixed transform: Silero VAD's STFT is a Conv over 258 windowed
sinusoids. Rounded to nearest, each weight's error is independent noise, and a loud band leaks through it into
the quiet bins the rest of the model listens to (that one layer's int8 weights alone moved a speech probability
by 0.099). GPTQ rounds one input column at a time and moves each column's error onto the columns not yet
rounded, weighted by the inverse Hessian of the layer's inputs on the calibration samples (H = Σ x xᵀ / N), so
that the layer's outputs on inputs like those move least (0.014 there). Its error model is a layer that sees
those float inputs: on layers quantized with their inputs (the first convs of the zoo's image models) it was
tried and left, the results mixed (PP-OCR's recogniser read 0.708 → 0.646 of its lines as its source does; fer's
top-1 0.958 → 0.979; MTCNN's R-Net and O-Net cosine 0.0009 and 0.0013 lower).

Each weight row keeps its largest magnitude as it was, so the quantizer computes the scale it would have
computed from the original weights, and its round-to-nearest of the stored weights returns GPTQ's levels
exactly (the rounding is the decoder LMs', edgekit.calibration.lm_gptq, on the same grid). Only the weights change; the float model the artifact is judged against keeps
its own.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgekit.calibration.lm_gptq import gptq_round

MAX_SAMPLES = 64  # calibration samples whose inputs make each Hessian


def _roundable(graph) -> list:
    """The Conv (one group, 1-D or 2-D, explicit pads), MatMul and Gemm nodes whose weight is an initializer."""
    import onnx

    dims = {i.name: len(i.dims) for i in graph.initializer}
    out = []
    for node in graph.node:
        if len(node.input) < 2 or node.input[1] not in dims or node.input[0] in dims:
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "Conv" and attrs.get("group", 1) == 1 and dims[node.input[1]] in (3, 4) \
                and attrs.get("auto_pad", b"NOTSET") in (b"NOTSET", "NOTSET"):
            out.append(node)
        elif node.op_type in ("MatMul", "Gemm") and not attrs.get("transA", 0):
            out.append(node)
    return out


def round_layers(model: Path, names: set[str], feeds, work_dir: Path) -> list[str]:
    """Round in place, by GPTQ on the calibration `feeds` (an iterable of {input name: array}; the first
    MAX_SAMPLES), the weights of the nodes of `model` named in `names` that it can (`_roundable`), onto the
    symmetric int8 grid per output channel they are stored on (max|w| / 127, levels ±127: `int8_weights_only`,
    and onnxruntime's QInt8 per channel), by edgekit.calibration.lm_gptq's GPTQ. Each layer's Hessian is taken
    from the float model's inputs to it. Returns the names of the layers rounded."""
    import onnx
    import torch
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    m = onnx.load(str(model))
    layers = [n for n in _roundable(m.graph) if n.name in names]
    if not layers:
        return []
    reads = sorted({n.input[0] for n in layers})
    session, path = None, work_dir / "gptq-inputs.onnx"
    if set(reads) - {i.name for i in m.graph.input}:  # some layer reads a computed tensor: run the model to it
        probe = onnx.ModelProto()
        probe.CopyFrom(m)
        probe.graph.output.extend(helper.make_tensor_value_info(t, onnx.TensorProto.FLOAT, None) for t in reads)
        onnx.save(probe, str(path))
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    inits = {i.name: i for i in m.graph.initializer}
    weights = {n.name: _as_rows(n, numpy_helper.to_array(inits[n.input[1]])) for n in layers}
    hessians = {n.name: np.zeros((weights[n.name].shape[1],) * 2) for n in layers}
    count = 0
    for feed in feeds:
        if count >= MAX_SAMPLES:
            break
        values = dict(zip(reads, session.run(reads, feed))) if session is not None else feed
        for n in layers:
            x = _columns(n, values[n.input[0]], tuple(inits[n.input[1]].dims[2:]))
            hessians[n.name] += x.T @ x / max(len(x), 1)
        count += 1
    del session
    path.unlink(missing_ok=True)
    for n in layers:
        weight = torch.from_numpy(weights[n.name].astype(np.float64))
        rounded = gptq_round(weight, torch.from_numpy(hessians[n.name] / max(count, 1)), _grid(weight)).double().numpy()
        w = inits[n.input[1]]
        w.CopyFrom(numpy_helper.from_array(_from_rows(n, rounded, numpy_helper.to_array(w)).astype(np.float32), w.name))
    onnx.save(m, str(model))
    return [n.name for n in layers]


def _grid(weight) -> dict:
    """The symmetric int8 grid per output channel of `weight` (out × in) in `gptq_round`'s terms (as
    edgekit.converters.lm_grids gives LiteRT's int8): scale max|w| / 127, levels ±127, each row's largest
    magnitude stored as it is."""
    import torch

    amax, ext = weight.abs().max(dim=1, keepdim=True)
    s = torch.clamp(amax, min=1e-9) / 127.0
    return {"s": s, "d": s, "kmin": -127, "kmax": 127, "ext": ext, "group": weight.shape[1],
            "ext_k": torch.round(weight.gather(1, ext) / s)}


def _as_rows(node, w: np.ndarray) -> np.ndarray:
    """A layer's weight as out × in, its columns in the order `_columns` gives the inputs."""
    if node.op_type == "Conv":
        return w.reshape(w.shape[0], -1)
    trans_b = node.op_type == "Gemm" and any(a.name == "transB" and a.i for a in node.attribute)
    return w if trans_b else w.T


def _from_rows(node, rows: np.ndarray, like: np.ndarray) -> np.ndarray:
    """`_as_rows` undone: the weight in its initializer's layout."""
    if node.op_type == "Conv":
        return rows.reshape(like.shape)
    trans_b = node.op_type == "Gemm" and any(a.name == "transB" and a.i for a in node.attribute)
    return rows if trans_b else rows.T


def _columns(node, x: np.ndarray, kernel: tuple[int, ...]) -> np.ndarray:
    """The inputs each output of `node` reads from its data input `x`, one row per output position: the
    patches a Conv's `kernel` covers (its pads, strides and dilations applied), or a MatMul's or Gemm's rows."""
    import onnx

    if node.op_type != "Conv":
        return x.reshape(-1, x.shape[-1]).astype(np.float64)
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    dims = len(kernel)
    pads = list(attrs.get("pads", [0] * 2 * dims))
    strides = list(attrs.get("strides", [1] * dims))
    dilations = list(attrs.get("dilations", [1] * dims))
    x = np.pad(x, [(0, 0), (0, 0), *[(pads[d], pads[d + dims]) for d in range(dims)]])
    span = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    windows = np.lib.stride_tricks.sliding_window_view(x, span, axis=tuple(range(2, 2 + dims)))
    index = (slice(None), slice(None), *[slice(None, None, s) for s in strides], *[slice(None, None, d) for d in dilations])
    windows = windows[index]  # N, C, out positions…, kernel…
    positions = windows.shape[2:2 + dims]
    order = (0, *range(2, 2 + dims), 1, *range(2 + dims, 2 + 2 * dims))  # N, positions…, C, kernel…
    return windows.transpose(order).reshape(x.shape[0] * int(np.prod(positions)), -1).astype(np.float64)
