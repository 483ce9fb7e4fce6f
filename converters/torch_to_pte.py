"""torch → pte: torch.export, then ExecuTorch lowering with the XNNPACK partitioner.

int8 and int8-dynamic go through PT2E with ExecuTorch's XNNPACKQuantizer; fp16 exports a half
copy of the model behind float32 casts, so callers keep float32 I/O. --int8-io strips the
boundary quantize/dequantize (ExecuTorch's quantize_io pass) and writes the parameters beside
the program (see edgekit.core.io_params).
"""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path

from edgekit.core import io_params
from edgekit.core.artifact import ArtifactMeta, LayerNote, ModelArtifact
from edgekit.core.errors import ConversionFailed, first_line
from edgekit.core.quant import Precision, QuantSpec
from edgekit.calibration import pt2e, pt2e_statistics
from edgekit.calibration.data import SampleSet
from edgekit.converters import pt2e_int8, pte_layers, pte_partitions
from edgekit.converters.base import ConvertContext, Converter


class TorchToPte(Converter):
    """The torch → pte edge: ExecuTorch programs delegated to XNNPACK; a layer kept back from int8 can only
    stay float (no int16 activations)."""

    name = "torch_to_pte"
    source = "torch"
    target = "pte"
    precisions = (Precision.FP32, Precision.FP16, Precision.INT8, Precision.INT8_DYNAMIC)
    capabilities = pt2e.CAPABILITIES
    measures_before_lowering = True  # auto ranks its candidates by their PT2E graphs (quantized_outputs)
    traces_from_source = True  # a .pte runs as one XNNPACK call: its layers are traced on its PT2E graph
    extra = "executorch"
    cost = 1.0
    tools = ("torch", "executorch", "torchao")

    def convert(self, src: ModelArtifact, out_path: Path, precision: str, ctx: ConvertContext) -> ModelArtifact:
        """fp32 as exported, fp16 behind float32 casts, int8 through PT2E; lowered to XNNPACK, the layers its
        passes fail on left to the portable kernels (`outside_delegate`). Integer I/O for static int8 only."""
        import torch

        source = ctx.source
        args = source.example_args()
        files = [str(out_path)]
        if precision == Precision.FP32:
            program = source.exported()
        elif precision == Precision.FP16:
            # A deep copy: .half() would otherwise change the source model's shared weights.
            program = torch.export.export(_fp16_wrapper()(copy.deepcopy(source.exported().module())), args)
        else:
            dynamic = precision == Precision.INT8_DYNAMIC
            _, quantized = pt2e_int8.quantized_graph(src, _unrolled(ctx), *_xnnpack(), "xnnpack", dynamic=dynamic,
                                                     example_args=args)
            program = torch.export.export(quantized, args)
            if ctx.spec.int8_io and not dynamic:
                files.append(str(_integer_io(program, src, out_path)))
        # the re-exported int8 graph no longer names its modules: whether it is recurrent is the source's
        lowered, left_out = lower(program, recurrent=pte_partitions.is_recurrent(source.exported()))
        out_path.write_bytes(lowered.to_executorch(_backend_config(precision)).buffer)
        kept = _kept_float(source.exported()) if precision in (Precision.INT8, Precision.INT8_DYNAMIC) else ()
        if precision == Precision.INT8 and ctx.calibration is not None:
            kept += tuple(note for note in pt2e.level_notes(source.exported().module(), ctx.calibration,
                                                            src.signature.input_names, "xnnpack")
                          if note.layer not in ctx.spec.layers("float"))
        return ModelArtifact("pte", str(out_path), src.signature, precision, files=tuple(files),
                             meta=ArtifactMeta(outside_delegate=tuple(left_out), kept_float=kept))

    @classmethod
    def trace_layers(cls, source, calibration: SampleSet, spec, inputs: dict) -> list:
        """The int8 .pte's layers ranked on `inputs`, traced on the PT2E graph it is lowered from
        (edgekit.converters.pte_layers); `spec` a QuantSpec, or a calibration method's name for full int8."""
        spec = QuantSpec(Precision.INT8, spec) if isinstance(spec, str) else spec
        return pte_layers.trace(source, quantize_int8(source, calibration, spec), inputs)

    def quantized_outputs(self, src: ModelArtifact, ctx: ConvertContext, samples: SampleSet) -> list:
        """The outputs on `samples` of the PT2E graph `convert` would lower for ctx.spec, in torch."""
        _, graph = pt2e_int8.quantized_graph(src, _unrolled(ctx), *_xnnpack(), "xnnpack")
        return pt2e_statistics.outputs(graph, src, samples)


# Unrolled steps of recurrent layers an int8 .pte quantizes: XNNPACK's lowering of an int8 step (its linears,
# gates and their quantize/dequantize pairs) took about 5 s on 2 cores (a 1-layer LSTM of hidden size 64 over 20
# steps: 132 s), linear in the steps, so 48 steps stay within a few minutes.
MAX_INT8_STEPS = 48


