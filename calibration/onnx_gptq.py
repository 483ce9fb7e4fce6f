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

Each weight row keeps its smallest and its largest value as they were, so the quantizer computes the scale and
zero point it would have computed from the original weights, and its round-to-nearest of the stored weights
returns GPTQ's levels exactly. Only the weights change; the float model the artifact is judged against keeps
its own.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

DAMP = 0.01  # of the Hessian's mean diagonal, added to it (as edgekit.calibration.lm_gptq)
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


def round_layers(model: Path, names: set[str], feeds, work_dir: Path, grid_of) -> list[str]:
    """Round in place, by GPTQ on the calibration `feeds` (an iterable of {input name: array}; the first
    MAX_SAMPLES), the weights of the nodes of `model` named in `names` that it can (`_roundable`), each onto the
    grid it will be stored on: `grid_of(node name)` gives (onnxruntime's QuantType, per channel or not). Each
    layer's Hessian is taken from the float model's inputs to it. Returns the names of the layers rounded."""
    import onnx
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
        rounded = gptq(weights[n.name], hessians[n.name] / max(count, 1), *grid_of(n.name))
        w = inits[n.input[1]]
        w.CopyFrom(numpy_helper.from_array(_from_rows(n, rounded, numpy_helper.to_array(w)).astype(np.float32), w.name))
    onnx.save(m, str(model))
    return [n.name for n in layers]


def gptq(weight: np.ndarray, H: np.ndarray, weight_type, per_channel: bool) -> np.ndarray:
    """`weight` (out × in) rounded by GPTQ against input Hessian `H` (in × in) onto onnxruntime's grid for
    `weight_type` (its scale and zero point per row, or one for the whole tensor, from the weights' extremes):
    the values to store. Every row's smallest and largest value is stored as it is, so the quantizer computes
    the same grid again from the result, and rounds each value to GPTQ's level."""
    import onnx
    from onnxruntime.quantization.quant_utils import compute_data_quant_params, get_qmin_qmax_for_qType

    qtype = weight_type.tensor_type
    symmetric = qtype == onnx.TensorProto.INT8  # onnxruntime's `is_weight_symmetric`: signed weights are symmetric
    qmin, qmax = (float(v) for v in get_qmin_qmax_for_qType(qtype, symmetric=symmetric))
    rows = weight if per_channel else weight.reshape(1, -1)
    params = [compute_data_quant_params(r.astype(np.float32), qtype, symmetric) for r in rows]
    zero = np.array([float(z) for z, _ in params])
    scale = np.array([float(s) for _, s in params])
    if not per_channel:
        zero, scale = np.full(len(weight), zero[0]), np.full(len(weight), scale[0])
    scale[scale == 0] = 1.0
    W = weight.astype(np.float64).copy()
    fixed = np.zeros_like(W, dtype=bool)  # the values that set each row's grid: stored as they are
    fixed[np.arange(len(W)), W.argmax(1)] = fixed[np.arange(len(W)), W.argmin(1)] = True
    dead = np.diag(H) == 0
    H = H.copy()
    H[dead, dead] = 1
    H += DAMP * np.mean(np.diag(H)) * np.eye(len(H))
    Hinv = np.linalg.cholesky(np.linalg.inv(H)).T  # upper Cholesky factor of H⁻¹
    out = np.empty_like(W)
    for i in range(W.shape[1]):
        # a value that sets the grid is stored as it is, and the quantizer rounds it as it would the original
        levels = np.clip(np.round(np.where(fixed[:, i], weight[:, i], W[:, i]) / scale) + zero, qmin, qmax)
        err = (W[:, i] - (levels - zero) * scale) / Hinv[i, i]
        out[:, i] = np.where(fixed[:, i], weight[:, i], (levels - zero) * scale)
        W[:, i:] -= np.outer(err, Hinv[i, i:])
    return out


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
