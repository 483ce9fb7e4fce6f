"""edgekit's PT2E quantizer: a backend's own quantizer, with the patterns real models have.

litert-torch's `PT2EQuantizer` and ExecuTorch's `XNNPACKQuantizer` annotate the patterns of small
convolutional nets well and miss ones that real pretrained models are made of. `EdgeQuantizer`
wraps the backend's quantizer (it does not copy it): it rewrites the graph a little before the
backend sees it, annotates a few patterns first (the backend's annotators skip nodes that are
already annotated), lets the backend annotate the rest, then removes annotations that would
quantize something that must stay exact. What it adds, and why:

- **A clamp after a conv, linear or add** (ReLU6, hardtanh, `clamp(min, max)`) is annotated as
  one fused unit, with the observer on the clamp's output. The backends give the clamp the
  producer's pre-clamp range (a 0..6 activation quantized over −179..93 keeps a handful of
  levels). Both backends fuse the clamp into the producer when they lower it (XNNPACK's output
  min/max, TFLite's fused RELU6). `clamp` with scalar bounds is rewritten to the equivalent
  `hardtanh`, the form both lowerings fuse.
- **Embedding tables** get int8 weights, per row (weight-only: the lookup returns float). In a
  transformer the token table is often the largest weight. For ExecuTorch (`tables_uint8`) they are
  uint8 with a float zero point per row, the form its QuantFusionPass turns into `embedding_byte`, the
  quantized kernel that dequantizes only the rows it looks up: in int8 the table stays a dequantize of
  the whole table on every call (MiniLM: 10 ms against 8.6 ms at fp32; 3.3 ms as `embedding_byte`).
- **Activation × activation matmul** (attention scores and context) is annotated where the
  backend runs it in int8 (`matmul_int8=True`: TFLite's BATCH_MATMUL; XNNPACK's bmm is float
  only, so there it stays float).
- **Integers stay integers.** Integer scalar no-ops (`add(arange, 0)` for position ids) are
  removed, and any other integer add/mul with a scalar is kept away from the backends'
  scalar-to-tensor step, which would turn an index into a float (ExecuTorch then fails with
  "tensors used as indices must be long").
- **Nothing computed from integer inputs only is quantized** (attention masks, position ids,
  anything feeding an index): an additive attention mask spans −3.4e38..0, and an add that
  carries it cannot be quantized without destroying the scores it is added to.
- **A transformer's residual stream stays float** (adds that feed a normalization), and the
  linears writing into it keep int8 weights with activations quantized at run time.
- **A square root and what feeds it back to the squaring stay float** (a spectrum's power, a
  variance): they span the square of the signal's dynamic range.
- **A signal read raw keeps its level per call** (`level_inputs`: inputs whose calibration samples spread over
  more than edgekit.calibration.methods.LEVEL_SPREAD_DB, raw audio): from the input up to the first op that
  compresses a level (`level_path`), the convolutions and linears keep int8 weights and take their input
  quantized at run time, each call at its own scale, and nothing else on the path is quantized; one static
  scale set by the loud samples rounds a quiet one to zero (edgekit.converters.onnx_quantize does the same
  on ONNX graphs with float arithmetic on int8 weights).
- **A cat of very different ranges stays float** (a detector's pixel boxes beside its class
  scores), where the backends would give all its inputs one scale.
- **Gates in ops XNNPACK runs int8** (`gates_int8`, the gates to spell out). Its converter lowers SiLU to LOGISTIC
  and MUL, and hardsigmoid (a squeeze-and-excite gate) to ADD and MUL, in float between a DEQUANTIZE and a
  QUANTIZE: nothing observes the value between the two. Hardswish becomes an int8 HARD_SWISH, which
  LiteRT's XNNPACK delegate does not take: each one splits the delegated graph and runs in the
  interpreter's own kernel. SiLU is written x · sigmoid(x) and the product annotated (the sigmoid is the
  backend's, with its fixed output range); hardsigmoid is written clamp(x + 3, 0, 6) · 1/6, each step
  annotated, and hardswish x · hardsigmoid(x). The values are the same, and each op becomes an int8
  kernel XNNPACK runs. ExecuTorch's XNNPACK delegate runs hardsigmoid's div in float, between converts:
  there hardsigmoid alone is spelled out (its hardswish, one float op, is faster than four int8 ones).
- **Linears on N-D inputs become 2-D** for XNNPACK (`linears_2d=True`), which cannot build a
  static int8 linear on a 3-D input.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from edgekit.calibration.methods import mixed_scale
from edgekit.core.quant import unknown_layers

_CLAMPS = ("hardtanh.default", "hardtanh_.default")
_CLAMP_PRODUCERS = ("conv1d.default", "conv2d.default", "convolution.default", "linear.default", "add.Tensor")
_MATMULS = ("matmul.default", "bmm.default")
# Ops that combine a mask-like tensor with an activation: when one input is integer-derived, the
# output carries its range (or its meaning) and stays float.
_COMBINERS = ("add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor", "where.self", "masked_fill.Scalar",
              "masked_fill.Tensor", "maximum.default", "minimum.default")
_NORMS = ("layer_norm.default", "native_layer_norm.default", "rms_norm.default", "group_norm.default")
_PASS_THROUGH = ("dropout.default", "view.default", "reshape.default", "clone.default", "contiguous.default")
_INDEX_USERS = {"embedding.default": (1,), "index_select.default": (2,), "gather.default": (2,)}


def _name(node) -> str:
    """'add.Tensor' for torch.ops.aten.add.Tensor; '' for anything that is not an aten op."""
    target = getattr(node, "target", None)
    name = getattr(target, "_name", None) if node.op == "call_function" else None
    if not isinstance(name, str) or not name.startswith("aten::"):
        return ""
    op, _, overload = name[len("aten::"):].partition(".")
    return f"{op}.{overload or 'default'}"


def _dtype(node):
    val = node.meta.get("val") if hasattr(node, "meta") else None
    return getattr(val, "dtype", None)


def _is_float(node) -> bool:
    dtype = _dtype(node)
    return dtype is not None and dtype.is_floating_point


class EdgeQuantizer:
    """A PT2E quantizer made of a configured backend quantizer and edgekit's additions.

    `backend` is a litert-torch `PT2EQuantizer` or an ExecuTorch `XNNPACKQuantizer` whose global
    config is set, `dynamic_config` the backend's config for activations quantized at run time;
    `matmul_int8` says whether the backend runs activation × activation matmuls in int8,
    `linears_2d` whether it needs linears on 2-D inputs. Built by `make()`, which subclasses
    torchao's `Quantizer` on demand (no torch import here).
    """

    def __init__(self, backend: Any, dynamic_config: Any, *, matmul_int8: bool, linears_2d: bool,
                 gates_int8: tuple[str, ...] = (), add_fuses_clamp: bool = True, tables_uint8: bool = False,
                 source_fns: bool = False, float_layers: tuple[str, ...] = (), conv1d_per_call: bool = True):
        self.backend = backend
        self.float_layers = float_layers  # module paths kept float (a QuantSpec's overrides)
        self.config = backend.global_config
        self.dynamic_config = dynamic_config
        self.keep_float: set[str] = set()  # node names that stay float (pt2e.quantize sets them)
        self.level_inputs: tuple[int, ...] = ()  # the graph inputs, by position, whose level spreads (pt2e.observe sets them)
        self.matmul_int8 = matmul_int8
        self.linears_2d = linears_2d
        self.gates_int8 = gates_int8  # the gate ops spelled out in int8 steps: "silu", "hardsigmoid", "hardswish"
        self.add_fuses_clamp = add_fuses_clamp  # the lowering fuses add → clamp into one int8 kernel
        self.tables_uint8 = tables_uint8  # embedding tables uint8 per row: the form the runtime looks up directly
        self.source_fns = source_fns  # the backend finds adds, muls, cats and pools by the torch function they came from
        # False: the backend quantizes per call only linears and 2-D convs reading several channels (XNNPACK), so a
        # level path's 1-D convs are rewritten into those and the rest kept float
        self.conv1d_per_call = conv1d_per_call

    def transform_for_annotation(self, model):
        """The graph rewritten in place before anything is annotated (scalar clamps as hardtanh, integer scalars
        kept integer, N-D linears made 2-D where the backend needs it), then the backend's own transform."""
        _clamps_to_hardtanh(model)
        _keep_integer_scalars(model)
        if not self.conv1d_per_call and self.level_inputs:
            _level_conv1d_as_2d(model, self.level_inputs)
        if self.linears_2d:
            _linears_2d(model)
        if self.gates_int8:
            _gates_spelled_out(model, self.gates_int8)
        if self.source_fns:
            _source_fns_restored(model)
        return self.backend.transform_for_annotation(model)

    def annotate(self, model):
        """edgekit's patterns first (the static-only ones skipped for a dynamic config), then the backend's; then
        the annotations are stripped from everything that must stay float, `keep_float` and `float_layers` too."""
        dynamic = self.config.input_activation is not None and self.config.input_activation.is_dynamic
        _annotate_embeddings(model, self.config, self.tables_uint8)
        if not dynamic:
            _annotate_fused_clamps(model, self.config, self.add_fuses_clamp)
            if self.matmul_int8:
                _annotate_matmuls(model, self.config)
            if self.gates_int8:
                _annotate_gates(model, self.config, self.add_fuses_clamp)
        self.backend.annotate(model)
        _unquantize_integer_derived(model)
        if not dynamic:
            _float_residual_stream(model, self.dynamic_config.input_activation)
            _level_per_call(model, self.level_inputs, self.dynamic_config.input_activation, self.conv1d_per_call)
        for node in _squared_stretches(model) + _score_heads(model):
            _strip(node)
        for node in model.graph.nodes:
            if node.name in self.keep_float:
                _strip(node)
        for node in _layer_nodes(model, self.float_layers):
            _strip(node)
        _drop_dangling_shares(model)  # specs shared with what the steps above unquantized
        return model

    def validate(self, model) -> None:
        """The backend's own check of the annotated graph; edgekit adds none."""
        self.backend.validate(model)