def _unrolled(ctx: ConvertContext) -> ConvertContext:
    """`ctx`, its source's recurrent layers unrolled for PT2E if it has any and they unroll into at most
    MAX_INT8_STEPS steps (XNNPACKQuantizer leaves an `aten.lstm` float whole; see
    edgekit.converters.pte_partitions); as it is otherwise (`_kept_float` says which layers that leaves float)."""
    if not pte_partitions.is_recurrent(ctx.source.exported()) or _kept_float(ctx.source.exported()):
        return ctx
    return replace(ctx, source=pte_partitions.UnrolledSource(ctx.source))


def _kept_float(program) -> tuple[LayerNote, ...]:
    """The recurrent layers an int8 .pte of `program` keeps float, with why: all of them when they unroll into
    more than MAX_INT8_STEPS steps; none otherwise."""
    found = pte_partitions.recurrent_steps(program)
    total = sum(steps for _, _, steps in found)
    if total <= MAX_INT8_STEPS:
        return ()
    why = (f"its recurrent layers unroll into {total} steps, over the {MAX_INT8_STEPS} an int8 .pte quantizes: "
           f"XNNPACK lowers an int8 step in about 5 s, so {total} would take about {total * 5 // 60} min; they stay "
           "float, lowered as at fp32 (tflite and onnx quantize them at any length)")
    return tuple(LayerNote(layer, op, why) for layer, op, _ in found)


MAX_LEFT_OUT = 8  # layers lowering may leave out of the XNNPACK delegate before it gives up


def lower(program, recurrent: bool | None = None):
    """`program` lowered with the XNNPACK partitioner, and the layers left out of the delegate.

    A recurrent program (`recurrent`; by default, whether its nodes name a recurrent layer) has the view ops
    between its unrolled steps rewritten into ones XNNPACK takes (edgekit.converters.pte_partitions), so that
    its steps lower as one partition, not one each.

    XNNPACK's lowering passes assert on some patterns they accept in partitioning (its channels-last
    pass on a PReLU after a Linear: "Attempting to convert non-NHWC compatible node to NHWC"). The node
    a failure was handling is found in the traceback; its layer's op is left out of the partition
    (ExecuTorch then decomposes it into ops its portable kernels run) and lowering is tried again.
    Each layer left out is reported as a LayerNote.
    """
    from executorch.exir import to_edge_transform_and_lower

    # a recurrent layer's unrolled steps as one partition, not one each (see edgekit.converters.pte_partitions)
    recurrent = pte_partitions.is_recurrent(program) if recurrent is None else recurrent
    passes = [pte_partitions.delegable_views] if recurrent else None
    left_out: list[LayerNote] = []
    while True:
        skip = {(d.layer, d.op) for d in left_out}
        try:
            return to_edge_transform_and_lower(program, transform_passes=passes,
                                               partitioner=[_partitioner(skip)]), left_out
        except Exception as e:  # noqa: BLE001 - any failure of a pass on one node
            node = _failing_node(e)
            key = _layer_op(node) if node is not None else None
            root = e
            while root.__cause__ is not None:
                root = root.__cause__
            why = f"{type(root).__name__}: {first_line(root)}"
            if key is None or key in skip or len(left_out) >= MAX_LEFT_OUT:
                where = f" on node {node.name} ({key[1]} in layer {key[0] or 'the top module'})" if key else ""
                raise ConversionFailed(f"ExecuTorch's XNNPACK lowering failed{where}: {why}"
                                       + (f" (after leaving {len(left_out)} layer(s) out of the delegate)" if left_out else ""),
                                       converter="torch_to_pte",
                                       fix="try another target (edgekit graph lists them) or rewrite that layer") from e
            left_out.append(LayerNote(key[0], key[1], why))


