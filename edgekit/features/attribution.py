"""Per-layer drift attribution on demand (`edgekit layers`, failing `check` cases): open the source and
the data, and rank the layers of an int8 artifact by the SQNR each one loses — how each backend is
traced and how layers are ranked is in edgekit.engine.layers and edgekit.core.drift."""

from __future__ import annotations

from pathlib import Path

from edgekit.calibration import pt2e
from edgekit.calibration.smooth_quant import applies as smooth_quant_applies
from edgekit.calibration.data import load_samples
from edgekit.calibration.sources import load_calibration
from edgekit.core.drift import LayerDrift
from edgekit.core.errors import BadInput
from edgekit.core.formats import detect, split_name
from edgekit.core.quant import Precision, QuantSpec
from edgekit.core.quiet import captured
from edgekit.engine.layers import SAMPLES, rank_layers
from edgekit.sources.loading import SourceOptions, open_source
from edgekit.targets import TARGETS
from edgekit.targets.inspection import inspect_artifact


def attributed(fmt: str) -> bool:
    """Whether artifacts of format `fmt` can be attributed: formats whose backend traces per-layer drift in
    its runtime, and .pte (its PT2E model is rebuilt and traced in edgekit.engine.pte_layers: the .pte itself
    runs as one XNNPACK call)."""
    return fmt == "pte" or any(t.format == fmt and t.backend.trace_layers is not None for t in TARGETS.values())


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
    if fmt == "pte":
        if split_name(Path(artifact_path))[1] == Precision.INT8_DYNAMIC:
            raise BadInput("per-layer attribution of a .pte rebuilds its static int8 PT2E model; "
                           f"{Path(artifact_path).name} is int8-dynamic", fix="attribute the static int8 artifact")
        if method not in pt2e.METHODS:
            raise BadInput(f"attributing an ExecuTorch artifact needs the calibration method it was made with, "
                           f"not {method!r}", fix=f"use one of {', '.join(pt2e.METHODS)} (the PT2E observers)")
    if fmt == "pte" and calibration is None:
        raise BadInput("attributing an ExecuTorch artifact needs its calibration data",
                       fix="the .pte runs as one XNNPACK call, so the PT2E model is rebuilt from the source: "
                           "pass the calibration data it was quantized with")
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
    pte_calibration = None
    if fmt == "pte":
        pte_calibration = load_calibration(calibration, signature)[0]
    if smooth_quant is None:
        smooth_quant = smooth_quant_applies(model)
    with captured():
        return rank_layers(model, fmt, artifact_path, inputs, calibration=pte_calibration,
                           spec=QuantSpec(Precision.INT8, method, bias_correction=bias_correction, smooth_quant=smooth_quant),
                           float_path=float_path, gains=gains, say=say)