def make(backend: Any, dynamic_config: Any, **flags):
    """An `EdgeQuantizer` that is also a torchao `Quantizer` (what prepare_pt2e takes); `flags` are EdgeQuantizer's."""
    from torchao.quantization.pt2e.quantizer import Quantizer

    class _Quantizer(EdgeQuantizer, Quantizer):
        def __init__(self):
            Quantizer.__init__(self)
            EdgeQuantizer.__init__(self, backend, dynamic_config, **flags)

    return _Quantizer()


def mixed_scale_cats(module, samples) -> set[str]:
    """Names of the cat nodes of `module` whose inputs span very different ranges on `samples`
    (tuples of input tensors), measured in float before quantizing: the backends give every input
    of a cat one shared scale."""
    import torch

    peaks: dict[str, list[float]] = {}

    class Ranges(torch.fx.Interpreter):
        """The float graph run as usual, keeping the peak magnitude of each input of every cat in `peaks`."""

        def run_node(self, node):
            """For a cat, raise each float input's peak |value| to this sample's where it is higher; then run it."""
            if _name(node) == "cat.default":
                for i, t in enumerate(self.env[a] for a in node.args[0] if a in self.env):
                    if t.is_floating_point() and t.numel():
                        spans = peaks.setdefault(node.name, [])
                        peak = float(t.detach().abs().max())
                        if i < len(spans):
                            spans[i] = max(spans[i], peak)
                        else:
                            spans.append(peak)
            return super().run_node(node)

    with torch.no_grad():
        for args in samples:
            Ranges(module).run(*args)
    return {name for name, spans in peaks.items() if mixed_scale(spans)}


