"""PT2E post-training quantization, shared by the litert-torch and ExecuTorch backends.

Both backends take a PT2E quantizer (litert-torch's `PT2EQuantizer`, ExecuTorch's
`XNNPACKQuantizer`) configured with a symmetric, per-channel int8 config. The calibration method
chooses the activation observer:

    minmax     → MinMaxObserver      (the range seen)
    percentile → PercentileObserver  (torchao's HistogramObserver, its range clipped at the
                                      PERCENTILE-th percentile of the values seen on each side, as
                                      onnxruntime's Percentile calibrator does)
    mse        → HistogramObserver   (the range that minimises the L2 quantization error; the default
                                      of both backends' configs)

Entropy has no PT2E observer, so these backends refuse it (see METHODS).

`--calib-method auto` prepares the model once with a RangeObserver at every activation instead: a
HistogramObserver, whose exact min and max and histogram of every value seen give each method's range
(see edgekit.calibration.pt2e_statistics).
"""

from __future__ import annotations

import copy

import dataclasses
import functools
from typing import Any, Callable

import numpy as np

from edgekit.calibration import bias_correction, pt2e_quantizer, smooth_quant
from edgekit.calibration.data import SampleSet
from edgekit.calibration.methods import LEVEL_SPREAD_DB, LEVEL_WHY, ON_INT8_WEIGHTS, spread_db
from edgekit.calibration.pt2e_quantizer import EdgeQuantizer, make, mixed_scale_cats
from edgekit.core.artifact import LayerNote
from edgekit.core.errors import ConversionFailed, first_line
from edgekit.core.quant import Capabilities

METHODS = ("minmax", "percentile", "mse")
# What the int8 of a PT2E backend (litert-torch's, ExecuTorch's XNNPACK) can express.
CAPABILITIES = Capabilities(methods=METHODS, int8_io=True, fallbacks=("float",),
                            granularities=("per_channel", "per_tensor"),
                            bias_correction=True,  # edgekit.calibration.bias_correction on the PT2E graph
                            smooth_quant=True)  # edgekit.calibration.smooth_quant on the PT2E graph
PERCENTILE = 99.999  # onnxruntime's Percentile calibrator's default, so that both mean the same


EVERY = "every"  # configure's method for a RangeObserver: one calibration for every method (auto)


def _observer(method: str):
    from torchao.quantization.pt2e.observer import HistogramObserver, MinMaxObserver

    if method == EVERY:
        return range_observer()
    return {"minmax": MinMaxObserver, "percentile": percentile_observer(), "mse": HistogramObserver}[method]


@functools.cache
def range_observer():
    """The RangeObserver class, defined on demand (no torch import with this module)."""
    import torch
    from torchao.quantization.pt2e.observer import HistogramObserver

    class RangeObserver(HistogramObserver):
        """HistogramObserver's statistics (the exact min and max of every value seen, and their histogram),
        and the range of whichever method `method` names: minmax (the min and max, as MinMaxObserver's),
        percentile (the histogram cut where PERCENTILE percent of the values lie on its inner side, at each
        end) or mse (HistogramObserver's own L2 search). Set `method` before convert_pt2e."""

        method = "mse"

        def _non_linear_param_search(self):
            if self.method == "minmax":
                return self.min_val, self.max_val
            if self.method == "mse":
                return super()._non_linear_param_search()
            total = self.histogram.sum()
            if total <= 0:
                return self.min_val, self.max_val
            cdf = torch.cumsum(self.histogram.double(), 0) / total
            tail = torch.tensor([1 - PERCENTILE / 100, PERCENTILE / 100], dtype=cdf.dtype)
            low, high = (int(i) for i in torch.searchsorted(cdf, tail).clamp(max=self.bins - 1))
            width = (self.max_val - self.min_val) / self.bins
            return self.min_val + width * low, torch.minimum(self.min_val + width * (high + 1), self.max_val)

    return RangeObserver


@functools.cache
def percentile_observer():
    """The percentile observer class, defined on demand (no torch import with this module)."""

    class PercentileObserver(range_observer()):
        """HistogramObserver's histogram of every value seen; the range is cut where PERCENTILE percent
        of the values lie on its inner side, at each end, instead of by its L2 search."""

        method = "percentile"

    return PercentileObserver


