"""Per-layer drift of an int8 (QDQ) .onnx against the fp32 .onnx it was quantized from.

onnxruntime's QDQ debugging does the work: `modify_model_output_intermediate_tensors` makes every
float tensor of both models an output, `collect_activations` runs them on the same samples, and
`create_activation_matching` pairs each QDQ activation (as the next op sees it, after
Quantize→Dequantize) with the float tensor of the same name; `create_weight_matching` pairs each
dequantized weight with its float original. The torch exporter records each node's module path
(`pkg.torch.onnx.name_scopes`), which names the layer.

With `gains`, each layer that holds a quantized weight is also measured end to end (`revert_gains`): the
model's outputs with that layer alone reading float inputs and float weights, against the float model's.
What a layer loses locally does not say what the outputs gain when it is kept back: a few dB lost early in
a network whose later layers amplify it can matter more than a large loss next to the output.
"""

from __future__ import annotations

import ast
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from edgekit.core.drift import Traced, sqnr_db
from edgekit.core.signature import Signature
from edgekit.targets.onnx.runner import OnnxRunner

QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})
NAME_SCOPES = "pkg.torch.onnx.name_scopes"  # the metadata key under which the torch exporter records module paths
Q_INPUT, DQ_OUTPUT = "_QuantizeLinear_Input", "_DequantizeLinear_Output"


def trace(float_path: str, quant_path: str, signature: Signature, inputs: dict[str, np.ndarray], *, gains: bool = False):
    """(traced ops of the QDQ model, {activation name: SQNR dB}) over the samples in `inputs`; with `gains`, each
    op of a layer with a quantized weight carries what keeping that layer float gains (`revert_gains`)."""
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
    # Tensors are paired by name; a pair of different sizes is two tensors that share a name (a TensorFlow
    # model's `const_fold_opt__N` constants are numbered anew by each conversion): not compared.
    sqnr = {name: sqnr_db(np.concatenate(m["float"]), np.concatenate(m["post_qdq"]))
            for name, m in matching.items() if m.get("float") and _same_size(m["float"], m["post_qdq"])}
    graph_inputs = [i.name for i in onnx.load(quant_path, load_external_data=False).graph.input]
    for name in graph_inputs:  # an integer model input is not a float tensor: compare its dequantized value
        post = activations["quant"].get(name + DQ_OUTPUT)
        if name not in sqnr and post is not None and name in activations["float"]:
            sqnr[name] = sqnr_db(np.concatenate(activations["float"][name]), np.concatenate(post))
    # onnxruntime's compute_weight_error fails on 0-d weights (a quantized scalar constant): the
    # same SQNR, computed here on flattened arrays.
    weights = {name: sqnr_db(np.ravel(m["float"]), np.ravel(m["dequantized"]))
               for name, m in create_weight_matching(float_path, quant_path).items()
               if _same_size(m["float"], m["dequantized"])}
    inputs_quantized = [Traced(f"input {name}", "QuantizeLinear", name, ()) for name in graph_inputs if name in sqnr]
    quantized = onnx.load(quant_path, load_external_data=False)
    traced = _traced(quantized, weights)
    if gains:
        measured = revert_gains(float_path, quant_path, signature, samples,
                                {layer for layer, weighted in _layers(quantized).values() if weighted})
        traced = [replace(t, gain_db=measured.get(t.layer)) for t in traced]
    return inputs_quantized + traced, sqnr


def _same_size(first, second) -> bool:
    """Whether two tensors (or lists of per-sample tensors) hold as many values."""
    count = lambda t: sum(np.size(x) for x in t) if isinstance(t, list) else np.size(t)  # noqa: E731
    return count(first) == count(second)


def revert_gains(float_path: str, quant_path: str, signature: Signature, samples: list[dict],
                 layers: set[str]) -> dict[str, float]:
    """{layer: dB} the worst output's SQNR against the float model gains on `samples` when that layer alone
    reads float: each activation input of its nodes taken before its QuantizeLinear, each weight and bias as
    the float model holds it. A layer whose constants the float model does not hold by name is not measured
    (its bias, corrected for the int8 model's errors, would be wrong in a float copy of the layer)."""
    import onnx

    model = onnx.load(quant_path)
    floats = {i.name: i for i in onnx.load(float_path).graph.initializer}
    nodes: dict[str, list[int]] = {}
    for index, (layer, _weighted) in _layers(model).items():
        nodes.setdefault(layer, []).append(index)
    with tempfile.TemporaryDirectory(prefix="edgekit-revert-") as tmp:
        reference = _outputs(float_path, signature, samples)
        base = _worst_sqnr(reference, _outputs(quant_path, signature, samples))
        out = {}
        for layer in sorted(layers):
            variant = _reverted(model, nodes.get(layer, []), floats)
            if variant is None:
                continue
            path = str(Path(tmp) / "reverted.onnx")
            onnx.save(variant, path)
            out[layer] = _worst_sqnr(reference, _outputs(path, signature, samples)) - base
    return out