# --- graph rewrites (before annotation) ---------------------------------------------------------

def _clamps_to_hardtanh(model) -> None:
    """clamp(x, lo, hi) with two scalar bounds is hardtanh(x, lo, hi): the form that fuses."""
    import torch

    changed = False
    for node in model.graph.nodes:
        if _name(node) == "clamp.default" and len(node.args) == 3 and _is_float(node.args[0]):
            lo, hi = node.args[1], node.args[2]
            if isinstance(lo, (int, float)) and isinstance(hi, (int, float)):
                node.target = torch.ops.aten.hardtanh.default
                node.args = (node.args[0], float(lo), float(hi))
                changed = True
    if changed:
        model.recompile()


def _gates_spelled_out(model, gates: tuple[str, ...]) -> None:
    """Of `gates`: silu(x) as mul(x, sigmoid(x)), hardsigmoid(x) as mul(hardtanh(add(x, 3), 0, 6), 1/6) and
    hardswish(x) as mul(x, hardsigmoid(x)) so written: the same values, in ops the backend quantizes one by one."""
    import torch

    aten = torch.ops.aten
    changed = False
    for node in list(model.graph.nodes):
        name = _name(node)
        if name.split(".")[0].rstrip("_") not in gates or not _is_float(node.args[0]):
            continue
        x = node.args[0]
        with model.graph.inserting_before(node):
            if name.startswith("silu"):
                steps = [model.graph.call_function(aten.sigmoid.default, (x,))]
                steps.append(model.graph.call_function(aten.mul.Tensor, (x, steps[0])))
            else:
                steps = [model.graph.call_function(aten.add.Tensor, (x, 3.0))]
                steps.append(model.graph.call_function(aten.hardtanh.default, (steps[0], 0.0, 6.0)))
                steps.append(model.graph.call_function(aten.mul.Tensor, (steps[1], 1 / 6)))
                if name.startswith("hardswish"):
                    steps.append(model.graph.call_function(aten.mul.Tensor, (x, steps[2])))
        for new in steps:
            new.meta.update({k: v for k, v in node.meta.items() if k != "source_fn_stack"})
        node.replace_all_uses_with(steps[-1])
        model.graph.erase_node(node)
        changed = True
    if changed:
        model.recompile()


def _source_fns_restored(model) -> None:
    """Each add, mul, cat, max pool and adaptive average pool tagged with the torch function it computes
    (`source_fn_stack`), where the graph does not say: a graph exported again from a saved or already exported
    program calls ATen ops only, and a backend that finds those ops by their source function (litert-torch's
    PT2EQuantizer) would leave them unannotated, float wherever no annotated neighbour happens to quantize
    their inputs and output (a residual add reading another one)."""
    import torch

    functional = torch.nn.functional
    sources = {"add.Tensor": torch.add, "mul.Tensor": torch.mul, "cat.default": torch.cat,
               "max_pool2d.default": functional.max_pool2d, "max_pool2d_with_indices.default": functional.max_pool2d,
               "adaptive_avg_pool2d.default": functional.adaptive_avg_pool2d, "relu.default": torch.nn.ReLU}
    for node in model.graph.nodes:
        source = sources.get(_name(node)) if node.op == "call_function" else None
        if source is not None and not node.meta.get("source_fn_stack"):
            node.meta["source_fn_stack"] = [(node.name, source)]


def _keep_integer_scalars(model) -> None:
    """Remove integer `x + 0` / `x * 1`; route other integer add/mul with a scalar to the .Scalar
    overloads, which the backends' scalar-to-tensor step leaves alone."""
    import torch

    scalar_overload = {"add.Tensor": torch.ops.aten.add.Scalar, "mul.Tensor": torch.ops.aten.mul.Scalar}
    noop = {"add.Tensor": 0, "mul.Tensor": 1}
    changed = False
    for node in list(model.graph.nodes):
        name = _name(node)
        if name not in scalar_overload or node.kwargs.get("alpha", 1) != 1:
            continue
        tensors = [a for a in node.args if isinstance(a, torch.fx.Node)]
        scalars = [a for a in node.args if isinstance(a, (int, float, bool))]
        if len(tensors) != 1 or len(scalars) != 1 or _is_float(tensors[0]) or _dtype(tensors[0]) is None:
            continue
        if scalars[0] == noop[name] and _dtype(tensors[0]) == _dtype(node):
            node.replace_all_uses_with(tensors[0])
            model.graph.erase_node(node)
        else:
            node.target = scalar_overload[name]
            node.args = (tensors[0], scalars[0])
        changed = True
    if changed:
        model.graph.eliminate_dead_code()
        model.recompile()


