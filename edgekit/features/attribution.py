"""Per-layer drift attribution on demand (`edgekit layers`, failing `check` cases): open the source and
the data, and rank the layers of an int8 artifact by the SQNR each one loses — how each backend is
traced and how layers are ranked is in edgekit.engine.layers and edgekit.core.drift."""

from __future__ import annotations

from pathlib import Path

from edgekit.calibration.smooth_quant import applies as smooth_quant_applies
from edgekit.calibration.data import load_samples
from edgekit.calibration.sources import load_calibration
from edgekit.core.drift import LayerDrift
from edgekit.core.errors import BadInput
from edgekit.core.formats import detect, split_name
from edgekit.core.quant import Precision, QuantSpec
from edgekit.core.quiet import captured
from edgekit.converters.base import converters
from edgekit.engine.layers import SAMPLES, rank_layers, source_traced_formats
from edgekit.sources.loading import SourceOptions, open_source
from edgekit.targets import TARGETS
from edgekit.targets.inspection import inspect_artifact


def attributed(fmt: str) -> bool:
    """Whether artifacts of format `fmt` can be attributed: formats whose backend traces per-layer drift in
    its runtime, and those a converter traces on the source (.pte: the .pte itself runs as one XNNPACK call, so
    its PT2E model is rebuilt and traced, Converter.trace_layers)."""
    return fmt in source_traced_formats() or any(t.format == fmt and t.backend.trace_layers is not None
                                                 for t in TARGETS.values())


def attribute(artifact_path: str, source: str, *, source_options=None, eval_data: str | None = None,
              calibration=None, method: str = "minmax", bias_correction: bool = False,
              smooth_quant: bool | None = None, progress=None, model=None, float_path: str | None = None,
              gains: bool = False) -> list[LayerDrift]:
    """Rank the layers of the int8 artifact at `artifact_path` by the SQNR they lose (see the module doc).

    The float reference is `float_path` or the fp32 artifact of the same format, converted from `source` by
    the same route; for .pte it is the float exported program, and the int8 side is the PT2E model rebuilt
    with `calibration` (a CalibrationSpec), `method`, `bias_correction` and `smooth_quant` (None: as convert's
    default, on where the model has linears reading a normalization). `model` is
    `source` already opened (edgekit.engine.pipeline.Sources), when the caller has it. With `gains`, what
    keeping each layer float gains the outputs is measured where the format's tracer can (onnx).
    """
    say = progress or (lambda _msg: None)
    fmt = detect(artifact_path)
    if not attributed(fmt):
        raise BadInput(f"per-layer attribution is not available for .{fmt} artifacts",
                       fix=f"attribute the {'.onnx it was made from' if fmt == 'ort' else 'tflite, onnx or pte artifact'}")
    from_source = fmt in source_traced_formats()  # its int8 model is rebuilt from the source and traced
    if from_source:
        _check_rebuildable(fmt, artifact_path, method, calibration)
    with captured():
        int8_share = inspect_artifact(fmt, artifact_path).int8_weight_share
    if int8_share < 0.5:
        raise BadInput(f"{artifact_path} is not an int8 artifact: per-layer attribution compares int8 layers "
                       "with the float model", fix="give the int8 artifact (edgekit convert --int8)")
    if model is None:
        with captured():
            model = open_source(source, source_options or SourceOptions())
    signature = model.artifact.signature
    if eval_data:
        samples = load_samples(eval_data, signature, what="eval data")
    elif calibration is not None:
        samples = load_calibration(calibration, signature)[0]
    else:
        raise BadInput("per-layer attribution needs real inputs to trace",
                       fix="pass eval data (--eval data.npz) or the calibration data (--calib)")
    inputs = {k: v[:SAMPLES] for k, v in samples.inputs.items()}
    say(f"attributing drift in {Path(artifact_path).name} layer by layer on {len(next(iter(inputs.values())))} samples")
    rebuilt_on = load_calibration(calibration, signature)[0] if from_source else None
    if smooth_quant is None:
        smooth_quant = smooth_quant_applies(model)
    with captured():
        return rank_layers(model, fmt, artifact_path, inputs, calibration=rebuilt_on,
                           spec=QuantSpec(Precision.INT8, method, bias_correction=bias_correction, smooth_quant=smooth_quant),
                           float_path=float_path, gains=gains, say=say)


def _check_rebuildable(fmt: str, artifact_path: str, method: str, calibration) -> None:
    """BadInput unless the int8 model of an artifact traced on the source can be rebuilt as it was made: static
    int8, a calibration method its converter has, and the calibration data."""
    name = Path(artifact_path).name
    if split_name(Path(artifact_path))[1] == Precision.INT8_DYNAMIC:
        raise BadInput(f"per-layer attribution of a .{fmt} rebuilds its static int8 model from the source; {name} "
                       "is int8-dynamic", fix="attribute the static int8 artifact")
    methods = sorted({m for c in converters().values() if c.target == fmt and c.traces_from_source
                      for m in c.capabilities.methods})
    if method not in methods:
        raise BadInput(f"attributing {name} needs the calibration method it was made with, not {method!r}",
                       fix=f"use one of {', '.join(methods)} (the methods its converter calibrates with)")
    if calibration is None:
        raise BadInput(f"attributing {name} needs its calibration data",
                       fix=f"a .{fmt} runs as one delegate call, so its int8 model is rebuilt from the source: "
                           "pass the calibration data it was quantized with")

