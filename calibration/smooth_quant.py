"""SmoothQuant for a transformer's linears: move the activations' outlier channels into the weights.

A transformer's LayerNorm output carries a few channels tens of times larger than the rest; one int8
scale per tensor, set by those channels, leaves the others a handful of levels. SmoothQuant (Xiao et
al., 2023) divides each input channel j of the linears reading that output by

    s_j = max|X_j| ** ALPHA / max|W_j| ** (1 - ALPHA)

and multiplies the linears' weight column j by s_j: the product is unchanged in float, the activation
is flatter, and the weights (quantized per output channel) absorb the difference. The division is a
float Mul inserted before the linears (a post-LN BERT's normalization output also feeds its residual
add, so it cannot be folded into the LayerNorm); the quantizer leaves that Mul float and quantizes its
output at the linears' input. max|X_j| is measured in float on at most SAMPLES calibration samples.

Two forms, one rule:
- `smooth_pt2e(module, samples)`: the PT2E GraphModule before prepare_pt2e (tflite, executorch);
- `smooth_onnx(model_path, out_path, samples)`: the float ONNX model before onnxruntime calibrates it.
"""

from __future__ import annotations

import operator
from itertools import islice
from pathlib import Path

import numpy as np

from edgekit.calibration.pt2e_quantizer import _name

ALPHA = 0.7  # measured on MiniLM-L6 on every target (README): 0.5, the paper's default, and 0.85 gain less
SAMPLES = 32
MIN_SCALE = 1e-5
SMOOTHING_NAME = "smooth_quant"  # the inserted Mul nodes' names start with it


def scales(act_max: np.ndarray, weight_max: np.ndarray) -> np.ndarray:
    """Per input channel: max|X_j|^ALPHA / max|W_j|^(1-ALPHA); 1 where a channel never fired or has no
    weight."""
    act_max, weight_max = np.asarray(act_max, np.float64), np.asarray(weight_max, np.float64)
    s = np.power(act_max, ALPHA) / np.power(np.maximum(weight_max, MIN_SCALE), 1 - ALPHA)
    return np.where((act_max > 0) & (weight_max > 0), np.maximum(s, MIN_SCALE), 1.0).astype(np.float32)


def applies(source) -> bool:
    """Whether the source model (an opened edgekit Source) has linears reading a normalization, the
    pattern SmoothQuant smooths: read from the torch program or the ONNX graph; False for TensorFlow
    models, whose tflite route has no SmoothQuant."""
    exported = getattr(source, "exported", None)
    if exported is not None:
        return any(_name(n) in _NORMS and any(_name(u) == "linear.default" and u.args[0] is n for u in n.users)
                   for n in exported().graph.nodes)
    if source.artifact.format == "onnx":
        import onnx

        graph = onnx.load(source.artifact.path, load_external_data=False).graph
        norms = {n.output[0] for n in graph.node if n.op_type in _ONNX_NORMS}
        return any(n.op_type in ("MatMul", "Gemm") and n.input and n.input[0] in norms for n in graph.node)
    return False


# --- PT2E ---------------------------------------------------------------------------------------

_NORMS = ("layer_norm.default", "native_layer_norm.default", "rms_norm.default")


def pt2e_groups(module) -> dict:
    """{normalization node: [linear nodes reading it with a weight attribute]} of a GraphModule."""
    groups = {}
    for node in module.graph.nodes:
        if _name(node) not in _NORMS:
            continue
        linears = [u for u in node.users if _name(u) == "linear.default" and u.args[0] is node
                   and getattr(u.args[1], "op", None) == "get_attr"]
        if linears:
            groups[node] = linears
    return groups


def smooth_pt2e(module, samples) -> list[str]:
    """Smooth the linears that read a normalization in `module` (in place; weights replaced, never
    written into: the module shares its tensors with the exported program). `samples` yields argument
    lists. Returns the names of the inserted Mul nodes (the quantizer keeps them float)."""
    import torch

    groups = pt2e_groups(module)
    if not groups:
        return []
    peaks = {n: None for n in groups}

    class Observe(torch.fx.Interpreter):
        """The graph run as usual, keeping in `peaks` each grouped normalization's peak |output| per channel."""

        def run_node(self, node):
            """Run `node`; for a grouped normalization, raise its per-channel peaks (last axis) to this sample's."""
            value = super().run_node(node)
            if node in peaks:
                out = value[0] if isinstance(value, (tuple, list)) else value
                peak = out.detach().abs().reshape(-1, out.shape[-1]).amax(0)
                peaks[node] = peak if peaks[node] is None else torch.maximum(peaks[node], peak)
            return value

    with torch.no_grad():
        for args in islice(samples, SAMPLES):
            Observe(module).run(*args)
    inserted = []
    for norm, linears in groups.items():
        if peaks[norm] is None:
            continue
        weights = [operator.attrgetter(lin.args[1].target)(module) for lin in linears]
        weight_max = torch.stack([w.detach().abs().amax(0) for w in weights]).amax(0)
        s = torch.from_numpy(scales(peaks[norm].numpy(), weight_max.numpy()))
        for lin, w in zip(linears, weights):
            _set_attr(module, lin.args[1].target, torch.nn.Parameter(w.detach() * s, requires_grad=False))
        name = f"{SMOOTHING_NAME}_{norm.name}"
        module.register_buffer(name, (1.0 / s).to(torch.float32))
        with module.graph.inserting_after(norm):
            factor = module.graph.get_attr(name)
        with module.graph.inserting_after(factor):
            mul = module.graph.call_function(torch.ops.aten.mul.Tensor, (norm, factor))
        val = norm.meta.get("val")
        factor.meta["val"] = (1.0 / s) if val is None else val.new_empty(s.shape)
        mul.meta = {**norm.meta}
        for lin in linears:
            lin.replace_input_with(norm, mul)
        inserted.append(mul.name)
    module.recompile()
    return inserted


