"""Bias correction for onnxruntime's QDQ int8 models (the onnx and ort targets).

The same correction as edgekit.calibration.bias_correction, on an ONNX graph: for every Conv and
Gemm whose input, weights and bias are quantized (QuantizeLinear → DequantizeLinear before the
input, DequantizeLinear of int8 weights and of an int32 bias), its *own* error — its output minus
what its float weights give on the float value of its own input — is measured on the calibration
samples in one run of a copy of the model that computes both, and its per-channel mean is taken off
the int32 bias (in the bias's own scale). MatMul layers (a bias in a separate Add) are left as they
are.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

FLOAT = "_edgekit_float"
MAX_SAMPLES = 32  # as edgekit.calibration.bias_correction


def correct(quantized: Path, float_model: Path, feeds, work_dir: Path) -> None:
    """Correct the biases of `quantized` (a QDQ model quantized from `float_model`) in place, from the
    calibration `feeds` (an iterable of {input name: array}; the first MAX_SAMPLES are used)."""
    import onnx
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    model = onnx.load(str(quantized))
    inits = {i.name: i for i in model.graph.initializer}  # the model's own: corrected at the end
    measuring = onnx.ModelProto()
    measuring.CopyFrom(model)  # the copy that computes both outputs of every layer
    graph = measuring.graph
    float_graph = onnx.load(str(float_model)).graph
    floats = {i.name: i for i in float_graph.initializer}
    float_producer = {o: n for n in float_graph.node for o in n.output}
    producer = {o: n for n in graph.node for o in n.output}

    def dequantized(name: str, op: str = "DequantizeLinear"):
        node = producer.get(name)
        return node if node is not None and node.op_type == op else None

    layers = []  # (node, float output name, bias initializer, bias scale)
    for node in list(graph.node):
        if node.op_type not in ("Conv", "Gemm") or len(node.input) < 3:
            continue
        dq_x, dq_w, dq_b = (dequantized(node.input[i]) for i in range(3))
        q_x = dequantized(dq_x.input[0], "QuantizeLinear") if dq_x is not None else None
        weight = dq_w.input[0].removesuffix("_quantized") if dq_w is not None else None
        if (q_x is None or weight not in floats or dq_b is None or dq_b.input[0] not in inits
                or len(dq_b.input) < 2 or dq_b.input[1] not in inits):
            continue
        float_out = node.output[0] + FLOAT
        graph.initializer.append(numpy_helper.from_array(numpy_helper.to_array(floats[weight]), weight + FLOAT))
        graph.node.append(_copy(node, [_float_input(q_x.input[0], graph, producer, float_producer, floats),
                                       weight + FLOAT, node.input[2]], float_out))
        graph.output.extend([helper.make_tensor_value_info(node.output[0], onnx.TensorProto.FLOAT, None),
                             helper.make_tensor_value_info(float_out, onnx.TensorProto.FLOAT, None)])
        layers.append((node, float_out, inits[dq_b.input[0]], numpy_helper.to_array(inits[dq_b.input[1]])))
    if not layers:
        return
    path = work_dir / "bias-correction.onnx"
    onnx.save(measuring, str(path))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the QDQ graph as written
    options.intra_op_num_threads = options.inter_op_num_threads = 1  # the same sums with any number of cores
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    wanted = [name for node, float_out, _, _ in layers for name in (node.output[0], float_out)]
    sums, count = [0.0] * len(layers), 0
    for feed in feeds:
        if count >= MAX_SAMPLES:
            break
        outputs = session.run(wanted, feed)
        for i in range(len(layers)):
            error = outputs[2 * i].astype(np.float64) - outputs[2 * i + 1]
            sums[i] = sums[i] + error.mean(axis=tuple(a for a in range(error.ndim) if a != 1))
        count += 1
    del session
    path.unlink()
    for i, (_node, _out, bias, scale) in enumerate(layers):
        q = numpy_helper.to_array(bias).astype(np.int64)
        q = np.clip(q - np.round(sums[i] / count / scale), -2 ** 31, 2 ** 31 - 1).astype(np.int32)
        bias.CopyFrom(numpy_helper.from_array(q, bias.name))
    onnx.save(model, str(quantized))


def _float_input(name: str, graph, producer: dict, float_producer: dict, floats: dict) -> str:
    """The float value of the tensor `name` a QuantizeLinear reads. onnxruntime's quantizer drops a
    Relu or Clip that the quantized range already clamps (the Conv before it writes the tensor), so
    the float model's activation is applied again here."""
    from onnx import numpy_helper

    act = float_producer.get(name)
    if act is None or act.op_type not in ("Relu", "Clip") or getattr(producer.get(name), "op_type", None) == act.op_type:
        return name
    known = {i.name for i in graph.initializer}
    for extra in act.input[1:]:
        if extra and extra in floats and extra not in known:
            graph.initializer.append(numpy_helper.from_array(numpy_helper.to_array(floats[extra]), extra))
    out = name + FLOAT + "_input"
    if out not in producer:
        graph.node.append(_copy(act, [name, *act.input[1:]], out))
        producer[out] = graph.node[-1]
    return out


def _copy(node, inputs: list[str], output: str):
    """`node` (same op, domain and attributes) on other inputs, writing `output`."""
    from onnx import helper

    copy = helper.make_node(node.op_type, inputs, [output], name=node.name + FLOAT, domain=node.domain or None)
    copy.attribute.extend(node.attribute)
    return copy
