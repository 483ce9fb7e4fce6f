"""A recurrence that reads the model's input keeps its input weights float at int8.

The class of failure: a recurrent layer (LSTM, GRU, RNN) whose input is the model's own input, raw features
such as a spectrogram in linear power or sensor readings. The network learns large weights for the quiet
channels of such an input and small ones for the loud, so one int8 scale per gate row (set by the large
weights) leaves the loud channels' weights a few levels; their error is then carried by the cell state
through every step. A 3-layer LSTM speaker encoder over 160 frames of mel power (Resemblyzer) has an
embedding cosine of 0.961 with every recurrent weight int8 on ONNX, and 0.9994 with only its first layer's
input weights float: 41 k of its 1.46 M weights. Calibration methods, bias correction, SmoothQuant scales and
int16 activations do not close the gap (0.86–0.99); per-group int8 of 4 input channels does (0.9998), which no
runtime's recurrent or fully connected int8 kernel takes.

Not every recurrence over the model's input has this spread: an LSTM over rows of pixels in [0, 1] keeps its
output with those weights int8. So it is measured: the source model runs on calibration samples with that
layer's input weights rounded to int8 per gate row (as the runtimes store them) and nothing else changed; where
an output's mean cosine to the float model falls below TOLERANCE, those input weights (an ONNX `LSTM`/`GRU`/
`RNN`'s W; a .tflite's FULLY_CONNECTED reading the model's input, which litert writes for the first layer's
input projection) stay float at int8, and the artifact names the layer in `kept_float`. The recurrent weights
and every later layer are int8 as before. Layers that read a computed activation (a CNN's features, an
embedding's rows) are not candidates: a learned activation has no such spread of channel scales.
"""

from __future__ import annotations

import numpy as np

from edgekit.core.artifact import LayerNote
from edgekit.core.source import flatten
from edgekit.core.verify import cosine

TOLERANCE = 0.999  # an output's mean cosine with only these weights int8; Resemblyzer's: 0.961
SAMPLES = 16  # calibration samples the measurement runs

WHY = ("its input weights read the model's raw input, and int8 there alone moved the output to cosine {:.4f} on "
       "calibration samples (the error is carried through every step of the recurrence): they stay float, the "
       "recurrent weights are int8")


