"""Per-layer drift attribution: which layers of a quantized artifact lose the most signal.

Each backend traces the quantized model and its float counterpart on the same inputs and reports,
for every op of the quantized model, its output tensor, its activation inputs, and the SQNR of
that output against the float model (float vs. dequantized):

    tflite  the LiteRT interpreter with every intermediate tensor kept, against the fp32 .tflite
            litert-torch makes from the same source (ops aligned in execution order)
    onnx    onnxruntime's QDQ debugging (qdq_loss_debug): activations matched by tensor name
            against the fp32 .onnx the int8 model was quantized from, plus each weight's SQNR
    pte     the PT2E-quantized graph the .pte is lowered from, node by node against the float
            exported program (XNNPACK runs the .pte as one delegate call, with no intermediates)

SQNR accumulates along the graph: every layer after a bad one looks bad too. So layers are ranked
by the SQNR they lose themselves — the worst SQNR among their inputs minus the SQNR of their
output — and the layer that breaks a model comes first. The model's inputs count as layers too
(their quantization, against the float input). No layer is credited with input quality above
INPUT_CAP_DB: 8-bit quantization keeps about 50 dB at best, and a float input (exact, 140 dB)
would otherwise make the first layer look like the worst. Names are the source model's module paths
where the backend keeps them (features.2), else the backend's own op names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from edgekit.quant import QuantSpec

CEILING_DB = 140.0  # what an exact match counts as (float32 noise is about 140 dB below the signal)
INPUT_CAP_DB = 60.0  # the most input SQNR a layer is credited with (int8 keeps ~6 dB per bit)
SHOWN = 5


@dataclass(frozen=True)
class Traced:
    """One op of the quantized model as a backend traced it."""

    layer: str  # the source model's layer (module path) where known, else the backend's op name
    op: str  # the backend's op type
    tensor: str  # key of its output in the SQNR table
    inputs: tuple[str, ...]  # keys of its activation inputs (not weights)
    weight_sqnr_db: float | None = None


@dataclass(frozen=True)
class LayerDrift:
    layer: str
    op: str
    tensor: str
    sqnr_db: float  # output vs. the float model (accumulated drift)
    loss_db: float  # SQNR lost in this layer: worst input SQNR minus output SQNR
    weight_sqnr_db: float | None = None

    def to_json(self) -> dict:
        return {"layer": self.layer, "op": self.op, "tensor": self.tensor, "sqnr_db": round(self.sqnr_db, 3),
                "loss_db": round(self.loss_db, 3),
                "weight_sqnr_db": None if self.weight_sqnr_db is None else round(self.weight_sqnr_db, 3)}

    def text(self) -> str:
        weights = f", weights {self.weight_sqnr_db:.1f} dB" if self.weight_sqnr_db is not None else ""
        return f"{self.layer} ({self.op}): loses {self.loss_db:.1f} dB (output SQNR {self.sqnr_db:.1f} dB{weights})"


def sqnr_db(reference, actual) -> float:
    """20·log10(‖reference‖ / ‖reference − actual‖), within ±CEILING_DB."""
    r = np.asarray(reference, dtype=np.float64).ravel()
    a = np.asarray(actual, dtype=np.float64).ravel()
    if r.shape != a.shape:
        raise ValueError(f"cannot compare tensors of {r.size} and {a.size} values")
    return sqnr_from_sums(float(np.sum(r ** 2)), float(np.sum((r - a) ** 2)))


def sqnr_from_sums(signal: float, noise: float) -> float:
    """SQNR in dB from the summed squares of the reference and of the error."""
    if noise == 0.0:
        return CEILING_DB
    if signal == 0.0:
        return -CEILING_DB
    return float(max(-CEILING_DB, min(CEILING_DB, 10 * math.log10(signal / noise))))


class SqnrSums:
    """SQNR per key over many samples, from running sums (no sample's tensors are kept)."""

    def __init__(self):
        self._sums: dict[str, list[float]] = {}

    def add(self, key: str, reference, actual) -> None:
        r = np.asarray(reference, dtype=np.float64)
        a = np.asarray(actual, dtype=np.float64)
        s = self._sums.setdefault(key, [0.0, 0.0])
        s[0] += float(np.sum(r ** 2))
        s[1] += float(np.sum((r - a) ** 2))

    def result(self) -> dict[str, float]:
        return {key: sqnr_from_sums(signal, noise) for key, (signal, noise) in self._sums.items()}


def rank(traced: list[Traced], sqnr: dict[str, float]) -> list[LayerDrift]:
    """Every traced op with a known output SQNR, the one that loses the most first.

    `traced` is in execution order. An op whose output has no SQNR (no float counterpart was
    found) passes on the worst SQNR of its own inputs, so the op after it is still judged against
    what actually reached it.
    """
    level: dict[str, float] = dict(sqnr)
    out = []
    for t in traced:
        known = [level[i] for i in t.inputs if i in level]
        before = min([*known, INPUT_CAP_DB])
        if t.tensor not in sqnr:
            if known:
                level[t.tensor] = min(known)
            continue
        out.append(LayerDrift(t.layer, t.op, t.tensor, sqnr[t.tensor], before - sqnr[t.tensor], t.weight_sqnr_db))
    return sorted(out, key=lambda d: -d.loss_db)


def to_json(layers: list[LayerDrift]) -> list[dict]:
    return [d.to_json() for d in layers]


def from_json(rows: list[dict]) -> list[LayerDrift]:
    return [LayerDrift(r["layer"], r["op"], r["tensor"], r["sqnr_db"], r["loss_db"], r.get("weight_sqnr_db"))
            for r in rows]


def module_path_from_location(location: str) -> str | None:
    """features.0 from a torch.export location such as
    '__main__.Net/torch.nn.modules.container.Sequential_features/torch.nn.modules.conv.Conv2d_0'."""
    parts = location.split("/")[1:]
    if not parts or not all("." in p.rpartition("_")[0] for p in parts):
        return None  # not a torch location (a TensorFlow op name, say)
    names = [p.rpartition("_")[2] for p in parts]
    return ".".join(names) if all(names) else None


def keras_layer(name: str, layers: set[str]) -> str | None:
    """The Keras layer an op belongs to, from its TensorFlow name
    ('StatefulPartitionedCall/digits_keras_1/conv1_1/BiasAdd' → 'conv1' when conv1 is a layer)."""
    for part in (p for chunk in name.split(";") for p in chunk.split("/")):
        if part in layers:
            return part
        stem, _, suffix = part.rpartition("_")
        if suffix.isdigit() and stem in layers:  # tf.function uniquifies scopes: conv1 → conv1_1
            return stem
    return None


def _source_names(model) -> dict[str, str]:
    """The source's layer names by the names a backend traced: Keras layer names as themselves;
    for a torch source, module paths by the name `module_path_from_location` reads from a
    torch.export location, which keeps only the last part of each level's path (a ModuleList's
    `_blocks.15` becomes `15`) and splits `Conv2d__project_conv` at its last underscore."""
    keras_model = getattr(model, "keras_model", None)
    if keras_model is not None:
        return {layer.name: layer.name for layer in keras_model.layers}
    exported = getattr(model, "exported", None)
    if exported is None:
        return {}
    seen: dict[str, set] = {}
    for node in exported().graph.nodes:
        levels = list((node.meta.get("nn_module_stack") or {}).values())
        if not levels or not levels[-1][0]:
            continue
        parts = ["root"] + [f"{_class_name(cls)}_{path.rpartition('.')[2]}" for path, cls in levels if path]
        traced = module_path_from_location("/".join(parts))
        if traced:
            seen.setdefault(traced, set()).add(_folded_conv(node) or levels[-1][0])
    return {traced: next(iter(paths)) for traced, paths in seen.items() if len(paths) == 1}


def _folded_conv(node) -> str | None:
    """The module path of the convolution a BatchNorm node follows: quantizers fold the BatchNorm
    into it, and the fused layer carries the BatchNorm's name in a backend's tensor names."""
    target = str(getattr(node, "target", ""))
    conv = node.args[0] if node.args and hasattr(node.args[0], "meta") else None
    if "batch_norm" not in target or conv is None or "conv" not in str(getattr(conv, "target", "")):
        return None
    levels = list((conv.meta.get("nn_module_stack") or {}).values())
    return levels[-1][0] if levels and levels[-1][0] else None


def _class_name(cls) -> str:
    return cls if isinstance(cls, str) else f"{cls.__module__}.{cls.__qualname__}"


def _renamed(layers: list[LayerDrift], names: dict[str, str]) -> list[LayerDrift]:
    """Backend names → the source's layer names where they can be told."""
    from dataclasses import replace

    if not names:
        return layers
    out = []
    for d in layers:
        hit = keras_layer(d.layer, set(names))
        out.append(replace(d, layer=names[hit] if hit else names.get(d.layer, d.layer)))
    return out


ATTRIBUTED_FORMATS = ("tflite", "onnx", "pte")
SAMPLES = 32  # samples traced: every intermediate tensor of every sample is read


def attribute(artifact_path: str, source: str, *, source_options=None, eval_data: str | None = None,
              calibration=None, method: str = "minmax", bias_correction: bool = False,
              smooth_quant: bool = False, progress=None, model=None, float_path: str | None = None) -> list[LayerDrift]:
    """Rank the layers of the int8 artifact at `artifact_path` by the SQNR they lose (see the module doc).

    The float reference is `float_path` or the fp32 artifact of the same format, converted from `source` by
    the same route; for .pte it is the float exported program, and the int8 side is the PT2E model rebuilt
    with `calibration` (a CalibrationSpec), `method`, `bias_correction` and `smooth_quant`. `model` is
    `source` already opened (edgekit.pipeline.Sources), when the caller has it.
    """
    from pathlib import Path

    from edgekit.calibration.data import load_samples
    from edgekit.errors import BadInput
    from edgekit.formats import detect
    from edgekit.loading import SourceOptions, open_source
    from edgekit.quiet import captured

    say = progress or (lambda _msg: None)
    fmt = detect(artifact_path)
    if fmt not in ATTRIBUTED_FORMATS:
        raise BadInput(f"per-layer attribution is not available for .{fmt} artifacts",
                       fix=f"attribute the {'.onnx it was made from' if fmt == 'ort' else 'tflite, onnx or pte artifact'}")
    if fmt == "pte":
        from edgekit.calibration import pt2e
        from edgekit.formats import split_name

        if split_name(Path(artifact_path))[1] == "int8-dynamic":
            raise BadInput("per-layer attribution of a .pte rebuilds its static int8 PT2E model; "
                           f"{Path(artifact_path).name} is int8-dynamic", fix="attribute the static int8 artifact")
        if method not in pt2e.METHODS:
            raise BadInput(f"attributing an ExecuTorch artifact needs the calibration method it was made with, "
                           f"not {method!r}", fix=f"use one of {', '.join(pt2e.METHODS)} (the PT2E observers)")
    if fmt == "pte" and calibration is None:
        raise BadInput("attributing an ExecuTorch artifact needs its calibration data",
                       fix="the .pte runs as one XNNPACK call, so the PT2E model is rebuilt from the source: "
                           "pass the calibration data it was quantized with")
    from edgekit.targets.inspection import inspect_artifact

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
        from edgekit.calibration.sources import load_calibration

        samples = load_calibration(calibration, signature)[0]
    else:
        raise BadInput("per-layer attribution needs real inputs to trace",
                       fix="pass eval data (--eval data.npz) or the calibration data (--calib)")
    inputs = {k: v[:SAMPLES] for k, v in samples.inputs.items()}
    say(f"attributing drift in {Path(artifact_path).name} layer by layer on {len(next(iter(inputs.values())))} samples")
    pte_calibration = None
    if fmt == "pte":
        from edgekit.calibration.sources import load_calibration

        pte_calibration = load_calibration(calibration, signature)[0]
    with captured():
        return rank_layers(model, fmt, artifact_path, inputs, calibration=pte_calibration,
                           spec=QuantSpec("int8", method, bias_correction=bias_correction, smooth_quant=smooth_quant),
                           float_path=float_path, say=say)


def rank_layers(model, fmt: str, artifact_path: str, inputs: dict, *, calibration=None, spec=None,
                float_path: str | None = None, say=lambda _msg: None) -> list[LayerDrift]:
    """The layers of the int8 artifact at `artifact_path`, converted from the opened source `model`,
    ranked on `inputs` (see `attribute`). For .pte, the PT2E model is rebuilt from `calibration` (a
    SampleSet) and `spec` (a QuantSpec: method and overrides); for the other formats the float
    reference is `float_path`, or one converted here (`float_reference`)."""
    import tempfile

    from edgekit.runners import trace_layers_isolated

    if fmt == "pte":
        from edgekit.targets.pte_layers import trace

        return trace(model, calibration, spec, inputs)
    with tempfile.TemporaryDirectory(prefix="edgekit-float-") as tmp:
        float_path = float_path or float_reference(model, fmt, tmp, say)
        ranked = from_json(trace_layers_isolated(fmt, float_path, artifact_path, model.artifact.signature, inputs))
    return _renamed(ranked, _source_names(model))


def float_reference(model, fmt: str, folder, say=lambda _msg: None) -> str:
    """The fp32 artifact of format `fmt` that per-layer drift is measured against: the source itself
    when it is already that format, else one converted into `folder` by the same route."""
    from pathlib import Path

    from edgekit.graph import Graph
    from edgekit.build import build
    from edgekit.registry import ConvertContext

    if model.artifact.format == fmt:  # an .onnx source: it is the float model
        return model.artifact.path
    plan = Graph().route(model.artifact.format, fmt, "fp32")
    return build(plan, ConvertContext(model, Path(folder)), "reference", say).path