def configure(quantizer, get_config: Callable[..., Any], *, method: str, dynamic: bool, per_channel: bool = True):
    """Set the backend `quantizer`'s global config: symmetric int8 (weights per channel unless
    `per_channel` is False) with the method's observer (EVERY: a RangeObserver). Quantize with
    `edgekit_quantizer(quantizer, ...)`, which adds edgekit's patterns."""
    config = get_config(is_per_channel=per_channel, is_dynamic=dynamic)
    if not dynamic:
        # The config classes are frozen dataclasses: replace the activation observer.
        act = dataclasses.replace(config.input_activation,
                                  observer_or_fake_quant_ctr=_observer(method).with_args(eps=2 ** -12))
        config = dataclasses.replace(config, input_activation=act, output_activation=act)
    return quantizer.set_global(config)


# What each backend's kernels take: TFLite runs BATCH_MATMUL in int8 and FULLY_CONNECTED on any
# rank, and a SiLU in int8 only as LOGISTIC and MUL; XNNPACK's bmm is float only and its static int8
# linear needs a 2-D input. ExecuTorch's XNNPACK delegate runs hardswish, div and sigmoid in float only,
# between converts, and fuses a relu into an add, not a clamp: its hardsigmoid (add, clamp, div) becomes
# int8 spelled out; a hardswish spelled out in four int8 ops runs slower than its one float op, and a SiLU
# keeps a float sigmoid either way.
BACKENDS = {"tflite": dict(matmul_int8=True, linears_2d=False, gates_int8=("silu", "hardsigmoid", "hardswish"),
                           source_fns=True),
            "xnnpack": dict(matmul_int8=False, linears_2d=True, gates_int8=("hardsigmoid",),
                            add_fuses_clamp=False, tables_uint8=True, conv1d_per_call=False)}


def edgekit_quantizer(backend, get_config: Callable[..., Any], kind: str, float_layers: tuple[str, ...] = ()):
    """The configured `backend` quantizer ("tflite" or "xnnpack", the `kind`) with edgekit's
    annotations (see edgekit.calibration.pt2e_quantizer); `get_config` gives it the backend's
    dynamic config; the `float_layers` (module paths) stay float."""
    return make(backend, get_config(is_per_channel=True, is_dynamic=True), float_layers=float_layers, **BACKENDS[kind])


def quantize(module, quantizer, calibration: SampleSet | None, input_names, *, example_args: tuple,
             fold_quantize: bool, correct_biases: bool = False, smooth: bool = False):
    """(SmoothQuant, see edgekit.calibration.smooth_quant →) prepare_pt2e → run the calibration samples →
    convert_pt2e (→ bias correction on the same samples, see edgekit.calibration.bias_correction).
    Returns the quantized GraphModule.

    `calibration` is None for dynamic quantization: activations are quantized at run time, and one
    run on `example_args` only traces the observers.
    """
    prepared = observe(module, quantizer, calibration, input_names, example_args=example_args, smooth=smooth)
    correct_biases = correct_biases and calibration is not None
    weights = bias_correction.float_weights(prepared) if correct_biases else None
    return finish(prepared, fold_quantize, calibration if correct_biases else None, input_names, weights)


def observe(module, quantizer, calibration: SampleSet | None, input_names, *, example_args: tuple, smooth: bool = False):
    """(SmoothQuant →) prepare_pt2e → the calibration samples (or `example_args` once, with None) run through
    the observers: the prepared GraphModule, ready for convert_pt2e."""
    import torch
    from torchao.quantization.pt2e import move_exported_model_to_eval
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    # The exported program's module() shares its parameters with the source model, and SmoothQuant and bias
    # correction change weights and biases in place: on a copy, or the next target of the run would convert
    # the changed model.
    module = copy.deepcopy(module)
    if calibration is not None and isinstance(quantizer, EdgeQuantizer):
        def sample(i: int) -> list:
            return sample_args(calibration, input_names, i)

        smoothed = smooth_quant.smooth_pt2e(module, (sample(i) for i in range(len(calibration)))) if smooth else []
        quantizer.keep_float = mixed_scale_cats(module, [sample(i) for i in range(min(len(calibration), 8))]) | set(smoothed)
        quantizer.level_inputs = level_inputs(calibration, input_names)
    prepared = prepare_pt2e(module, quantizer)
    move_exported_model_to_eval(prepared)
    with torch.no_grad():
        if calibration is None:
            _run_naming_node(prepared, example_args)
        for i in range(len(calibration) if calibration is not None else 0):
            _run_naming_node(prepared, sample_args(calibration, input_names, i))
    return prepared


