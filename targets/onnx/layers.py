"""Per-layer drift of an int8 (QDQ) .onnx against the fp32 .onnx it was quantized from.

onnxruntime's QDQ debugging does the work: `modify_model_output_intermediate_tensors` makes every
float tensor of both models an output, `collect_activations` runs them on the same samples, and
`create_activation_matching` pairs each QDQ activation (as the next op sees it, after
Quantize→Dequantize) with the float tensor of the same name; `create_weight_matching` pairs each
dequantized weight with its float original. The torch exporter records each node's module path
(`pkg.torch.onnx.name_scopes`), which names the layer.
"""

from __future__ import annotations

import ast
import tempfile
from pathlib import Path

import numpy as np

from edgekit.core.drift import Traced, sqnr_db
from edgekit.core.signature import Signature
from edgekit.targets.onnx.runner import OnnxRunner

QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})
Q_INPUT, DQ_OUTPUT = "_QuantizeLinear_Input", "_DequantizeLinear_Output"


def trace(float_path: str, quant_path: str, signature: Signature, inputs: dict[str, np.ndarray]):
    """(traced ops of the QDQ model, {activation name: SQNR dB}) over the samples in `inputs`."""
    import onnx
    from onnxruntime.quantization.qdq_loss_debug import (collect_activations, create_activation_matching,
                                                         create_weight_matching,
                                                         modify_model_output_intermediate_tensors)

    n = len(next(iter(inputs.values())))
    samples = [{k: v[i] for k, v in inputs.items()} for i in range(n)]
    with tempfile.TemporaryDirectory(prefix="edgekit-layers-") as tmp:
        activations = {}
        for which, path in (("float", float_path), ("quant", quant_path)):
            augmented = str(Path(tmp) / f"{which}.onnx")
            modify_model_output_intermediate_tensors(path, augmented)
            runner = OnnxRunner(path, signature)  # builds the feeds, integer inputs included
            activations[which] = collect_activations(augmented, iter([runner.feeds(s) for s in samples]))
    matching = create_activation_matching(activations["quant"], activations["float"])
    sqnr = {name: sqnr_db(np.concatenate(m["float"]), np.concatenate(m["post_qdq"]))
            for name, m in matching.items() if m.get("float")}
    graph_inputs = [i.name for i in onnx.load(quant_path, load_external_data=False).graph.input]
    for name in graph_inputs:  # an integer model input is not a float tensor: compare its dequantized value
        post = activations["quant"].get(name + DQ_OUTPUT)
        if name not in sqnr and post is not None and name in activations["float"]:
            sqnr[name] = sqnr_db(np.concatenate(activations["float"][name]), np.concatenate(post))
    # onnxruntime's compute_weight_error fails on 0-d weights (a quantized scalar constant): the
    # same SQNR, computed here on flattened arrays.
    weights = {name: sqnr_db(np.ravel(m["float"]), np.ravel(m["dequantized"]))
               for name, m in create_weight_matching(float_path, quant_path).items()}
    inputs_quantized = [Traced(f"input {name}", "QuantizeLinear", name, ()) for name in graph_inputs if name in sqnr]
    return inputs_quantized + _traced(onnx.load(quant_path, load_external_data=False), weights), sqnr


def _traced(model, weights: dict[str, float]) -> list[Traced]:
    produced_by_dq = {}
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear":
            produced_by_dq[node.output[0]] = node.input[0]
    initializers = {i.name for i in model.graph.initializer}

    def base(name: str) -> str:
        return name.removesuffix(DQ_OUTPUT).removesuffix(Q_INPUT)

    out = []
    for node in model.graph.node:
        if node.op_type in QDQ_OPS or not node.output:
            continue
        acts, weight = [], None
        for name in node.input:
            b = base(name)
            if b in weights and weight is None:
                weight = weights[b]
            elif name and name not in initializers and not _is_weight(name, produced_by_dq, initializers):
                acts.append(b)
        weight_names = [base(n) for n in node.input if _is_weight(n, produced_by_dq, initializers) or n in initializers]
        out.append(Traced(layer_name(node, weight_names), node.op_type, base(node.output[0]), tuple(acts), weight))
    return out


def _is_weight(name: str, produced_by_dq: dict, initializers: set) -> bool:
    """A DequantizeLinear output whose quantized input is a constant (a weight or a bias)."""
    return produced_by_dq.get(name) in initializers


def layer_name(node, weight_names: list[str]) -> str:
    """The module path the exporter recorded; else the module of the node's weight (features.0.0
    from features.0.0.weight, for a node the optimizer rebuilt, as when it folds a BatchNorm);
    else the node's output name."""
    meta = {p.key: p.value for p in node.metadata_props}
    scopes = meta.get("pkg.torch.onnx.name_scopes")
    if scopes:
        try:
            names = ast.literal_eval(scopes)
        except (ValueError, SyntaxError):
            names = []
        if len(names) >= 2 and names[-2]:
            return names[-2]
    for w in weight_names:
        module, _, leaf = w.rpartition(".")
        if module and leaf in ("weight", "bias"):
            return module
    return node.name or node.output[0].removesuffix(Q_INPUT)
