"""A float .tflite to static int8 with ai-edge-quantizer, calibrated on edgekit's samples: the tf → tflite
edge's int8 (edgekit.converters.tf_to_tflite), so a TensorFlow/Keras model gets the recipe's tools that
TFLiteConverter's own calibrator lacks.

TFLiteConverter takes each tensor's extremes over every sample and nothing else: tempocnn's Keras CNN came out
at cosine 0.75 on its evaluation samples, and no layer could be kept at int16 activations. Here one pass of
LiteRT's interpreter over the calibration samples, every tensor kept, records each tensor's extremes per
sample; `minmax` takes the extremes over all samples, `mean-minmax` the means of the per-sample extremes
(tempocnn: 0.96). Layers the spec keeps float are left out of quantization, layers kept at int16 get int16
activations with int8 weights (a16w8), `int16_activations` gives every layer that.

What ai-edge-quantizer leaves that edgekit's artifacts cannot have, and what it cannot take:
- a model output that is also read inside the graph (basic-pitch's contour feeds its note head) keeps its
  signature entry on the int8 tensor, not on the float one dequantized for the graph's output (`_mended`);
- an op output nothing reads stays float beside its int8 siblings, which no kernel runs (`_mended`);
- graph inputs and outputs come out int8 (edgekit's default is float I/O: `tflite_io.float_io`);
- a loop body's tensors (a WHILE subgraph) are gone after a run: a model with more than one subgraph is refused
  here (`ControlFlow`; edgekit exports Keras recurrent layers unrolled, so only SavedModels with loops meet it).
"""

from __future__ import annotations

import copy
import re

import numpy as np

from edgekit.calibration.tflite_io import point_signatures
from edgekit.core.quant import Method
from edgekit.targets.tflite.runner import TfliteRunner

STATISTICS = "tflite statistics"  # ConvertContext.reuse's key for the one calibration pass


# ops after which a batch norm cannot be folded into a conv: activations and pools
_AFTER_ACTIVATION = ("RELU", "RELU6", "LEAKY_RELU", "ELU", "LOGISTIC", "TANH", "HARD_SWISH", "PRELU",
                     "AVERAGE_POOL_2D", "MAX_POOL_2D", "MEAN")


class ControlFlow(Exception):
    """The float model has subgraphs besides its main one (a WHILE or IF body)."""


def statistics(float_model: bytes, samples, signature) -> dict[str, dict]:
    """Each activation's extremes over `samples` (a SampleSet with the inputs of `signature`, the source's), from
    one pass of LiteRT's interpreter with every tensor kept (its built-in kernels: XNNPACK keeps nothing inside
    its partitions, and ai-edge-quantizer's own calibrator, which runs it, failed on chars2vec's unrolled LSTM):
    {tensor name: {"min", "max": over all samples; "sum_min", "sum_max", "n": for the means of the per-sample
    extremes}}. Values beyond ±3e38 (a -inf padding constant) are left out, as ai-edge-quantizer's calibrator
    leaves them. Raises ControlFlow for a model with more than one subgraph."""
    from ai_edge_quantizer.utils import tfl_flatbuffer_utils as tfl

    model = tfl.read_model(float_model)
    if len(model.subgraphs) > 1:
        raise ControlFlow()
    constant = {i for i, t in enumerate(model.subgraphs[0].tensors) if tfl.get_tensor_data(t, model.buffers) is not None}
    runner = TfliteRunner(float_model, signature, keep_intermediates=True)
    interpreter = runner.interp
    tensors = [d for d in interpreter.get_tensor_details() if d["name"] and d["index"] not in constant and all(d["shape"])]
    stats: dict[str, dict] = {}
    for i in range(len(samples)):
        runner.run({name: samples.inputs[name][i] for name in signature.input_names})
        for d in tensors:
            values = interpreter.get_tensor(d["index"])
            kept = values[np.abs(values) < 3e38] if values.dtype.kind == "f" else values
            if kept.size == 0:
                continue
            low, high = np.full((1,) * values.ndim, kept.min(), np.float32), np.full((1,) * values.ndim, kept.max(), np.float32)
            s = stats.get(d["name"])
            stats[d["name"]] = {"min": low, "max": high, "sum_min": low, "sum_max": high, "n": 1} if s is None else {
                "min": np.minimum(s["min"], low), "max": np.maximum(s["max"], high),
                "sum_min": s["sum_min"] + low, "sum_max": s["sum_max"] + high, "n": s["n"] + 1}
    return stats


def ranges(stats: dict[str, dict], method: str) -> dict[str, dict]:
    """ai-edge-quantizer's calibration result ({tensor: {"min", "max"}}) for `method` from `statistics`. A tensor
    with the same value on every sample (chars2vec's padded steps: their input projections are zero throughout)
    would get a zero scale, on which XNNPACK crashes the process; its range is widened around that value to half
    the median width of the model's other ranges."""
    if method == Method.MEAN_MINMAX:
        found = {t: (s["sum_min"] / s["n"], s["sum_max"] / s["n"]) for t, s in stats.items()}
    elif method == Method.MINMAX:
        found = {t: (s["min"], s["max"]) for t, s in stats.items()}
    else:
        raise ValueError(f"no {method} calibration on this edge")
    widths = [float(np.max(high - low)) for low, high in found.values()]
    half = float(np.median([w for w in widths if w > 0] or [2.0])) / 4
    return {t: {"min": low, "max": high} if w > 0 else {"min": low - half, "max": high + half}
            for (t, (low, high)), w in zip(found.items(), widths)}


