"""torch → ptl: the legacy PyTorch Mobile lite-interpreter format; int8 through FX with qnnpack.

fp32 traces the model with `torch.jit.trace` and saves it for the lite interpreter
(`optimize_for_mobile` needs XNNPACK, which this torch build lacks: see STACK.md).

int8 is FX graph mode post-training static quantization for the `qnnpack` engine (what PyTorch
Mobile runs on ARM): quint8 activations observed with the calibration method's observer,
per-channel symmetric qint8 weights. FX matches `nn.Conv2d`, `nn.BatchNorm2d`, `nn.Linear`, ...,
while the source arrives as a torch.export graph of ATen calls with its weights as attributes,
so `_modular` first rebuilds that graph from modules (conv + batch norm + activation then fuse, as
in an eager model). ATen calls it does not know stay as they are and run in float.

torch.ao.quantization has no percentile or entropy (KL) observer, so only these are offered:

    minmax → MinMaxObserver      (the range seen)
    mse    → HistogramObserver   (the range that minimises the L2 quantization error)

The same model gives the same bytes, whoever calls and whatever ran before in the process:

- `torch.jit.trace` records, as each op's source range, the whole Python stack of the tracing
  process (absolute paths and line numbers of the caller, down to the command line or the test
  runner, and FX's per-process `<eval_with_key>.N` file names); the archive keeps it in
  `code/*.debug_pkl`, and its `.data/serialization_id` is a checksum of every record. The traced
  graphs' source ranges are cleared before saving; the code and the bytecode are unchanged.
- module types are named in a process-wide compilation unit, where a name already taken by an
  earlier trace gets a process-wide counter (`___torch_mangle_15`) in the file names, the pickles
  and the bytecode. Each conversion traces into a compilation unit of its own.
"""

from __future__ import annotations

import contextlib
import copy
import operator
import warnings
from pathlib import Path

import numpy as np

from edgekit.core.artifact import ModelArtifact
from edgekit.core.errors import ConversionFailed, first_line
from edgekit.converters.base import ConvertContext, Converter
from edgekit.core.quant import Capabilities, Precision

METHODS = ("minmax", "mse")
ENGINE = "qnnpack"
CALIB_BATCH = 32  # calibration samples per forward pass, when the model's first axis is a batch axis


class TorchToPtl(Converter):
    """The torch → ptl edge, legacy: fp32 and static int8 only, minmax or mse calibration, no layers kept back,
    no whole-model passes, no integer I/O; costed so another route wins when there is one."""

    name = "torch_to_ptl"
    source = "torch"
    target = "ptl"
    precisions = (Precision.FP32, Precision.INT8)
    capabilities = Capabilities(
        methods=METHODS,
    )
    extra = "torch"
    cost = 1.5  # a legacy format: never the cheaper route when another one exists
    tools = ("torch",)

    def convert(self, src: ModelArtifact, out_path: Path, precision: str, ctx: ConvertContext) -> ModelArtifact:
        """A TorchScript source at fp32 saved as it is; else the export traced (int8: FX-quantized for qnnpack
        first) and saved byte-reproducibly for the lite interpreter. The process's quantized engine is restored."""
        import torch

        source = ctx.source
        args = source.example_args()
        engine = torch.backends.quantized.engine
        if precision == Precision.INT8:
            torch.backends.quantized.engine = ENGINE  # weights are packed for the engine in use
        try:
            if precision == Precision.FP32 and isinstance(source.module, torch.jit.ScriptModule):
                _save(source.module, out_path)  # already TorchScript: save it as it is
            else:
                graph = _float_graph(source.exported().module())
                if precision == Precision.INT8:
                    graph = _quantize(graph, ctx.calibration, src.signature.input_names, args, ctx.spec.method)
                with _own_compilation_unit() as cu, torch.no_grad(), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    module = torch.jit.trace(graph, args, _store_inputs=False,  # no example inputs in the file
                                             _compilation_unit=cu)
                    _clear_source_ranges(module)
                    _save(module, out_path)
        finally:
            torch.backends.quantized.engine = engine
        return ModelArtifact("ptl", str(out_path), src.signature, precision)


def _save(module, out_path: Path) -> None:
    """Save a ScriptModule for the lite interpreter."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # "Lite Interpreter is deprecated"
        module._save_for_lite_interpreter(str(out_path))


@contextlib.contextmanager
def _own_compilation_unit():
    """A new TorchScript compilation unit for the module types of one trace.

    Tracing registers a type per module in the process-wide compilation unit
    (`torch.jit._state._python_cu`, which torch's C++ side looks up by that name), and a name taken
    there already is mangled with a process-wide counter: a model traced after another one (or
    twice) would be saved under other type names (`...___torch_mangle_15.py` instead of
    `..._0.py`). A fresh unit gives every conversion the same names. The module must be saved
    before the unit goes: its types keep only a weak reference to it.
    """
    import torch
    import torch.jit._state as state

    saved, state._python_cu = state._python_cu, torch._C.CompilationUnit()
    try:
        yield state._python_cu
    finally:
        state._python_cu = saved


def _clear_source_ranges(module) -> None:
    """Drop the tracing process's Python stack from every graph of a traced module (all its methods
    and submodules): each node takes the empty source range, scope and call stack of a new node."""
    for m in module.modules():
        for name in m._c._method_names():
            graph = m._c._get_method(name).graph
            blank = graph.create("prim::Constant")  # never inserted: only its empty metadata is copied
            blocks = [graph.block()]
            while blocks:
                for node in blocks.pop().nodes():
                    node.copyMetadata(blank)
                    blocks.extend(node.blocks())
            blank.destroy()


def _float_graph(exported_module):
    """A copy of torch.export's module without its input guards (`_guards_fn`), which trace badly."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch's own pytree deprecation, from deepcopy
        gm = copy.deepcopy(exported_module)
    for node in list(gm.graph.nodes):
        if node.op == "call_module" and node.target == "_guards_fn":
            gm.graph.erase_node(node)
    gm.graph.lint()
    gm.recompile()
    gm.eval()
    return gm