def _partitioner(skip: set[tuple[str, str]]):
    """XNNPACK's partitioner, refusing the (layer, op) pairs in `skip`: a refused op is neither delegated
    nor kept from decomposition."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    partitioner = XnnpackPartitioner(configs=_configs())
    if skip:
        for config in partitioner.target_partitioner_configs.values():
            def check(node, ep, inner=config.check_constraints):
                return _layer_op(node) not in skip and inner(node, ep)

            config.check_constraints = check
    return partitioner


def _configs() -> list:
    """XNNPACK's partitioner configs, its linear one also taking a weight-only linear: an int8 weight behind
    `dequantize_per_channel` applied to float activations, which XNNPACK runs as its f32-qc8w fully connected
    kernel. ExecuTorch's own config takes a quantized weight only with quantized activations (static or
    per token) and, refusing it, leaves the linear to be decomposed outside the delegate."""
    from executorch.backends.xnnpack.partition.config import ALL_PARTITIONER_CONFIGS
    from executorch.backends.xnnpack.partition.config.gemm_configs import LinearConfig
    from executorch.backends.xnnpack.utils.quant_utils import is_dequant, is_per_channel, is_per_channel_group
    from executorch.backends.xnnpack.utils.utils import get_input_node

    class WeightOnlyLinearConfig(LinearConfig):
        """LinearConfig, plus float activations × a per-channel int8 weight (no activation or output q/dq)."""

        def _weight_only(self, node) -> bool:
            weight = get_input_node(node, self.weight_idx)
            per_channel = is_dequant(weight) and is_per_channel(weight) and not is_per_channel_group(weight)
            return per_channel and not is_dequant(get_input_node(node, self.act_idx))

        def _get_act_deps(self, node, ep, precision):
            return (True, []) if self._weight_only(node) else super()._get_act_deps(node, ep, precision)

        def _get_output_deps(self, node, ep, precision):
            return (True, []) if self._weight_only(node) else super()._get_output_deps(node, ep, precision)

    return [WeightOnlyLinearConfig if c is LinearConfig else c for c in ALL_PARTITIONER_CONFIGS]


def _layer_op(node) -> tuple[str, str]:
    """(the module path of the layer that made `node`, its op without namespace): the same before and
    after ExecuTorch's edge transformation, which renames nodes."""
    from executorch.exir.backend.canonical_partitioners.config_partitioner import format_target_name

    stack = node.meta.get("nn_module_stack") or {}
    path = list(stack.values())[-1][0] if stack else ""
    return path, format_target_name(getattr(node.target, "__name__", str(node.target))).split(".")[0]


def _failing_node(error: BaseException):
    """The innermost torch.fx node a failing pass was handling (a local named `node` in the traceback)."""
    import torch.fx

    found = None
    while error is not None:
        tb = error.__traceback__
        while tb is not None:
            node = tb.tb_frame.f_locals.get("node")
            if isinstance(node, torch.fx.Node) and node.op == "call_function":
                found = node
            tb = tb.tb_next
        error = error.__cause__ or error.__context__
    return found


def quantize_int8(source, calibration, spec):
    """The PT2E-quantized GraphModule a static int8 .pte of `source` is lowered from: XNNPACKQuantizer,
    symmetric int8 as `spec` (a QuantSpec) says, its method's activation observer, its float layers left
    float, calibrated on `calibration`. Per-layer drift is traced on this very graph
    (trace_layers)."""
    ctx = _unrolled(ConvertContext(source, Path(), calibration, spec))
    return pt2e_int8.quantized_graph(source.artifact, ctx, *_xnnpack(), "xnnpack")[1]


def _xnnpack():
    """(a new XNNPACKQuantizer, its symmetric config function)."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )

    return XNNPACKQuantizer(), get_symmetric_quantization_config


def _backend_config(precision: str):
    """What runs outside XNNPACK at int8 (an embedding table, uint8 per row with float zero points as
    edgekit's quantizer annotates it for this backend) becomes ExecuTorch's quantized kernels:
    dequantize → embedding fuses into one lookup of the rows it needs (QuantFusionPass →
    embedding_byte); the import registers the kernels' out variants."""
    from executorch.exir import ExecutorchBackendConfig

    if precision not in (Precision.INT8, Precision.INT8_DYNAMIC):
        return ExecutorchBackendConfig()
    import executorch.kernels.quantized  # noqa: F401
    from executorch.exir.passes import QuantFusionPass

    return ExecutorchBackendConfig(passes=[QuantFusionPass()])


def _fp16_wrapper():
    """The wrapper class, defined on demand so that importing this module needs no torch."""
    import torch

    class Fp16(torch.nn.Module):
        """Runs the wrapped model in float16 between float32 inputs and outputs."""

        def __init__(self, inner):
            super().__init__()
            self.inner = inner.to(torch.float16)

        def forward(self, *args):
            """Floating inputs cast to float16 (others as they are); a tensor, or a flat tuple or list of them,
            cast back to float32."""
            out = self.inner(*[a.to(torch.float16) if a.is_floating_point() else a for a in args])
            if isinstance(out, (tuple, list)):
                return type(out)(o.to(torch.float32) for o in out)
            return out.to(torch.float32)

    return Fp16


def _integer_io(program, src: ModelArtifact, out_path: Path) -> Path:
    """Make every input and output int8 and record their scale/zero-point beside the program."""
    from executorch.exir.passes.quantize_io_pass import quantize_input, quantize_output

    def entry(name, params):
        scale, zero_point, _qmin, _qmax, dtype = params
        return {"name": name, "dtype": str(dtype).replace("torch.", ""), "scale": float(scale),
                "zero_point": int(zero_point)}

    inputs = [entry(s.name, quantize_input(program, i)) for i, s in enumerate(src.signature.inputs)]
    outputs = [entry(s.name, quantize_output(program, i)) for i, s in enumerate(src.signature.outputs)]
    return io_params.write(out_path, inputs, outputs)