def quantize(float_model: bytes, calibrated: dict[str, dict], *, float_scopes=(), int16_scopes=(),
             int16_activations: bool = False) -> bytes:
    """`float_model` at static int8 (per-channel int8 weights, per-tensor asymmetric int8 activations) with
    `calibrated` ranges; the ops whose scope (ai-edge-quantizer's: their output tensor names) is one of
    `float_scopes` stay float, those in `int16_scopes` (or every op, `int16_activations`) get int16 activations.
    Integer inputs and outputs (`_mended`)."""
    from ai_edge_quantizer import algorithm_manager, qtyping, recipe
    from ai_edge_quantizer import quantizer as aeq

    quantizer = aeq.Quantizer(float_model)
    quantizer.load_quantization_recipe(recipe.static_wi8_ai16() if int16_activations else recipe.static_wi8_ai8())
    every = qtyping.TFLOperationName.ALL_SUPPORTED
    for scope in int16_scopes:
        quantizer.add_static_config(f"^{re.escape(scope)}$", every, 16, 8)
    for scope in float_scopes:
        quantizer.update_quantization_recipe(f"^{re.escape(scope)}$", every,
                                             algorithm_key=algorithm_manager.AlgorithmName.NO_QUANTIZE)
    model = quantizer.quantize(calibrated, enable_progress_report=False).quantized_model
    return _mended(bytes(model))


def op_scopes(float_model: bytes) -> list[str]:
    """The scope of every op of the main subgraph, as ai-edge-quantizer matches its recipes against them."""
    from ai_edge_quantizer.utils import tfl_flatbuffer_utils as tfl

    model = tfl.read_model(float_model)
    tensors = model.subgraphs[0].tensors
    return [tfl.get_op_scope(op, tensors) for op in model.subgraphs[0].operators]


def unfolded_affines(float_model: bytes) -> list[str]:
    """The scopes of each batch norm TFLiteConverter could not fold into a conv (a Keras BatchNormalization after
    its activation or a pool): a MUL by a per-channel constant of an activation's or pool's output whose one reader
    ADDs a per-channel constant. At int8 their outputs share one scale over channels the norm sets far apart.
    Kept float by default: on tempocnn's 9 such norms (after ELUs, which ai-edge-quantizer leaves float anyway) the eval cosine went from
    0.9625 to 0.9790 at 1.0–1.1× the latency (at int16 activations: 0.9787, at 1.4×: LiteRT's 16×8 kernels split
    XNNPACK's partitions)."""
    from ai_edge_litert import schema_py_generated as fb
    from ai_edge_quantizer.utils import tfl_flatbuffer_utils as tfl

    model = tfl.read_model(float_model)
    graph = model.subgraphs[0]
    codes = [max(c.builtinCode, c.deprecatedBuiltinCode) for c in model.operatorCodes]

    def channels(op) -> int:
        """The length of the op's constant per-channel vector operand (0: none)."""
        for i in op.inputs:
            t = graph.tensors[i]
            if len(t.shape) and int(np.prod(t.shape)) == t.shape[-1] > 1 and tfl.get_tensor_data(t, model.buffers) is not None:
                return int(t.shape[-1])
        return 0

    readers: dict[int, list[int]] = {}
    for k, op in enumerate(graph.operators):
        for i in op.inputs:
            readers.setdefault(i, []).append(k)
    writer = {o: k for k, op in enumerate(graph.operators) for o in op.outputs}
    after_activation = {getattr(fb.BuiltinOperator, name) for name in _AFTER_ACTIVATION}
    scopes = [tfl.get_op_scope(op, graph.tensors) for op in graph.operators]
    found = []
    for k, op in enumerate(graph.operators):
        after = readers.get(op.outputs[0], [])
        if (codes[op.opcodeIndex] == fb.BuiltinOperator.MUL and len(after) == 1 and channels(op)
                and codes[graph.operators[after[0]].opcodeIndex] == fb.BuiltinOperator.ADD
                and channels(graph.operators[after[0]]) == channels(op)
                and any(codes[graph.operators[w].opcodeIndex] in after_activation for i in op.inputs
                        if (w := writer.get(i)) is not None)):
            found += [scopes[k], scopes[after[0]]]
    return found


def _mended(model_bytes: bytes) -> bytes:
    """`model_bytes` with two things ai-edge-quantizer leaves mended (see the module's docstring):
    - each signature output that names an int8 tensor inside the graph moves to the graph output its
      DEQUANTIZE makes of it;
    - an output no op reads (chars2vec's unrolled LSTM: the forget gate's quarter of a SPLIT at the step where the
      cell state is still zero) stays float beside int8 siblings, which no kernel takes (XNNPACK: "failed to
      delegate SPLIT node"); it takes its first int8 sibling's type and quantization."""
    from ai_edge_litert import schema_py_generated as fb
    from ai_edge_litert.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model_from_bytearray(bytearray(model_bytes))
    graph = model.subgraphs[0]
    codes = [max(c.builtinCode, c.deprecatedBuiltinCode) for c in model.operatorCodes]
    dequantized = {op.inputs[0]: op.outputs[0] for op in graph.operators if codes[op.opcodeIndex] == fb.BuiltinOperator.DEQUANTIZE}
    mended = point_signatures(model, {}, {int8: out for int8, out in dequantized.items()
                                          if int8 not in graph.outputs and out in graph.outputs})
    read = {i for op in graph.operators for i in op.inputs} | set(graph.outputs)
    for op in graph.operators:
        outputs = [graph.tensors[i] for i in op.outputs]
        int8 = [t for t in outputs if t.type == fb.TensorType.INT8 and t.quantization is not None]
        for i, t in zip(op.outputs, outputs):
            if int8 and i not in read and t.type == fb.TensorType.FLOAT32:
                t.type, t.quantization = fb.TensorType.INT8, copy.deepcopy(int8[0].quantization)
                mended += 1
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model)) if mended else model_bytes
