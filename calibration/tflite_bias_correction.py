"""Bias correction for TFLiteConverter's int8 models (the tflite target from TensorFlow/Keras).

The correction of edgekit.calibration.bias_correction and onnx_bias_correction, on a .tflite file: for
every CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED with int8 weights and an int32 bias, the mean shift
that rounding its weights puts on each output channel — Σ (dequantized weight − float weight) × the mean
of the input channel it multiplies, the input as the int8 model computes it on the calibration samples —
is taken off the int32 bias, in the bias's own scale. Rounding a depthwise filter of nine weights per
channel moves that channel's mean output, and the error adds up through a deep network; the correction
removes the mean part of it without touching the weights.

The float weights come from the float .tflite converted from the same SavedModel (batch normalisation
folded the same way), matched by the output tensor's name. A layer whose name, shape or input does not
match is left as it is.
"""

from __future__ import annotations

import collections

import numpy as np

from edgekit.core import io_params

MAX_SAMPLES = 32  # as edgekit.calibration.bias_correction
CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED = 3, 4, 9  # LiteRT builtin operator codes


def correct(quantized: bytes, float_model: bytes, samples, input_names) -> tuple[bytes, int]:
    """The int8 model `quantized` with corrected biases, and how many layers were corrected; `samples` is
    the calibration SampleSet (its first MAX_SAMPLES are used), `input_names` its inputs in model order."""
    from ai_edge_litert import schema_py_generated as fb
    from ai_edge_litert.interpreter import Interpreter
    from ai_edge_litert.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model_from_bytearray(bytearray(quantized))
    reference = flatbuffer_utils.read_model_from_bytearray(bytearray(float_model))
    graph = model.subgraphs[0]
    float_weights = _float_weights(reference)
    layers = []  # (op code, input tensor, weight tensor, bias tensor, float weights)
    for op in graph.operators:
        code = _builtin(model, op)
        if code not in (CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED) or len(op.inputs) < 3 or op.inputs[2] < 0:
            continue
        x, w, b = (graph.tensors[i] for i in op.inputs[:3])
        weights = float_weights.get(_name(graph.tensors[op.outputs[0]]))
        if (w.type != fb.TensorType.INT8 or b.type != fb.TensorType.INT32 or x.quantization is None
                or weights is None or weights.shape != tuple(w.shape)):
            continue
        layers.append((code, op.inputs[0], w, b, weights))
    if not layers:
        return quantized, 0

    interp = Interpreter(model_content=bytes(quantized), experimental_preserve_all_tensors=True, num_threads=1)
    interp.allocate_tensors()
    details = interp.get_input_details()
    sums: dict[int, np.ndarray] = {}
    count = min(len(samples), MAX_SAMPLES)
    for i in range(count):
        for d, name in zip(details, input_names):
            interp.set_tensor(d["index"], _as_input(samples.inputs[name][i], d))
        interp.invoke()
        for _, x, *_rest in layers:
            t = graph.tensors[x]
            values = (interp.get_tensor(x).astype(np.float64) - _zero_point(t)) * _scale(t)
            mean = values.reshape(-1, values.shape[-1]).mean(axis=0)
            sums[x] = sums.get(x, 0) + mean

    users = collections.Counter(t.buffer for g in model.subgraphs for t in g.tensors)
    corrected = 0
    for code, x, w, b, weights in layers:
        mean = sums[x] / count
        shift = _shift(code, _dequantized(model, w), weights, mean)
        if shift is None:
            continue
        scale = np.asarray(b.quantization.scale, dtype=np.float64)
        bias = np.frombuffer(bytes(model.buffers[b.buffer].data), dtype="<i4").astype(np.int64)
        bias = np.clip(bias - np.round(shift / scale), np.iinfo(np.int32).min, np.iinfo(np.int32).max)
        if users[b.buffer] > 1:  # the converter stores equal constants once (zero biases): this one gets its own
            users[b.buffer] -= 1
            model.buffers.append(fb.BufferT())
            b.buffer = len(model.buffers) - 1
        model.buffers[b.buffer].data = np.frombuffer(bias.astype("<i4").tobytes(), dtype=np.uint8)
        corrected += 1
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model)), corrected


def _shift(code: int, quantized: np.ndarray, weights: np.ndarray, mean: np.ndarray) -> np.ndarray | None:
    """Each output channel's mean error from rounding the weights, for an input whose channels average
    `mean`; None when the layer's input channels do not match."""
    delta = quantized - weights
    if code == FULLY_CONNECTED:  # [out, in]
        return delta @ mean if delta.shape[1] == mean.size else None
    if code == CONV_2D:  # [out, kh, kw, in]
        return np.einsum("ohwi,i->o", delta, mean) if delta.shape[3] == mean.size else None
    channels = delta.shape[3]  # depthwise [1, kh, kw, in × multiplier]
    if channels % mean.size:
        return None
    return delta.sum(axis=(0, 1, 2)) * np.repeat(mean, channels // mean.size)


def _float_weights(model) -> dict[str, np.ndarray]:
    """Output tensor name → the float32 weights of that conv / depthwise / fully-connected op."""
    graph = model.subgraphs[0]
    out = {}
    for op in graph.operators:
        if _builtin(model, op) not in (CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED) or len(op.inputs) < 2:
            continue
        w = graph.tensors[op.inputs[1]]
        data = model.buffers[w.buffer].data
        if data is None or len(data) != 4 * int(np.prod(w.shape)):
            continue  # not a float32 constant (computed or shared through a DEQUANTIZE)
        out[_name(graph.tensors[op.outputs[0]])] = np.frombuffer(bytes(data), dtype="<f4").reshape(w.shape)
    return out


def _dequantized(model, tensor) -> np.ndarray:
    q = np.frombuffer(bytes(model.buffers[tensor.buffer].data), dtype=np.int8).reshape(tensor.shape).astype(np.float64)
    scale = np.asarray(tensor.quantization.scale, dtype=np.float64)
    axis = tensor.quantization.quantizedDimension or 0
    shape = [1] * q.ndim
    shape[axis] = -1
    return q * (scale.reshape(shape) if scale.size > 1 else scale)


def _as_input(value, detail) -> np.ndarray:
    """A calibration sample as the interpreter takes it (quantized with the input's own parameters under --int8-io)."""
    x = np.array(value, copy=True).reshape(detail["shape"])
    if np.issubdtype(detail["dtype"], np.integer) and not np.issubdtype(x.dtype, np.integer):
        return io_params.quantize(x, *detail["quantization"], detail["dtype"])
    return x.astype(detail["dtype"])


def _builtin(model, op) -> int:
    code = model.operatorCodes[op.opcodeIndex]
    return max(code.builtinCode, code.deprecatedBuiltinCode)


def _name(tensor) -> str:
    return tensor.name.decode() if isinstance(tensor.name, bytes) else str(tensor.name)


def _scale(tensor) -> float:
    return float(tensor.quantization.scale[0])


def _zero_point(tensor) -> int:
    return int(tensor.quantization.zeroPoint[0])