def _linears_2d(model) -> None:
    """linear(x) on an N-D x (a transformer's [batch, tokens, features]) becomes
    reshape → 2-D linear → reshape, the form XNNPACK's static int8 linear takes."""
    import torch

    view = torch.ops.aten.view.default
    changed = False
    for node in list(model.graph.nodes):
        val = node.meta.get("val")
        if _name(node) != "linear.default" or val is None or node.args[0].meta.get("val") is None:
            continue
        x = node.args[0]
        shape = list(x.meta["val"].shape)
        if len(shape) <= 2:
            continue
        with model.graph.inserting_before(node):
            flat = model.graph.call_function(view, (x, [-1, shape[-1]]))
            flat.meta = {**node.meta, "val": x.meta["val"].reshape(-1, shape[-1])}
            linear = model.graph.call_function(node.target, (flat, *node.args[1:]), dict(node.kwargs))
            linear.meta = {**node.meta, "val": val.reshape(-1, val.shape[-1])}
            back = model.graph.call_function(view, (linear, list(val.shape)))
            back.meta = dict(node.meta)
        node.replace_all_uses_with(back)
        model.graph.erase_node(node)
        changed = True
    if changed:
        model.recompile()


# --- annotations --------------------------------------------------------------------------------

def _annotation(node):
    from torchao.quantization.pt2e.quantizer.quantizer import Q_ANNOTATION_KEY

    return node.meta.get(Q_ANNOTATION_KEY)


def _annotated(nodes) -> bool:
    return any(a is not None and a._annotated for a in map(_annotation, nodes))


def _set(node, input_qspec_map: dict, output_qspec=None) -> None:
    from torchao.quantization.pt2e.quantizer import QuantizationAnnotation
    from torchao.quantization.pt2e.quantizer.quantizer import Q_ANNOTATION_KEY

    node.meta[Q_ANNOTATION_KEY] = QuantizationAnnotation(input_qspec_map=input_qspec_map,
                                                         output_qspec=output_qspec, _annotated=True)


def _annotate_embeddings(model, config, tables_uint8: bool) -> None:
    """Embedding tables: int8 weights (per row; `tables_uint8`: uint8 with a zero point per row); the indices
    and the float result untouched."""
    import torch

    spec = config.weight  # per output channel (axis 0): per row for a table
    if spec is None:
        return
    if tables_uint8:
        spec = dataclasses.replace(spec, dtype=torch.uint8, quant_min=0, quant_max=255,
                                   qscheme=torch.per_channel_affine_float_qparams)
    for node in model.graph.nodes:
        if _name(node) == "embedding.default" and not _annotated([node]):
            _set(node, {node.args[0]: spec})


def _annotate_fused_clamps(model, config, add_fuses_clamp: bool) -> None:
    """conv/linear/add → hardtanh as one unit: inputs on the producer, output on the clamp (an add only where
    the backend's lowering fuses the clamp into it)."""
    act, weight, bias = config.input_activation, config.weight, config.bias
    for clamp in model.graph.nodes:
        if _name(clamp) not in _CLAMPS:
            continue
        producer = clamp.args[0]
        if not hasattr(producer, "op") or _name(producer) not in _CLAMP_PRODUCERS or len(producer.users) != 1 \
                or (_name(producer) == "add.Tensor" and not add_fuses_clamp):
            continue
        inputs = {}
        if _name(producer) == "add.Tensor":
            operands = [a for a in producer.args[:2] if hasattr(a, "op")]
            if len(operands) != 2 or not all(_is_float(a) for a in operands):
                continue
            inputs = {a: act for a in operands}
            partition = [producer, clamp]
        else:
            inputs[producer.args[0]] = act
            inputs[producer.args[1]] = weight
            partition = [producer, clamp, producer.args[1]]
            if len(producer.args) > 2 and hasattr(producer.args[2], "op"):
                inputs[producer.args[2]] = bias
                partition.append(producer.args[2])
        if _annotated(partition):
            continue
        _set(producer, {k: v for k, v in inputs.items() if v is not None})
        _set(clamp, {}, config.output_activation)
        for n in partition[2:]:
            _set(n, {})


def _annotate_gates(model, config, add_fuses_clamp: bool) -> None:
    """The gates _gates_spelled_out wrote: x · sigmoid(x) as the product of two int8 values (the sigmoid is the
    backend's: a fixed output range); clamp(x + 3, 0, 6) · 1/6 with the add and clamp one unit where the backend
    fuses them (else each int8), then the product (the constants, after the backend made them tensors,
    quantized as the activations beside them)."""
    act, out = config.input_activation, config.output_activation
    for node in model.graph.nodes:
        if _name(node) != "mul.Tensor" or _annotated([node]) or len(node.args) < 2:
            continue
        first, second = node.args[:2]
        if not (hasattr(first, "op") and hasattr(second, "op")):
            continue
        if _gate_of(second, first) and _is_float(first):  # a SiLU's or a hardswish's product
            _set(node, {first: act, second: act}, out)
        elif _name(first) in _CLAMPS and second.op == "get_attr" and len(first.users) == 1:
            add = first.args[0]
            if _name(add) == "add.Tensor" and len(add.users) == 1 and add.args[1].op == "get_attr" \
                    and _is_float(add.args[0]) and not _annotated([add, first]):
                _set(add, {add.args[0]: act, add.args[1]: act}, None if add_fuses_clamp else out)
                _set(first, {} if add_fuses_clamp else {add: act}, out)
                _set(node, {first: act, second: act}, out)


