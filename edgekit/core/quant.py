"""The quantization spec: what a converter is asked to make, typed, from the CLI down to each backend.

A spec says the precision, the calibration method, the bit widths and granularity of weights and
activations, and per-layer overrides: layers that keep float, or int16 activations (a16w8) where the
backend has them. Layers are named as `edgekit layers` names them (module paths for torch sources,
layer names for Keras, node names for ONNX). Each int8 converter maps the spec onto its backend's own
mechanism and refuses, before any work, what that backend cannot express (`check_expressible`).

Budgets (`--budget cosine=0.995`) are the metric values an accuracy-aware int8 conversion must reach
(see edgekit.engine.search).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from itertools import product

from edgekit.core.errors import BadInput

# Whole-model passes (QuantSpec flags that converters declare they have), in the order the search and
# `auto` try them, with their names.
PASSES = {"smooth_quant": "SmoothQuant", "bias_correction": "bias correction"}
PASS_TARGETS = {"smooth_quant": "tflite from torch sources, executorch, onnx and ort",
                "bias_correction": "tflite, executorch, onnx and ort"}  # for messages: who has each pass
FALLBACKS = ("int16", "float")  # what a layer kept back from int8 becomes, the cheaper first
GRANULARITIES = ("per_channel", "per_tensor")


@dataclass(frozen=True)
class LayerOverride:
    layer: str
    precision: str  # one of FALLBACKS

    def __post_init__(self):
        if self.precision not in FALLBACKS:
            raise BadInput(f"layer {self.layer!r}: unknown override {self.precision!r}",
                           fix=f"a layer can be kept at {' or '.join(FALLBACKS)}")
        if not self.layer.strip():
            raise BadInput("a layer override needs a layer name", fix="name it as `edgekit layers` shows it")

    def to_json(self) -> dict:
        return {"layer": self.layer, "precision": self.precision}


@dataclass(frozen=True)
class QuantSpec:
    precision: str = "fp32"  # fp32 | fp16 | int8 | int8-dynamic
    method: str = "minmax"  # a concrete calibration method (never "auto")
    weight_bits: int = 8
    activation_bits: int = 8
    granularity: str = "per_channel"  # of the weights
    int8_io: bool = False
    bias_correction: bool = False  # edgekit.calibration.bias_correction, after calibration
    smooth_quant: bool = False  # edgekit.calibration.smooth_quant, before calibration
    overrides: tuple[LayerOverride, ...] = field(default_factory=tuple)

    def layers(self, precision: str) -> tuple[str, ...]:
        """The layers overridden to `precision` ("float" or "int16"), in the order given."""
        return tuple(o.layer for o in self.overrides if o.precision == precision)

    def with_override(self, layer: str, precision: str) -> "QuantSpec":
        """This spec with `layer` at `precision` (replacing an earlier override of the same layer)."""
        kept = tuple(o for o in self.overrides if o.layer != layer)
        return replace(self, overrides=(*kept, LayerOverride(layer, precision)))

    def to_json(self) -> dict:
        return {"precision": self.precision, "method": self.method, "weight_bits": self.weight_bits,
                "activation_bits": self.activation_bits, "granularity": self.granularity,
                "int8_io": self.int8_io, "bias_correction": self.bias_correction, "smooth_quant": self.smooth_quant,
                "overrides": [o.to_json() for o in self.overrides]}


def auto_specs(base: QuantSpec, methods, passes) -> list[QuantSpec]:
    """`--calib-method auto`'s candidates: every method, each with every combination of the whole-model
    `passes` (PASSES names) that `base` does not already turn on, the passes off first."""
    free = [p for p in passes if not getattr(base, p)]
    return [replace(base, method=method, **dict(zip(free, on)))
            for method, *on in product(methods, *([False, True] for _ in free))]


def parse_overrides(items) -> tuple[LayerOverride, ...]:
    """`--keep LAYER=float` / `--keep LAYER=int16` (a bare LAYER means float)."""
    out = []
    for item in items:
        layer, sep, precision = str(item).rpartition("=")
        if not sep:
            layer, precision = str(item), "float"
        out.append(LayerOverride(layer.strip(), precision.strip()))
    layers = [o.layer for o in out]
    twice = sorted({n for n in layers if layers.count(n) > 1})
    if twice:
        raise BadInput(f"layer(s) {', '.join(twice)} overridden more than once", fix="give each layer one --keep")
    return tuple(out)


def check_expressible(spec: QuantSpec, converter, target: str) -> None:
    """Refuse, before any work, what the int8 `converter` (a Converter class) cannot express."""
    if spec.weight_bits != 8 or spec.activation_bits != 8:
        raise BadInput(f"the {target} backend quantizes to 8-bit weights and activations, not "
                       f"w{spec.weight_bits}a{spec.activation_bits}",
                       fix="keep single layers at int16 activations with --keep LAYER=int16 where the backend has it")
    for name, label in PASSES.items():
        if getattr(spec, name) and not getattr(converter, name):
            raise BadInput(f"the {target} backend has no {label}",
                           fix=f"drop --{name.replace('_', '-')} for this target ({PASS_TARGETS[name]} have it)")
    if spec.granularity not in converter.granularities:
        raise BadInput(f"the {target} backend has no {spec.granularity.replace('_', '-')} weight quantization",
                       fix=f"use {' or '.join(g.replace('_', '-') for g in converter.granularities)}")
    for o in spec.overrides:
        if o.precision not in converter.fallbacks:
            having = " or ".join(converter.fallbacks) or "nothing: it quantizes the whole model"
            raise BadInput(f"the {target} backend cannot keep layer {o.layer!r} at {o.precision}",
                           fix=f"it can keep layers at {having}")


def unknown_layers(asked, known, what: str) -> BadInput:
    """The error for overrides naming layers the model does not have."""
    sample = ", ".join(sorted(known)[:8]) + (", ..." if len(known) > 8 else "")
    return BadInput(f"no layer named {', '.join(map(repr, asked))} in {what}",
                    fix=f"name layers as `edgekit layers` shows them (this model has: {sample or 'none'})")
