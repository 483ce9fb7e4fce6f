"""Per-layer drift of an int8 artifact: traced in its runtime's child process against the float artifact
of the same route (or, where the artifact runs as one opaque call, by its converter on the quantized model it
lowers: Converter.trace_layers), ranked (edgekit.core.drift) and named after the source model's layers."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

from edgekit.converters.base import ConvertContext, Converter, converters
from edgekit.converters.onnx_simplify import simplify
from edgekit.core.drift import LayerDrift, from_json, keras_layer, module_path_from_location
from edgekit.core.errors import EdgekitError
from edgekit.core.quant import Precision
from edgekit.engine.build import build
from edgekit.engine.graph import Graph
from edgekit.engine.isolation import trace_layers_isolated

SAMPLES = 32  # samples traced: every intermediate tensor of every sample is read


def rank_layers(model, fmt: str, artifact_path: str, inputs: dict, *, calibration=None, spec=None,
                float_path: str | None = None, gains: bool = False, say=lambda _msg: None) -> list[LayerDrift]:
    """The layers of the int8 artifact at `artifact_path`, converted from the opened source `model`,
    ranked on `inputs` (see `attribute`). Where its converter traces it on the source (`source_tracer`: .pte),
    the quantized model is rebuilt from `calibration` (a SampleSet) and `spec` (a QuantSpec: method and
    overrides); for the other formats the float reference is `float_path`, or one converted here
    (`float_reference`). With `gains`, a tracer that can (onnx) also measures what keeping each layer float
    gains the outputs, and ranks by that."""
    tracer = source_tracer(model.artifact.format, fmt)
    if tracer is not None:
        return tracer.trace_layers(model, calibration, spec, inputs)
    with tempfile.TemporaryDirectory(prefix="edgekit-float-") as tmp:
        float_path = _simplified(float_path or float_reference(model, fmt, tmp, say), fmt, tmp)
        ranked = from_json(trace_layers_isolated(fmt, float_path, artifact_path, model.artifact.signature, inputs,
                                                 gains=gains))
    return _renamed(ranked, _source_names(model))


def source_tracer(source_format: str, fmt: str) -> type[Converter] | None:
    """The converter that makes int8 `fmt` artifacts of a `source_format` model, where it traces their layers
    on the source itself (Converter.traces_from_source); None where the artifact's runtime traces them."""
    try:
        step = Graph().route(source_format, fmt, Precision.INT8).quantizing_step
    except EdgekitError:  # no int8 route: nothing of the kind to trace
        return None
    return step.converter if step is not None and step.converter.traces_from_source else None


def source_traced_formats() -> frozenset[str]:
    """The formats whose int8 artifacts are traced on the source by some converter (Converter.traces_from_source)."""
    return frozenset(c.target for c in converters().values() if c.traces_from_source)


def float_reference(model, fmt: str, folder, say=lambda _msg: None) -> str:
    """The fp32 artifact of format `fmt` that per-layer drift is measured against: the source itself
    when it is already that format, else one converted into `folder` by the same route."""
    if model.artifact.format == fmt:  # an .onnx source: it is the float model
        return model.artifact.path
    plan = Graph().route(model.artifact.format, fmt, Precision.FP32)
    return build(plan, ConvertContext(model, Path(folder)), "reference", say).path


def _simplified(float_path: str, fmt: str, folder: str) -> str:
    """An .onnx reference simplified as int8 conversion simplifies a model (edgekit.converters.onnx_simplify:
    folded scales, fused PReLUs), so that the int8 model's weights and the tensors they write are matched by
    name (a copy in `folder`); any other reference as it is."""
    simplified = Path(folder) / "reference.simplified.onnx"
    return str(simplified) if fmt == "onnx" and simplify(Path(float_path), simplified) else float_path


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
    if not names:
        return layers
    out = []
    for d in layers:
        hit = keras_layer(d.layer, set(names))
        out.append(replace(d, layer=names[hit] if hit else names.get(d.layer, d.layer)))
    return out