def _gate_of(gate, x) -> bool:
    """Whether `gate` is sigmoid(x) or hardsigmoid(x) as _gates_spelled_out writes it."""
    if _name(gate) == "sigmoid.default":
        return gate.args[0] is x
    clamp = gate.args[0] if _name(gate) == "mul.Tensor" else None
    add = clamp.args[0] if hasattr(clamp, "op") and _name(clamp) in _CLAMPS else None
    return hasattr(add, "op") and _name(add) == "add.Tensor" and add.args[0] is x


def _annotate_matmuls(model, config) -> None:
    """Activation × activation matmul (attention): both operands and the result int8."""
    act = config.input_activation
    for node in model.graph.nodes:
        if _name(node) in _MATMULS and not _annotated([node]):
            operands = [a for a in node.args[:2] if hasattr(a, "op")]
            if len(operands) == 2 and all(_is_float(a) for a in operands):
                _set(node, {a: act for a in operands}, config.output_activation)


def _integer_derived(model) -> set:
    """Nodes whose value is computed from integer inputs and in-graph constants only (attention
    masks, position ids), and integer constants (arange)."""
    derived, constant = set(), set()
    for node in model.graph.nodes:
        if node.op == "placeholder":
            dtype = _dtype(node)
            if dtype is not None and not dtype.is_floating_point:
                derived.add(node)
        elif node.op == "get_attr":
            val = node.meta.get("val")
            if val is not None and val.numel() <= 1:
                constant.add(node)  # what the backends make of a Python scalar operand
        elif node.op == "call_function":
            inputs = node.all_input_nodes
            if all(i in constant for i in inputs):
                constant.add(node)  # zeros, full, arange, and arithmetic on them
            elif all(i in constant or i in derived for i in inputs):
                derived.add(node)
    return derived | {c for c in constant if c.op == "call_function" and not _is_float(c)}


def _unquantize_integer_derived(model) -> None:
    """Strip quantization from integer tensors, from everything computed from integer inputs
    only, from what feeds an index, and from the output of ops that combine such a tensor with an
    activation."""
    derived = _integer_derived(model)
    feeds_index = set()
    for node in model.graph.nodes:
        for i in _INDEX_USERS.get(_name(node), ()):
            if i < len(node.args) and hasattr(node.args[i], "op"):
                feeds_index.add(node.args[i])
    keep_exact = derived | feeds_index
    for node in model.graph.nodes:
        annotation = _annotation(node)
        if annotation is None:
            continue
        if node in keep_exact or not _is_float(node):
            annotation.output_qspec = None
        for i in list(annotation.input_qspec_map):
            if i in keep_exact or not _is_float(i):
                del annotation.input_qspec_map[i]
                if _name(node) in _COMBINERS:
                    annotation.output_qspec = None


def _float_residual_stream(model, dynamic_act) -> None:
    """Adds that feed a normalization (a transformer's residual stream) stay float, and so do the
    outputs that flow into them unchanged: that stream carries a few outlier channels that one
    per-tensor int8 scale cannot hold beside the rest (BERT's feed-forward outputs reach tens
    where most channels stay near one). A linear that writes into it keeps int8 weights and takes
    its input quantized at run time (`dynamic_act`), since both backends lower an int8 linear with
    a float output only in that form."""
    for add in model.graph.nodes:
        if _name(add) != "add.Tensor" or not any(_name(u) in _NORMS for u in add.users):
            continue
        _strip(add)
        for operand in add.args[:2]:
            node = operand
            while hasattr(node, "op") and _name(node) in _PASS_THROUGH and len(node.users) == 1:
                _strip(node)
                node = node.args[0]
            annotation = _annotation(node) if hasattr(node, "op") and len(node.users) == 1 else None
            if annotation is not None:
                annotation.output_qspec = None
                if _name(node) == "linear.default" and node.args[0] in annotation.input_qspec_map:
                    annotation.input_qspec_map[node.args[0]] = dynamic_act


# ops whose output's level follows their input's, as edgekit.converters.onnx_quantize's `_LEVEL`: a signal twice
# as loud gives outputs twice as large (biases and signs aside); the first of them write with weights
_LEVEL_WRITERS = ("conv1d.default", "conv2d.default", "convolution.default", "linear.default")
_LEVEL = _LEVEL_WRITERS + (
    "relu.default", "relu_.default", "leaky_relu.default", "prelu.default", "hardtanh.default", "max_pool1d.default",
    "max_pool2d.default", "avg_pool1d.default", "avg_pool2d.default", "adaptive_avg_pool1d.default",
    "adaptive_avg_pool2d.default", "mean.dim", "sum.dim_IntList", "amax.default", "pad.default",
    "constant_pad_nd.default", "abs.default", "sqrt.default", "pow.Tensor_Scalar", "square.default", "add.Tensor",
    "sub.Tensor", "mul.Tensor", "div.Tensor", "add.Scalar", "sub.Scalar", "mul.Scalar", "div.Scalar",
    "_native_batch_norm_legit_no_training.default")