def level_inputs(calibration: SampleSet, input_names) -> tuple[int, ...]:
    """The positions of the inputs whose calibration samples spread over more than LEVEL_SPREAD_DB (`spread_db`):
    the ones whose level path (edgekit.calibration.pt2e_quantizer.level_path) is quantized per call."""
    return tuple(i for i, name in enumerate(input_names) if spread_db(calibration.inputs[name]) > LEVEL_SPREAD_DB)


def level_notes(module, calibration: SampleSet, input_names, kind: str) -> tuple[LayerNote, ...]:
    """The `kept_float` notes of an int8 artifact lowered by `kind` ("tflite" or "xnnpack") from `module` for the
    convolutions and linears on the level path of its loud-and-quiet inputs (`level_inputs`): litert lowers each
    one, its input quantized per call, as float arithmetic on int8 weights; XNNPACK quantizes most per call
    (int8 kernels, no note) and leaves the rest float (a depthwise or dilated conv)."""
    loud = level_inputs(calibration, input_names)
    if not loud:
        return ()
    db = max(spread_db(calibration.inputs[input_names[i]]) for i in loud)
    names = ", ".join(input_names[i] for i in loud)
    notes: dict[str, LayerNote] = {}
    for node in pt2e_quantizer.level_path(module, loud):
        op = pt2e_quantizer.writer(node)
        if op is None or (kind == "xnnpack" and pt2e_quantizer.xnnpack_per_call(node)):
            continue
        how = ON_INT8_WEIGHTS if kind == "tflite" else "float (XNNPACK quantizes this conv only at one scale for every call)"
        layer = pt2e_quantizer.module_path(node) or ""
        notes.setdefault(layer, LayerNote(layer, op, LEVEL_WHY.format(inputs=names, db=db, how=how)))
    return tuple(notes.values())


def finish(prepared, fold_quantize: bool, correction: SampleSet | None = None, input_names=(), weights=None):
    """convert_pt2e of the observed `prepared` graph (→ bias correction on the `correction` samples, `weights`
    being `bias_correction.float_weights(prepared)`): the quantized GraphModule, in eval mode."""
    from torchao.quantization.pt2e import move_exported_model_to_eval
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e

    converted = convert_pt2e(prepared, fold_quantize=fold_quantize)
    move_exported_model_to_eval(converted)
    if correction is not None:
        bias_correction.correct(converted, weights, (sample_args(correction, input_names, i) for i in range(len(correction))))
    converted.training = False  # exported modules refuse .eval(); converters read .training
    return converted


def sample_args(samples: SampleSet, input_names, i: int) -> list:
    """The `i`-th sample as the model's positional tensors (copies: torch keeps no view of the arrays)."""
    import torch

    return [torch.from_numpy(np.array(samples.inputs[n][i], copy=True)) for n in input_names]


def _run_naming_node(prepared, args) -> None:
    """Run the prepared (observed) model once; when it fails, say at which node of the graph and
    from which module of the source, instead of a bare library exception."""
    import torch

    try:
        prepared(*args)
        return
    except Exception as first:  # noqa: BLE001 - re-run node by node to name the culprit
        failing = {}

        class Naming(torch.fx.Interpreter):
            """The prepared graph run node by node, so that a failure can be pinned on one node."""

            def run_node(self, node):
                """Note `node` as the last one started, then run it unchanged."""
                failing["node"] = node
                return super().run_node(node)

        try:
            Naming(prepared).run(*args)
        except Exception:  # noqa: BLE001
            pass
        node = failing.get("node")
        if node is None:
            raise
        stack = node.meta.get("nn_module_stack") or {}
        module = next(reversed(stack.values()))[0] if stack else "the model's top level"
        raise ConversionFailed(
            f"int8 calibration failed at node {node.name} ({node.target}, in {module}): "
            f"{type(first).__name__}: {first_line(first)}",
            fix="edgekit's quantizer keeps integer tensors, masks and indices unquantized; this op still "
                "received a quantized or re-typed input: convert this model with -p int8-dynamic, or "
                "report the op",
        ) from first