def _quantize(graph, calibration, input_names, example_args, method: str):
    """FX post-training static quantization for qnnpack, calibrated on every calibration sample."""
    import torch
    from torch.ao.quantization import QConfig, get_default_qconfig_mapping
    from torch.ao.quantization.observer import (FixedQParamsObserver, HistogramObserver, MinMaxObserver,
                                                PerChannelMinMaxObserver, ReuseInputObserver)
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    act = {"minmax": MinMaxObserver, "mse": HistogramObserver}[method].with_args(
        dtype=torch.quint8, reduce_range=False)
    weight = PerChannelMinMaxObserver.with_args(dtype=torch.qint8, qscheme=torch.per_channel_symmetric,
                                                quant_min=-127, quant_max=127, eps=2 ** -12)
    mapping = get_default_qconfig_mapping(ENGINE)
    # The default mapping keeps fixed ranges for hardsigmoid, sigmoid, tanh and softmax, and
    # per-tensor weights for transposed convolutions: swap in the chosen observer everywhere else.
    for key, qc in list(mapping.object_type_qconfigs.items()):
        if qc is not None and not isinstance(qc.activation(), (FixedQParamsObserver, ReuseInputObserver)):
            mapping.set_object_type(key, QConfig(activation=act, weight=qc.weight))
    mapping.set_global(QConfig(activation=act, weight=weight))

    model = _modular(graph)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation notices
        try:
            prepared = prepare_fx(model, mapping, example_args)
        except Exception as e:
            raise ConversionFailed(
                f"FX quantization (qnnpack) cannot prepare this model: {type(e).__name__}: {first_line(e)}",
                converter=TorchToPtl.name,
                fix="convert it to ptl at fp32, or try int8 on another target (edgekit graph lists them)") from e
        samples = [calibration.inputs[n] for n in input_names]
        step = CALIB_BATCH if _batches(model, samples) else 1
        with torch.no_grad():
            for i in range(0, len(calibration), step):
                prepared(*[torch.from_numpy(np.array(_stack(x[i:i + step]), copy=True)) for x in samples])
        return convert_fx(prepared)


def _stack(block: np.ndarray) -> np.ndarray:
    """(k, 1, C, H, W) → (k, C, H, W): k samples of a batch-of-one input as one batch."""
    return block.reshape(block.shape[0] * block.shape[1], *block.shape[2:]) if block.ndim > 1 else block


def _batches(model, samples: list[np.ndarray]) -> bool:
    """Whether the model's first axis is a batch axis: two samples at once give both outputs."""
    import torch

    if any(x.ndim < 2 or x.shape[1] != 1 or len(x) < 2 for x in samples):
        return False
    try:
        with torch.no_grad():
            both = _flat(model(*[torch.from_numpy(np.array(_stack(x[:2]), copy=True)) for x in samples]))
            one = [_flat(model(*[torch.from_numpy(np.array(x[i], copy=True)) for x in samples])) for i in (0, 1)]
        return all(b.shape[0] == 2 * o.shape[0] and torch.allclose(b, torch.cat([o, p]), rtol=1e-4, atol=1e-5)
                   for b, o, p in zip(both, one[0], one[1]))
    except Exception:
        return False


def _flat(out) -> list:
    return [t for o in out for t in _flat(o)] if isinstance(out, (tuple, list)) else [out]


def _modular(gm):
    """Rebuild an exported ATen graph from nn.Modules and torch functions, the way FX quantization
    matches patterns. Weights become module parameters; unknown calls are kept as they are."""
    import torch

    aten = torch.ops.aten
    functions = {aten.add.Tensor: operator.add, aten.mul.Tensor: operator.mul, aten.flatten.using_ints: torch.flatten,
                 aten.cat.default: torch.cat, aten.mean.dim: torch.mean}
    rebuilt = _Rebuilt(gm)
    graph, env, value = rebuilt.graph, rebuilt.env, rebuilt.value
    for node in gm.graph.nodes:
        a, t = node.args, node.target
        if node.op == "placeholder":
            env[node] = graph.placeholder(node.name)
        elif node.op == "output":
            graph.output(torch.fx.node.map_arg(a[0], value))
        elif node.op in ("get_attr", "call_module"):
            continue  # constants are read on use; call_module: only torch.export's guards
        elif (layer := rebuilt.layer(node)) is not None:
            rebuilt.module(layer, node, a[0])
        elif t in functions and not node.kwargs:
            env[node] = graph.call_function(functions[t], torch.fx.node.map_arg(a, value))
        else:  # kept as it is: runs in float between dequantize and quantize
            env[node] = graph.call_function(t, torch.fx.node.map_arg(a, value),
                                            torch.fx.node.map_arg(node.kwargs, value))
    return torch.fx.GraphModule(rebuilt.root, graph).eval()


