"""What the two PT2E converters (torch → tflite through litert-torch, torch → pte through XNNPACK) share at
int8: the quantized graph they lower, and, for `--calib-method auto`, one calibration pass for every
candidate and each candidate's outputs before lowering.

With `ctx.reuse` (auto's candidates), the model is calibrated once for every method
(edgekit.calibration.pt2e_statistics, counted in `Reuse.calibration_passes`) and each candidate's
quantized graph is made once, under a key naming what it depends on; `auto` ranks the candidates by those
graphs' outputs in torch (edgekit.calibration.pt2e_statistics.outputs, through the converters'
`quantized_outputs`) and lowers only the best and those close to it, from the same graphs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from edgekit.calibration import pt2e, pt2e_statistics
from edgekit.converters.base import ConvertContext
from edgekit.core.artifact import ModelArtifact
from edgekit.core.quant import Method


def quantized_graph(src: ModelArtifact, ctx: ConvertContext, backend: Any, get_config: Callable[..., Any], kind: str, *,
                    dynamic: bool = False, example_args: tuple | None = None):
    """(the configured `backend` quantizer, the PT2E-quantized GraphModule of `src` as ctx.spec says): the
    backend's quantizer (litert-torch's PT2EQuantizer or XNNPACKQuantizer, `kind` "tflite" or "xnnpack",
    `get_config` its config function) with edgekit's patterns, calibrated on ctx.calibration (none if
    `dynamic`). With ctx.reuse, the calibration is the one pass every method's graph shares."""
    spec, source = ctx.spec, ctx.source
    calibration = None if dynamic else ctx.calibration
    args = source.example_args() if example_args is None else example_args
    shared = ctx.reuse is not None and calibration is not None
    quantizer = pt2e.configure(backend, get_config, method=pt2e.EVERY if shared else spec.method, dynamic=dynamic,
                               per_channel=spec.granularity == "per_channel")
    ours = pt2e.edgekit_quantizer(quantizer, get_config, kind, spec.layers("float"))
    names, module = src.signature.input_names, source.exported().module()
    fold = kind == "xnnpack"  # litert lowers the weights' quantize/dequantize pairs itself: not folded for tflite
    if not shared:
        return quantizer, pt2e.quantize(module, ours, calibration, names, example_args=args, fold_quantize=fold,
                                        correct_biases=spec.bias_correction, smooth=spec.smooth_quant)
    # every method and bias correction share the statistics of one calibration of the same float graph
    key = ("pt2e statistics", kind, replace(spec, method=Method.MINMAX, bias_correction=False))
    stats = ctx.reuse.kept.get(key)
    if stats is None:
        stats = ctx.reuse.kept[key] = pt2e_statistics.collect(module, ours, calibration, names, example_args=args,
                                                              fold_quantize=fold, smooth=spec.smooth_quant)
        ctx.reuse.calibration_passes += 1
    return quantizer, stats.quantized(spec.method, spec.bias_correction)