def level_path(model, inputs: tuple[int, ...]) -> list:
    """The float nodes of `model`'s graph whose level follows that of its inputs at positions `inputs`: from them
    through convolutions, linears, ReLUs, pools, a spectrum's magnitude and layout (`_LEVEL`, `_MOVES`), up to
    the first op that compresses a level (a logarithm, a sigmoid or tanh, a recurrent layer, a normalization),
    as edgekit.converters.onnx_quantize.level_path finds it in an ONNX graph (Silero VAD: an STFT, its
    magnitude and four conv + ReLU before an LSTM)."""
    placeholders = [n for n in model.graph.nodes if n.op == "placeholder"]
    path = [placeholders[i] for i in inputs if i < len(placeholders)]
    for node in model.graph.nodes:  # topological order
        name = _name(node)
        if name in _LEVEL_WRITERS:
            data = node.args[:1] if len(node.args) > 1 and node.args[1] not in path else []
        elif name in _LEVEL or name == "cat.default":  # every operand that is a computed tensor
            operands = node.args[0] if name == "cat.default" else node.args
            data = [a for a in operands if hasattr(a, "op") and a.op != "get_attr" and not _constant(a)]
        elif name in _MOVES or getattr(node.target, "__name__", "") == "getitem":
            data = node.args[:1]
        else:
            continue
        if data and all(a in path for a in data) and _is_float(node):
            path.append(node)
    return [n for n in path if n.op != "placeholder"]


def writer(node) -> str | None:
    """"conv1d", "conv2d", "convolution" or "linear" for a node of those ops (the layer kinds `level_path` notes)."""
    return _name(node).split(".")[0] if _name(node) in _LEVEL_WRITERS else None


def _standard_conv_or_linear(node) -> bool:
    """Whether `node` is a linear or a 2-D conv reading more than one channel per group (XNNPACK's per-call int8)."""
    weight = node.args[1].meta.get("val") if hasattr(node.args[1], "meta") else None
    return _name(node) == "linear.default" or (weight is not None and weight.dim() == 4 and weight.shape[1] > 1)


def _level_conv1d_as_2d(model, inputs: tuple[int, ...]) -> None:
    """Each 1-D conv on the `level_path` of `inputs` rewritten in the form XNNPACK quantizes per call (a linear, or
    a 2-D conv reading more than one channel per group), the same values: one reading several channels per group
    becomes a 2-D conv of height 1; one reading a single channel (an STFT) a linear on its input's frames
    (`_as_framed_linear`); others stay (and float, `xnnpack_per_call`)."""
    graph = model.graph
    for i, node in enumerate(n for n in level_path(model, inputs) if _rewritable(n)):
        with graph.inserting_before(node):
            out = (_as_conv2d if _conv1d_args(node)[1].meta["val"].shape[1] > 1 else _as_framed_linear)(model, node, i)
        node.replace_all_uses_with(out)
        graph.erase_node(node)
    graph.eliminate_dead_code()
    model.recompile()


def _as_conv2d(model, node, i: int):
    """conv1d(x, w) as squeeze(conv2d(unsqueeze(x, 2), w[:, :, None]), 2), inserted in `model`'s graph."""
    import torch

    aten, graph = torch.ops.aten, model.graph
    x, w, bias, stride, padding, dilation, groups = _conv1d_args(node)
    name = f"_level_conv2d_{i}"
    model.register_buffer(name, _attr(model, w.target).detach()[:, :, None].clone())
    weight = graph.get_attr(name)
    weight.meta = {"val": w.meta["val"][:, :, None]}
    wide = _insert(graph, node, aten.unsqueeze.default, x, 2)
    conv = _insert(graph, node, aten.conv2d.default, wide, weight, bias, [1, stride[0]], [0, padding[0]],
                   [1, dilation[0]], groups)
    return _insert(graph, node, aten.squeeze.dims, conv, [2])


def _as_framed_linear(model, node, i: int):
    """conv1d(x, w) over one channel, its kernel a multiple of its stride, as a linear on x's frames: padded, cut
    into blocks of the stride, the kernel's blocks side by side (slices and a cat), [batch, frames, kernel] · W."""
    import torch

    aten, graph = torch.ops.aten, model.graph
    x, w, bias, stride, padding, _, _ = _conv1d_args(node)
    weight = _attr(model, w.target)
    out, channels, kernel = weight.shape
    step, pad = stride[0], padding[0]
    frames = (x.meta["val"].shape[-1] + 2 * pad - kernel) // step + 1
    blocks, shifts = frames + kernel // step - 1, kernel // step
    name = f"_level_linear_{i}"
    model.register_buffer(name, weight.detach().reshape(out, channels * kernel).clone())
    padded = _insert(graph, node, aten.constant_pad_nd.default, x, [pad, pad], 0.0) if pad else x
    cut = _insert(graph, node, aten.slice.Tensor, padded, 2, 0, blocks * step)
    split = _insert(graph, node, aten.reshape.default, cut, [-1, channels, blocks, step])
    parts = [_insert(graph, node, aten.slice.Tensor, split, 2, j, j + frames) for j in range(shifts)]
    framed = _insert(graph, node, aten.cat.default, parts, 3) if shifts > 1 else parts[0]
    moved = _insert(graph, node, aten.permute.default, framed, [0, 2, 1, 3])
    rows = _insert(graph, node, aten.reshape.default, moved, [-1, frames, channels * kernel])
    matrix = graph.get_attr(name)
    matrix.meta = {"val": w.meta["val"].reshape(out, channels * kernel)}
    linear = _insert(graph, node, aten.linear.default, rows, matrix, *([bias] if bias is not None else []))
    return _insert(graph, node, aten.permute.default, linear, [0, 2, 1])