class _Rebuilt:
    """The graph `_modular` builds from an exported one (`gm`): its root module holding the layers and
    constants, the new graph, and each old node's new node (`env`)."""

    def __init__(self, gm):
        import torch
        from torch import nn

        self.gm, self.root, self.graph, self.env = gm, nn.Module(), torch.fx.Graph(), {}

    def const(self, node):
        """The tensor behind a get_attr node, else None."""
        import torch

        if not isinstance(node, torch.fx.Node) or node.op != "get_attr":
            return None
        obj = self.gm
        for part in node.target.split("."):
            obj = getattr(obj, part)
        return obj.detach().clone() if isinstance(obj, torch.Tensor) else None

    def consts(self, *nodes) -> bool:
        """Whether every node is a constant tensor (None: an absent optional one)."""
        return all(n is None or self.const(n) is not None for n in nodes)

    def value(self, node):
        """The new graph's node for `node`; constants become buffers on first use."""
        if node not in self.env:
            if self.const(node) is None:  # a subgraph: the branches of torch.cond, the body of a loop
                raise ConversionFailed(
                    f"FX quantization cannot take control flow: the exported graph passes the subgraph "
                    f"{node.target!r} to {', '.join(str(u.target) for u in node.users)}",
                    converter=TorchToPtl.name,
                    fix="convert it to ptl at fp32, or try int8 on another target (edgekit graph lists them)")
            name = f"_const_{len(self.root._buffers)}"
            self.root.register_buffer(name, self.const(node))
            self.env[node] = self.graph.get_attr(name)
        return self.env[node]

    def module(self, mod, node, x) -> None:
        """`mod` as the new graph's node for `node`, applied to `x`."""
        name = f"{type(mod).__name__.lower()}_{len(self.root._modules)}"
        self.root.add_module(name, mod.eval())
        self.env[node] = self.graph.call_module(name, (self.value(x),))

    def layer(self, node):
        """The nn.Module a call of the exported graph is (a conv, linear or batch norm with constant weights, an
        activation, a pool), or None."""
        import torch
        from torch import nn

        aten = torch.ops.aten
        activations = {
            aten.relu.default: nn.ReLU, aten.hardswish.default: nn.Hardswish, aten.hardsigmoid.default: nn.Hardsigmoid,
            aten.relu6.default: nn.ReLU6, aten.sigmoid.default: nn.Sigmoid, aten.tanh.default: nn.Tanh,
            aten.silu.default: nn.SiLU,
        }
        pools = {aten.adaptive_avg_pool2d.default: nn.AdaptiveAvgPool2d, aten.max_pool2d.default: nn.MaxPool2d,
                 aten.avg_pool2d.default: nn.AvgPool2d}
        a, t, const = node.args, node.target, self.const

        def param(x):
            return nn.Parameter(x, requires_grad=False)

        if t == aten.conv2d.default and self.consts(*a[1:3]):
            w, b = const(a[1]), const(a[2]) if len(a) > 2 else None
            stride, padding, dilation, groups = (*a[3:7], *(1, 0, 1, 1)[len(a[3:7]):])
            conv = nn.Conv2d(w.shape[1] * groups, w.shape[0], tuple(w.shape[2:]), stride, padding, dilation, groups,
                             bias=b is not None)
            conv.weight, conv.bias = param(w), None if b is None else param(b)
            return conv
        if t == aten.linear.default and self.consts(*a[1:3]):
            w, b = const(a[1]), const(a[2]) if len(a) > 2 else None
            linear = nn.Linear(w.shape[1], w.shape[0], bias=b is not None)
            linear.weight, linear.bias = param(w), None if b is None else param(b)
            return linear
        if t == aten.batch_norm.default and not a[5] and all(const(x) is not None for x in a[1:5]):
            w, b, mean, var = (const(x) for x in a[1:5])
            rank = node.meta["val"].dim() if "val" in node.meta else 4
            bn = {4: nn.BatchNorm2d, 5: nn.BatchNorm3d}.get(rank, nn.BatchNorm1d)(len(mean), eps=a[7], momentum=a[6])
            bn.weight, bn.bias = param(w), param(b)
            bn.running_mean.copy_(mean)
            bn.running_var.copy_(var)
            return bn
        if t in activations and len(a) == 1:
            return activations[t]()
        if t == aten.hardtanh.default and len(a) == 3:
            return nn.ReLU6() if tuple(a[1:]) == (0.0, 6.0) else nn.Hardtanh(*a[1:])
        if t in pools:
            return pools[t](*a[1:])
        return None
