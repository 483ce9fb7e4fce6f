"""torch → pte: torch.export, then ExecuTorch lowering with the XNNPACK partitioner.

int8 and int8-dynamic go through PT2E with ExecuTorch's XNNPACKQuantizer; fp16 exports a half
copy of the model behind float32 casts, so callers keep float32 I/O. --int8-io strips the
boundary quantize/dequantize (ExecuTorch's quantize_io pass) and writes the parameters beside
the program (see edgekit.core.io_params).
"""

from __future__ import annotations

import copy
from pathlib import Path

from edgekit.core import io_params
from edgekit.core.artifact import ModelArtifact
from edgekit.calibration import pt2e
from edgekit.converters.base import ConvertContext, Converter


class TorchToPte(Converter):
    name = "torch_to_pte"
    source = "torch"
    target = "pte"
    precisions = ("fp32", "fp16", "int8", "int8-dynamic")
    methods = pt2e.METHODS
    int8_io = True
    fallbacks = ("float",)
    granularities = ("per_channel", "per_tensor")
    bias_correction = True  # edgekit.calibration.bias_correction on the PT2E graph
    smooth_quant = True  # edgekit.calibration.smooth_quant on the PT2E graph
    extra = "executorch"
    cost = 1.0
    tools = ("torch", "executorch", "torchao")

    def convert(self, src: ModelArtifact, out_path: Path, precision: str, ctx: ConvertContext) -> ModelArtifact:
        import torch
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        from executorch.exir import to_edge_transform_and_lower

        source = ctx.source
        args = source.example_args()
        files = [str(out_path)]
        if precision == "fp32":
            program = source.exported()
        elif precision == "fp16":
            # A deep copy: .half() would otherwise change the source model's shared weights.
            program = torch.export.export(_fp16_wrapper()(copy.deepcopy(source.exported().module())), args)
        else:
            dynamic = precision == "int8-dynamic"
            quantized = quantize_int8(source, None if dynamic else ctx.calibration, ctx.spec,
                                      src.signature.input_names, dynamic=dynamic, example_args=args)
            program = torch.export.export(quantized, args)
            if ctx.spec.int8_io and not dynamic:
                files.append(str(_integer_io(program, src, out_path)))
        lowered = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
        out_path.write_bytes(lowered.to_executorch(_backend_config(precision)).buffer)
        return ModelArtifact("pte", str(out_path), src.signature, precision, files=tuple(files))


def quantize_int8(source, calibration, spec, input_names, *, dynamic: bool = False, example_args=None):
    """The PT2E-quantized GraphModule an int8 .pte is lowered from: XNNPACKQuantizer, symmetric
    int8 as `spec` (a QuantSpec) says, its method's activation observer, its float layers left float,
    calibrated on `calibration` (None if dynamic). Shared with edgekit.engine.pte_layers, which
    attributes drift on this very graph."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )

    quantizer = pt2e.configure(XNNPACKQuantizer(), get_symmetric_quantization_config, method=spec.method,
                               dynamic=dynamic, per_channel=spec.granularity == "per_channel")
    args = source.example_args() if example_args is None else example_args
    quantizer = pt2e.edgekit_quantizer(quantizer, get_symmetric_quantization_config, "xnnpack", spec.layers("float"))
    return pt2e.quantize(source.exported().module(), quantizer, calibration, input_names, example_args=args,
                         fold_quantize=True, correct_biases=spec.bias_correction, smooth=spec.smooth_quant)


def _backend_config(precision: str):
    """What runs outside XNNPACK at int8 (an int8 embedding table) becomes ExecuTorch's quantized
    kernels: dequantize → embedding fuses into one int8 lookup (QuantFusionPass); the import
    registers the kernels' out variants."""
    from executorch.exir import ExecutorchBackendConfig

    if precision not in ("int8", "int8-dynamic"):
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