def per_channel_int8(weights: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """`weights` as symmetric int8 levels (±127) and one float32 scale per index of `axis` (max|w| / 127; 1 for
    an all-zero channel): how edgekit stores a weight int8 (`onnx_quantize.int8_weights_only`)."""
    reduce = tuple(a for a in range(weights.ndim) if a != axis)
    scale = np.max(np.abs(weights), axis=reduce) / 127.0
    scale = np.where(scale == 0, 1.0, scale).astype(np.float32)
    shape = [1] * weights.ndim
    shape[axis] = -1
    return np.clip(np.round(weights / scale.reshape(shape)), -127, 127).astype(np.int8), scale


def rounded(weights: np.ndarray, axis: int) -> np.ndarray:
    """`weights` rounded to int8 as `per_channel_int8` stores them, back in float."""
    levels, scale = per_channel_int8(weights, axis)
    shape = [1] * weights.ndim
    shape[axis] = -1
    return (levels * scale.reshape(shape)).astype(weights.dtype)


def moved(reference: list[np.ndarray], rounded_outputs: list[np.ndarray]) -> float | None:
    """The lowest mean cosine over the outputs (each stacked over samples) when it is below TOLERANCE, else None."""
    worst = min(cosine(r, o) for r, o in zip(reference, rounded_outputs))
    return worst if worst < TOLERANCE else None


_TORCH_OPS = ("aten.lstm.input", "aten.gru.input", "aten.rnn_tanh.input", "aten.rnn_relu.input")
_TORCH_VIEWS = ("permute", "transpose", "view", "reshape", "_unsafe_view", "unsqueeze", "squeeze", "contiguous",
                "clone", "_to_copy", "expand")
_ONNX_RECURRENT = ("LSTM", "GRU", "RNN")
_ONNX_VIEWS = ("Transpose", "Reshape", "Squeeze", "Unsqueeze", "Identity", "Cast", "Flatten")
_TFLITE_VIEWS = ("RESHAPE", "TRANSPOSE", "SQUEEZE", "EXPAND_DIMS")  # BuiltinOperator names


def torch_layers(program, samples) -> tuple[LayerNote, ...]:
    """The recurrent layers of `program` (an ATen ExportedProgram) that read one of its inputs, through layout
    ops only, and whose first input weights rounded to int8 move the outputs on `samples` (a SampleSet)."""
    import torch

    users = set(program.graph_signature.user_inputs)
    params = program.graph_signature.inputs_to_parameters
    module, notes, reference = None, [], None
    for node in program.graph.nodes:
        if node.op != "call_function" or str(node.target) not in _TORCH_OPS:
            continue
        arg = node.args[0]
        while getattr(arg, "op", None) == "call_function" and str(arg.target).split(".")[1] in _TORCH_VIEWS:
            arg = arg.args[0]
        weight = params.get(getattr(node.args[2][0], "name", None))
        if getattr(arg, "op", None) != "placeholder" or arg.name not in users or weight is None:
            continue
        if module is None:
            module = program.module()
            reference = _torch_outputs(module, {}, samples)
        w = program.state_dict[weight].detach()
        fake = torch.from_numpy(rounded(w.float().numpy(), 0)).to(w.dtype)
        worst = moved(reference, _torch_outputs(module, {weight: fake}, samples))
        if worst is not None:
            stack = node.meta.get("nn_module_stack") or {}
            layer = list(stack.values())[-1][0] if stack else ""
            notes.append(LayerNote(layer, str(node.target).split(".")[1], WHY.format(worst)))
    return tuple(notes)


def _torch_outputs(module, replaced: dict, samples) -> list[np.ndarray]:
    """`module`'s outputs on the first SAMPLES of `samples`, with the parameters in `replaced` swapped in."""
    import torch

    inputs = list(samples.inputs)
    runs = []
    with torch.no_grad():
        for i in range(min(SAMPLES, len(samples))):
            args = tuple(torch.from_numpy(np.array(samples.inputs[k][i], copy=True)) for k in inputs)
            out = torch.func.functional_call(module, replaced, args) if replaced else module(*args)
            runs.append([t.detach().float().numpy() for t in flatten(out)])
    return [np.stack([r[j] for r in runs]) for j in range(len(runs[0]))]


def onnx_nodes(model_path, feeds: list[dict]) -> list:
    """The recurrent nodes of the ONNX model at `model_path` whose X is a graph input, through layout ops only,
    and whose W rounded to int8 moves the outputs on `feeds` (onnxruntime feeds), each with its cosine:
    [(node, cosine)]."""
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    positions = _onnx_candidates(onnx.load(str(model_path), load_external_data=False).graph)
    if not positions:
        return []
    model = onnx.load(str(model_path))  # now with its weights
    inits = {i.name: i for i in model.graph.initializer}
    candidates = [model.graph.node[i] for i in sorted(positions)]

    def outputs() -> list[np.ndarray]:
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        runs = [session.run(None, feed) for feed in feeds[:SAMPLES]]
        return [np.stack([r[j] for r in runs]) for j in range(len(runs[0]))]

    reference, found = outputs(), []
    for node in candidates:
        tensor = inits[node.input[1]]
        w = numpy_helper.to_array(tensor)
        tensor.CopyFrom(numpy_helper.from_array(rounded(w, 1), tensor.name))
        worst = moved(reference, outputs())
        tensor.CopyFrom(numpy_helper.from_array(w, tensor.name))
        if worst is not None:
            found.append((node, worst))
    return found


def _onnx_candidates(graph) -> set[int]:
    """The positions in `graph.node` of the recurrent nodes whose X is a graph input (through layout ops only)
    and whose W is an initializer (positions, not names: a node's name may be empty)."""
    inputs = {i.name for i in graph.input} - {i.name for i in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    inits = {i.name for i in graph.initializer}
    found = set()
    for position, node in enumerate(graph.node):
        if node.op_type not in _ONNX_RECURRENT or len(node.input) < 2 or node.input[1] not in inits:
            continue
        name = node.input[0]
        while name in producer and producer[name].op_type in _ONNX_VIEWS:
            name = producer[name].input[0]
        if name in inputs:
            found.add(position)
    return found


def tflite_scopes(path) -> list[str]:
    """The scopes (ai-edge-quantizer's: an op's output tensor names, each followed by ';') of the float
    FULLY_CONNECTED ops of the .tflite at `path` that read one of its subgraph's inputs, through layout ops only."""
    from ai_edge_litert import schema_py_generated as fb
    from ai_edge_quantizer.utils import tfl_flatbuffer_utils as tfl

    model = tfl.read_model(str(path))
    codes = [max(c.builtinCode, c.deprecatedBuiltinCode) for c in model.operatorCodes]
    views = {getattr(fb.BuiltinOperator, name) for name in _TFLITE_VIEWS}
    scopes = []
    for subgraph in model.subgraphs:
        producer = {o: op for op in subgraph.operators for o in op.outputs}
        for op in subgraph.operators:
            if codes[op.opcodeIndex] != fb.BuiltinOperator.FULLY_CONNECTED or len(op.inputs) < 2 or op.inputs[1] < 0:
                continue
            if subgraph.tensors[op.inputs[1]].type != fb.TensorType.FLOAT32:  # already quantized
                continue
            tensor = op.inputs[0]
            while tensor in producer and codes[producer[tensor].opcodeIndex] in views:
                tensor = producer[tensor].inputs[0]
            if tensor in subgraph.inputs:
                scopes.append(tfl.get_op_scope(op, subgraph.tensors))
    return scopes