def _reverted(model, indices: list[int], floats: dict):
    """A copy of the QDQ `model` whose nodes at `indices` read float inputs (see `revert_gains`), or None
    when none of them reads a quantized tensor or a quantized constant of theirs has no float original by
    its name in `floats` (not measured, then). An activation is read before its rounding but within its
    quantized range (a Clip to it): onnxruntime folds a Relu or a Clip into the range of the Quantize after
    the op it follows, so the tensor before the Quantize was never clamped."""
    from onnx import helper, numpy_helper

    producer = {o: n for n in model.graph.node for o in n.output}
    inits = {i.name: i for i in model.graph.initializer}
    variant = _copy(model)
    changed = False
    for index in sorted(indices, reverse=True):  # an inserted Clip shifts only the nodes after it
        for k, name in enumerate(model.graph.node[index].input):
            dq = producer.get(name)
            if dq is None or dq.op_type != "DequantizeLinear":
                continue
            q = producer.get(dq.input[0])
            original = floats.get(dq.input[0].removesuffix("_quantized"))
            if original is not None and dq.input[0] in inits and list(original.dims) != list(inits[dq.input[0]].dims):
                original = None  # another tensor of the same name (see `trace`)
            if q is not None and q.op_type == "QuantizeLinear":
                source, (low, high) = f"{name}_reverted", _range(dq, inits)
                bounds = [numpy_helper.from_array(np.array(v, np.float32), f"{source}_{side}")
                          for v, side in ((low, "min"), (high, "max"))]
                variant.graph.initializer.extend(bounds)
                variant.graph.node.insert(index, helper.make_node("Clip", [q.input[0], *(b.name for b in bounds)], [source]))
            elif dq.input[0] in inits and original is not None:
                source = dq.input[0].removesuffix("_quantized") + "_float"
                if source not in {i.name for i in variant.graph.initializer}:
                    variant.graph.initializer.append(numpy_helper.from_array(
                        numpy_helper.to_array(original).astype(np.float32), source))
            elif dq.input[0] in inits:  # a constant the float model does not hold by that name: its bias may be
                return None  # corrected for the int8 model's errors, which a float copy of the layer no longer has
            else:
                continue
            output = model.graph.node[index].output[0]  # a tensor has one producer: it finds the node again
            next(n for n in variant.graph.node if n.output and n.output[0] == output).input[k] = source
            changed = True
    return variant if changed else None


def _range(dq, inits: dict) -> tuple[float, float]:
    """The float range a per-tensor DequantizeLinear can give: its integer type's ends, dequantized."""
    from onnx import numpy_helper

    scale = float(np.ravel(numpy_helper.to_array(inits[dq.input[1]]))[0])
    zero = numpy_helper.to_array(inits[dq.input[2]]) if len(dq.input) > 2 and dq.input[2] in inits else np.uint8(0)
    info = np.iinfo(zero.dtype)
    z = float(np.ravel(zero)[0])
    return (info.min - z) * scale, (info.max - z) * scale


def _copy(model):
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def _outputs(path: str, signature: Signature, samples: list[dict]) -> list[np.ndarray]:
    """Each output of the model at `path`, the samples stacked."""
    runner = OnnxRunner(path, signature)
    runs = [runner.run(s) for s in samples]
    return [np.stack([r[j] for r in runs]) for j in range(len(runs[0]))]


def _worst_sqnr(reference: list[np.ndarray], actual: list[np.ndarray]) -> float:
    return min(sqnr_db(r, a) for r, a in zip(reference, actual))


def _base(name: str) -> str:
    return name.removesuffix(DQ_OUTPUT).removesuffix(Q_INPUT)


def _layers(model) -> dict[int, tuple[str, bool]]:
    """{node index: (its layer, as `layer_name` names it from the node and its weights' names; whether it reads
    a quantized constant)} for every node of the QDQ `model` but the Quantize/DequantizeLinear ones."""
    produced_by_dq = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "DequantizeLinear"}
    initializers = {i.name for i in model.graph.initializer}
    out = {}
    for index, node in enumerate(model.graph.node):
        if node.op_type in QDQ_OPS or not node.output:
            continue
        quantized = [n for n in node.input if _is_weight(n, produced_by_dq, initializers)]
        names = [_base(n) for n in node.input if n in quantized or n in initializers]
        out[index] = (layer_name(node, names), bool(quantized))
    return out


def _traced(model, weights: dict[str, float]) -> list[Traced]:
    produced_by_dq = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "DequantizeLinear"}
    initializers = {i.name for i in model.graph.initializer}
    out = []
    for index, (layer, _weighted) in _layers(model).items():
        node = model.graph.node[index]
        acts, weight = [], None
        for name in node.input:
            b = _base(name)
            if b in weights and weight is None:
                weight = weights[b]
            elif name and name not in initializers and not _is_weight(name, produced_by_dq, initializers):
                acts.append(b)
        # an op that reads no dequantized tensor runs float already (a norm the quantizer left float)
        reads_quantized = any(name in produced_by_dq for name in node.input)
        out.append(Traced(layer, node.op_type, _base(node.output[0]), tuple(acts), weight, quantized=reads_quantized))
    return out


def _is_weight(name: str, produced_by_dq: dict, initializers: set) -> bool:
    """A DequantizeLinear output whose quantized input is a constant (a weight or a bias)."""
    return produced_by_dq.get(name) in initializers


def layer_name(node, weight_names: list[str]) -> str:
    """The module path the exporter recorded; else the module of the node's weight (features.0.0
    from features.0.0.weight, for a node the optimizer rebuilt, as when it folds a BatchNorm);
    else the node's output name."""
    meta = {p.key: p.value for p in node.metadata_props}
    scopes = meta.get(NAME_SCOPES)
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