def _rewritable(node) -> bool:
    """Whether `_level_conv1d_as_2d` rewrites the 1-D conv `node`: a constant weight and padding in samples, and
    more than one channel per group, or one group over one channel with no dilation and a kernel that is a
    multiple of the stride (`_as_framed_linear`)."""
    if _name(node) != "conv1d.default":
        return False
    _, w, _, stride, padding, dilation, groups = _conv1d_args(node)
    weight = w.meta.get("val") if hasattr(w, "meta") else None
    if w.op != "get_attr" or weight is None or not isinstance(padding[0], int):
        return False
    return weight.shape[1] > 1 or (groups == 1 and list(dilation) == [1] and weight.shape[-1] % stride[0] == 0)


def _conv1d_args(node) -> tuple:
    """A conv1d node's (input, weight, bias, stride, padding, dilation, groups), its defaults filled in."""
    return (*node.args, *(None, [1], [0], [1], 1)[len(node.args) - 2:])


def xnnpack_per_call(node) -> bool:
    """Whether XNNPACK quantizes the level path's conv or linear `node` per call: a linear, a standard 2-D conv,
    or a 1-D conv `_level_conv1d_as_2d` rewrites into one of those; the others stay float."""
    return _standard_conv_or_linear(node) or _rewritable(node)


def _attr(model, target: str):
    """The tensor a get_attr node's `target` ("conv.weight", "basis") names on `model`."""
    for part in target.split("."):
        model = getattr(model, part)
    return model


def _insert(graph, like, target, *args):
    """A call of the aten op `target` on `args` at the graph's insertion point, with the node `like`'s metadata (its
    module, which names the layer) and a value computed from the arguments' values."""
    def value(a):
        return type(a)(value(b) for b in a) if isinstance(a, (list, tuple)) else a.meta["val"] if hasattr(a, "meta") else a

    made = graph.call_function(target, args)
    made.meta = {**like.meta, "val": target(*value(args))}
    return made


def _upstream(node):
    """`node` and every node it is computed from, each once."""
    todo, seen = [node], set()
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            yield node
            todo += node.all_input_nodes


def _constant(node) -> bool:
    """Whether `node` is computed from constants only (parameters, buffers, literals)."""
    return not any(n.op == "placeholder" for n in _upstream(node))


def _level_per_call(model, inputs: tuple[int, ...], dynamic_act, conv1d_per_call: bool) -> None:
    """On the `level_path` of `inputs`: the convolutions and linears keep their int8 weights and take their input
    quantized at run time (`dynamic_act`, each call at its own scale); nothing else is quantized, nor the path's
    last values where the ops after it read them. Without `conv1d_per_call` (XNNPACK: per call, standard 2-D
    convs only), a 1-D or depthwise conv the rewrite left stays float."""
    path = level_path(model, inputs) if inputs else []
    for node in path:
        annotation = _annotation(node)
        if annotation is None:
            continue
        annotation.output_qspec = None
        if _name(node) in _LEVEL_WRITERS and node.args[0] in annotation.input_qspec_map and (
                conv1d_per_call or xnnpack_per_call(node)):
            annotation.input_qspec_map[node.args[0]] = dynamic_act
        else:
            annotation.input_qspec_map = {}
    for user in {u for n in path for u in n.users if u not in path}:
        annotation = _annotation(user)
        if annotation is not None:
            for n in path:
                annotation.input_qspec_map.pop(n, None)


_ROOTS = ("sqrt.default", "rsqrt.default", "log.default", "log10.default", "log2.default")
_SUMS = ("add.Tensor", "add.Scalar", "sum.dim_IntList", "mean.dim", "mul.Tensor", "mul.Scalar", "div.Tensor",
         "div.Scalar", "sub.Tensor", "clamp.default", "clamp_min.default", "maximum.default", "matmul.default",
         "mm.default", "bmm.default")


def _squared_stretches(model) -> list:
    """The nodes from a squaring (`pow(x, 2)`, `x * x`, `square`) to the square root that undoes it or the
    logarithm that compresses it (a log-mel spectrogram), root included, as
    edgekit.converters.onnx_quantize.squared_stretches finds them in an ONNX graph: a power spectrum or a
    variance spans the square of its signal's dynamic range, which one int8 scale cannot hold."""
    def squaring(node) -> bool:
        name = _name(node)
        if name == "pow.Tensor_Scalar":
            return len(node.args) > 1 and node.args[1] == 2
        return name == "square.default" or (name == "mul.Tensor" and node.args[0] is node.args[1])

    out = []
    for root in (n for n in model.graph.nodes if _name(n) in _ROOTS):
        stretch, todo, found = [root], [root.args[0]], False
        while todo:
            node = todo.pop()
            if not hasattr(node, "op") or node in stretch:
                continue
            if squaring(node):
                stretch.append(node)
                found = found or _name(root) in _SQRTS or _reads_the_input(node.args[0])
            elif _name(node) in _SUMS or _name(node) in _LAYOUT:
                stretch.append(node)
                todo += [a for a in node.args if hasattr(a, "op")]
        if found:
            out += stretch
    return out


_SQRTS = ("sqrt.default", "rsqrt.default")
# what a signal goes through from the input to the squaring of its spectrum (a front end)
_FRONT_END = ("conv1d.default", "conv2d.default", "linear.default", "matmul.default", "mm.default", "mul.Tensor",
              "mul.Scalar", "pad.default", "constant_pad_nd.default", "slice.Tensor", "split.Tensor",
              "split_with_sizes.default", "select.int", "unfold.default", "cat.default", "expand.default")