def _set_attr(module, target: str, value) -> None:
    owner, _, attr = target.rpartition(".")
    setattr(module.get_submodule(owner) if owner else module, attr, value)


# --- ONNX ---------------------------------------------------------------------------------------

_ONNX_NORMS = ("LayerNormalization", "SimplifiedLayerNormalization", "RMSNormalization")


def smooth_onnx(model_path: Path, out_path: Path, samples) -> list[str]:
    """Smooth the MatMul/Gemm nodes that read a normalization output of the float ONNX model at
    `model_path` (their weight an initializer; directly, or through a Reshape that feeds only such
    nodes, as onnxruntime's pre-processing writes a 3-D linear) and write the result to `out_path`.
    `samples` yields {input name: array} feeds. Returns the names of the inserted Mul nodes (excluded
    from quantization: the linears' input is quantized after them)."""
    import onnx
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    model = onnx.load(str(model_path))
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    consumers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    def input_axis(node, tensor: str) -> int | None:
        """The axis of the weight that meets the input channels, if `node` is a linear of `tensor`."""
        if node.op_type not in ("MatMul", "Gemm") or node.input[0] != tensor or len(node.input) < 2:
            return None
        weight = inits.get(node.input[1])
        if weight is None or len(weight.dims) != 2 or len(consumers[weight.name]) != 1:
            return None
        attrs = {a.name: a.i for a in node.attribute}
        return None if attrs.get("transA") else 1 if attrs.get("transB") else 0

    groups: dict[str, tuple[list, list]] = {}  # norm output → (linears, nodes to read the Mul instead)
    for norm in (n for n in graph.node if n.op_type in _ONNX_NORMS):
        tensor, linears, readers = norm.output[0], [], []
        for c in consumers.get(tensor, []):
            if input_axis(c, tensor) is not None:
                linears.append(c), readers.append(c)
            elif c.op_type == "Reshape" and c.input[0] == tensor and consumers.get(c.output[0]) and all(
                    input_axis(u, c.output[0]) is not None for u in consumers[c.output[0]]):
                linears += consumers[c.output[0]]
                readers.append(c)
        if linears:
            groups[tensor] = (linears, readers)
    if not groups:
        onnx.save(model, str(out_path))
        return []
    probe = onnx.ModelProto()
    probe.CopyFrom(model)  # before any change: the float outputs to measure
    probe.graph.output.extend(onnx.ValueInfoProto(name=t) for t in groups)
    options = ort.SessionOptions()  # as onnxruntime's calibrator runs it: the pre-processed model as it is
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = list(groups)
    peaks = {t: None for t in names}
    for feed in islice(samples, SAMPLES):
        for t, value in zip(names, session.run(names, feed)):
            peak = np.abs(value).reshape(-1, value.shape[-1]).max(0)
            peaks[t] = peak if peaks[t] is None else np.maximum(peaks[t], peak)
    inserted = []
    for tensor, (linears, readers) in groups.items():
        weights = {n.input[1]: (numpy_helper.to_array(inits[n.input[1]]), input_axis(n, n.input[0])) for n in linears}
        if peaks[tensor] is None or any(w.shape[axis] != peaks[tensor].shape[0] for w, axis in weights.values()):
            continue
        weight_max = np.max([np.abs(w).max(1 - axis) for w, axis in weights.values()], axis=0)
        s = scales(peaks[tensor], weight_max)
        for name, (w, axis) in weights.items():
            inits[name].CopyFrom(numpy_helper.from_array((w * (s[:, None] if axis == 0 else s[None, :])).astype(w.dtype), name))
        mul_name = f"{SMOOTHING_NAME}_{len(inserted)}"
        graph.initializer.append(numpy_helper.from_array((1.0 / s).astype(np.float32), f"{mul_name}_factor"))
        mul = helper.make_node("Mul", [tensor, f"{mul_name}_factor"], [f"{mul_name}_output"], name=mul_name)
        for n in readers:
            n.input[0] = mul.output[0]
        graph.node.insert(min(list(graph.node).index(n) for n in readers), mul)
        inserted.append(mul_name)
    onnx.save(model, str(out_path))
    return inserted