def _reads_the_input(node) -> bool:
    """Whether `node` is computed from the model's input through a front end only (_FRONT_END and layout ops):
    a logarithm's stretch is kept float only where the power is the input signal's (a log-mel front end), as
    edgekit.converters.onnx_quantize finds it; the log of a computed magnitude lost cosine kept float."""
    # the input, a constant (a window, a DFT basis), or a front end's step
    return all(n.op in ("placeholder", "get_attr") or getattr(n.target, "__name__", "") == "getitem"
               or _name(n) in _FRONT_END + _LAYOUT for n in _upstream(node))


_LAYOUT = ("view.default", "reshape.default", "_unsafe_view.default", "permute.default", "transpose.int",
           "squeeze.dim", "squeeze.dims", "unsqueeze.default", "flatten.using_ints", "clone.default")
_MOVES = _LAYOUT + ("cat.default", "slice.Tensor", "split.Tensor", "split_with_sizes.default", "select.int",
                    "expand.default")
_WRITERS = ("conv1d.default", "conv2d.default", "conv_transpose2d.input", "linear.default", "addmm.default", "mm.default")


def _score_heads(model) -> list:
    """Every score head, as edgekit.converters.onnx_score_heads finds them in an ONNX graph: a sigmoid that
    is not half of a SiLU and whose probabilities reach the output through data movement only (a
    detector's class scores), the data movement back to the layers writing its logits, and those layers.
    int8 probabilities round every score under 0.002 to zero; float, the scores keep their resolution."""
    users = {n: list(n.users) for n in model.graph.nodes}

    def moves(node) -> bool:
        return _name(node) in _MOVES or node.op == "call_function" and getattr(node.target, "__name__", "") == "getitem"

    def reaches_output(node, seen) -> bool:
        for user in users.get(node, []):
            if user.op == "output":
                return True
            if moves(user) and user not in seen:
                seen.add(user)
                if reaches_output(user, seen):
                    return True
        return False

    def silu(node) -> bool:
        return any(_name(u) == "mul.Tensor" and node.args[0] in u.args for u in users.get(node, []))

    out = []
    for head in (n for n in model.graph.nodes if _name(n) == "sigmoid.default" and not silu(n) and reaches_output(n, set())):
        out.append(head)
        todo = [head.args[0]]
        while todo:
            node = todo.pop()
            if not hasattr(node, "op") or node in out:
                continue
            if _name(node) in _WRITERS:
                out.append(node)
            elif moves(node):
                out.append(node)
                todo += [a for a in node.args if hasattr(a, "op")]
    return out


def module_path(node) -> str | None:
    """The module path of the source module a graph node was traced from (what `edgekit layers` names
    a torch layer by), or None for the model's top level."""
    stack = node.meta.get("nn_module_stack") or {}
    return list(stack.values())[-1][0] or None if stack else None


def _layer_nodes(model, layers: tuple[str, ...]) -> list:
    """The annotated nodes that make up each named layer: the nodes traced from that module, with
    the nodes they are fused with (a conv with its BatchNorm and clamp: a unit whose inner outputs
    are not quantized), so that keeping a layer float keeps the whole unit float."""
    if not layers:
        return []
    by_layer: dict[str, list] = {}
    for node in model.graph.nodes:
        path = module_path(node) if node.op == "call_function" else None
        if path:
            by_layer.setdefault(path, []).append(node)
    missing = [layer for layer in layers if layer not in by_layer]
    if missing:
        raise unknown_layers(missing, set(by_layer), "the model")
    unit = []
    for layer in layers:
        for node in by_layer[layer]:
            if _annotation(node) is not None:
                unit += [n for n in _fused_unit(node) if n not in unit]
    return unit


def _fused_unit(node) -> list:
    """`node` and the nodes quantized with it as one unit: along edges that carry no quantization
    (a conv's output into its BatchNorm and clamp, whose output alone is quantized)."""
    def inner_edge(producer, consumer) -> bool:
        p, c = _annotation(producer), _annotation(consumer)
        return (p is not None and c is not None and p.output_qspec is None and len(producer.users) == 1
                and producer not in c.input_qspec_map)

    unit = [node]
    head = node
    while head.args and hasattr(head.args[0], "op") and inner_edge(head.args[0], head):
        head = head.args[0]
        unit.insert(0, head)
    tail = node
    while len(tail.users) == 1 and inner_edge(tail, next(iter(tail.users))):
        tail = next(iter(tail.users))
        unit.append(tail)
    return unit


def _strip(node) -> None:
    annotation = _annotation(node)
    if annotation is not None:
        annotation.output_qspec = None
        annotation.input_qspec_map = {}


def _drop_dangling_shares(model) -> None:
    """A spec shared with an edge or node that is no longer quantized is dropped too."""
    from torchao.quantization.pt2e.quantizer import SharedQuantizationSpec

    def alive(spec) -> bool:
        if not isinstance(spec, SharedQuantizationSpec):
            return True
        edge_or_node = spec.edge_or_node
        if isinstance(edge_or_node, tuple):
            producer, consumer = edge_or_node
            a = _annotation(consumer)
            return a is not None and producer in a.input_qspec_map and alive(a.input_qspec_map[producer])
        a = _annotation(edge_or_node)
        return a is not None and a.output_qspec is not None and alive(a.output_qspec)

    changed = True
    while changed:
        changed = False
        for node in model.graph.nodes:
            annotation = _annotation(node)
            if annotation is None:
                continue
            if annotation.output_qspec is not None and not alive(annotation.output_qspec):
                annotation.output_qspec, changed = None, True
            for i, spec in list(annotation.input_qspec_map.items()):
                if not alive(spec):
                    del annotation.input_qspec_map[i]
                    changed = True
