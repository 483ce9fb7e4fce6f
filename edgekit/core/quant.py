"""The quantization spec: what a converter is asked to make, typed, from the CLI down to each backend.

A spec says the precision, the calibration method, the bit widths and granularity of weights and
activations, the whole-model passes, and per-layer overrides: layers that keep float, or int16
activations (a16w8) where the backend has them. Layers are named as `edgekit layers` names them (module
paths for torch sources, layer names for Keras, node names for ONNX).

A request's spec may leave choices to edgekit (method `auto`; method None: the default recipe's, which a
backend may choose among `Capabilities.default_methods` by measurement; bias correction None: wherever the backend
has it, SmoothQuant None: wherever the backend has it and the model has linears reading a normalization);
`QuantSpec.for_backend` settles them for one int8 converter, whose `Capabilities` say what it
can express — `Capabilities.lacks` is the one check, run before any work.

Budgets (`--budget cosine=0.995`) are the metric values an accuracy-aware int8 conversion must reach
(see edgekit.engine.search).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from itertools import product
from typing import Callable

from edgekit.core.errors import BadInput
from edgekit.core.options import key_values

# Whole-model passes (QuantSpec flags that converters declare they have), in the order the search and
# `auto` try them, with their names.
PASSES = {"smooth_quant": "SmoothQuant", "bias_correction": "bias correction",
          "int16_stem": "int16 activations at high resolution", "int16_activations": "int16 activations everywhere"}
PASS_TARGETS = {"smooth_quant": "tflite from torch sources, executorch, onnx and ort",
                "bias_correction": "tflite, executorch, onnx and ort",
                "int16_stem": "onnx and ort", "int16_activations": "onnx, ort and tflite from TensorFlow sources"}  # for messages: who has each pass
CALIBRATION_PASSES = ("smooth_quant", "bias_correction")  # what `auto` combines with each method: no precision change
GROUP_SIZES = (32, 64, 128, 256)  # the int4 block sizes every LM target runs (LiteRT's blockwise kernels)


class Precision(StrEnum):
    """What an artifact's numbers are: float (fp32, fp16), static int8 (calibrated: int8 weights and
    activations), int8-dynamic (int8 weights, activations quantized at run time, no calibration), and a decoder
    LM's weight-only int8 (per channel) or int4 (in groups). The user's words for them are `PRECISION_ALIASES`;
    code compares members, never strings."""

    FP32 = "fp32"
    FP16 = "fp16"
    INT8 = "int8"
    INT8_DYNAMIC = "int8-dynamic"
    INT8_WEIGHTS = "int8-weights"
    INT4_WEIGHTS = "int4-weights"

    @classmethod
    def parse(cls, text) -> "Precision":
        """A precision from the user's word for it (PRECISION_ALIASES, any case or surrounding space, `_` for
        `-`); BadInput naming the words for an unknown one."""
        word = str(text).strip().lower().replace("_", "-")
        if word not in PRECISION_ALIASES:
            raise BadInput(f"unknown precision {str(text)!r}", fix=f"use one of {', '.join(PRECISION_ALIASES)}")
        return PRECISION_ALIASES[word]

    @property
    def looks(self) -> str:
        """What an inspection reads this precision's weights as (`Inspection.precision`): int8 for the int8 ones,
        else its own name."""
        return Precision.INT8.value if self in (Precision.INT8, Precision.INT8_DYNAMIC, Precision.INT8_WEIGHTS) else self.value

    @property
    def weight_only(self) -> bool:
        """A decoder LM's weight-only precision (edgekit.sources.lm_decoder): weights int8 or int4, activations float."""
        return self in (Precision.INT8_WEIGHTS, Precision.INT4_WEIGHTS)


# The one table of the user's words for a precision (--precision, the API's `precision`, a check config's
# `precisions`): each canonical name, and the long spellings of the float ones.
PRECISION_ALIASES = {**{p.value: p for p in Precision}, "float32": Precision.FP32, "float16": Precision.FP16}
PRECISIONS = tuple(Precision)
LM_PRECISIONS = tuple(p for p in Precision if p.weight_only)


class Fallback(StrEnum):
    """What a layer kept back from int8 (`--keep LAYER=...`) becomes: int16 activations (a16w8) or float."""

    INT16 = "int16"
    FLOAT = "float"


FALLBACKS = tuple(Fallback)  # the cheaper first
GRANULARITIES = ("per_channel", "per_tensor")
OPTIMIZE = ("latency", "size", "accuracy")  # what an int8 backend with more than one valid form keeps (--optimize)


class Method(StrEnum):
    """A calibration method: how the int8 ranges are chosen from the calibration data's statistics. AUTO
    tries every method the backend has on held-out samples and keeps the one with the least drift."""

    MINMAX = "minmax"
    PERCENTILE = "percentile"
    ENTROPY = "entropy"
    MSE = "mse"
    MEAN_MINMAX = "mean-minmax"  # the means over the samples of each tensor's min and max (NNCF's default)
    AUTO = "auto"

    @classmethod
    def parse(cls, text) -> "Method":
        """A method from its name, any case or surrounding space; BadInput for an unknown one."""
        try:
            return cls(str(text).strip().lower().replace("_", "-"))
        except ValueError:
            raise BadInput(f"unknown calibration method {text!r}", fix=f"use one of {', '.join(cls)}") from None


METHODS = tuple(m for m in Method if m is not Method.AUTO)
# Methods `auto` leaves out: with mean-minmax, auto's candidates on ONNX took up to 3.3× the wall time of one
# conversion on the zoo (MiniLM: 69.6 s against 21.1 s, 16 candidates with SmoothQuant), past the 2× it is held to.
BY_NAME_ONLY = (Method.MEAN_MINMAX,)


class PassFlags:
    """What a record with a flag per whole-model pass (PASSES: `smooth_quant`, `bias_correction`, `int16_stem`,
    `int16_activations`) reads them through: a spec asks for them, a backend has them, a check config sets them."""

    smooth_quant: bool | None
    bias_correction: bool | None
    int16_stem: bool
    int16_activations: bool

    def pass_flags(self) -> dict[str, bool | None]:
        """Each whole-model pass, in PASSES' order → this record's flag for it (None: left to the default)."""
        return {"smooth_quant": self.smooth_quant, "bias_correction": self.bias_correction,
                "int16_stem": self.int16_stem, "int16_activations": self.int16_activations}


@dataclass(frozen=True)
class LayerOverride:
    """One layer kept back from int8 (`--keep`), as `edgekit layers` names it, at one of FALLBACKS;
    refuses an unknown precision or an empty name."""

    layer: str
    precision: Fallback

    def __post_init__(self):
        if self.precision not in FALLBACKS:
            raise BadInput(f"layer {self.layer!r}: unknown override {str(self.precision)!r}",
                           fix=f"a layer can be kept at {' or '.join(FALLBACKS)}")
        object.__setattr__(self, "precision", Fallback(self.precision))
        if not self.layer.strip():
            raise BadInput("a layer override needs a layer name", fix="name it as `edgekit layers` shows it")

    def to_json(self) -> dict:
        """{"layer", "precision"}, as QuantSpec's JSON lists its overrides."""
        return {"layer": self.layer, "precision": self.precision}


@dataclass(frozen=True)
class QuantSpec(PassFlags):
    """What a converter is asked to make. Converters only ever see a spec settled for them
    (`for_backend`): a concrete method and bias correction on or off."""

    precision: Precision = Precision.FP32  # given as the user's word for it, parsed (PRECISION_ALIASES)
    method: Method | None = Method.MINMAX  # None: the default recipe's (Capabilities.default_methods)
    weight_bits: int = 8
    activation_bits: int = 8
    granularity: str = "per_channel"  # of the weights
    int8_io: bool = False
    bias_correction: bool | None = False  # edgekit.calibration.bias_correction, after calibration; None: the backend's default
    smooth_quant: bool | None = False  # edgekit.calibration.smooth_quant, before calibration; None: where it applies
    int16_stem: bool = False  # int16 activations where the feature maps are at least 1/4 of the input's size
    int16_activations: bool = False  # int16 activations everywhere (a16w8), weights int8
    optimize: str = "latency"  # among a backend's valid int8 forms: the fastest on this host, the smallest, the most accurate
    group_size: int = 32  # int4-weights: weights sharing one scale along a row (--group-size)
    overrides: tuple[LayerOverride, ...] = field(default_factory=tuple)

    def __post_init__(self):
        if self.method is not None:
            object.__setattr__(self, "method", Method.parse(self.method))
        object.__setattr__(self, "precision", Precision.parse(self.precision))
        if self.granularity not in GRANULARITIES:
            raise BadInput(f"unknown granularity {self.granularity.replace('_', '-')!r}", fix="use per-channel or per-tensor")
        if self.optimize not in OPTIMIZE:
            raise BadInput(f"unknown --optimize {self.optimize!r}", fix=f"use one of {', '.join(OPTIMIZE)}")
        if self.group_size not in GROUP_SIZES:
            raise BadInput(f"--group-size {self.group_size} is not one edgekit builds", fix=f"use one of {', '.join(map(str, GROUP_SIZES))}")
        if self.precision == Precision.INT8:
            return
        if self.int8_io:
            raise BadInput("--int8-io needs --precision int8 (or --int8)")
        if self.bias_correction:
            raise BadInput("--bias-correction needs --precision int8 (or --int8): it corrects a calibrated model")
        if self.smooth_quant:
            raise BadInput("--smooth-quant needs --precision int8 (or --int8): it smooths the activations that "
                           "static int8 quantizes")
        if self.int16_stem or self.int16_activations:
            flag = "--int16-stem" if self.int16_stem else "--int16-activations"
            raise BadInput(f"{flag} needs --precision int8 (or --int8): it widens activations of a static int8 model")
        if self.overrides and self.precision not in LM_PRECISIONS:  # a decoder LM's --keep keeps weights float
            raise BadInput("--keep needs --precision int8 (or --int8): it keeps layers of a static int8 model back")

    def for_backend(self, capabilities: "Capabilities", method: Method | None = None,
                    smoothable: bool = False) -> "QuantSpec":
        """This spec for one int8 backend: `method` (else this spec's, else the first of the backend's
        `default_methods`), bias correction on where the backend
        has it and SmoothQuant on where it has it and the model is `smoothable` (has linears reading a
        normalization), unless the spec says otherwise (the default recipe). A converter is only given it with
        a concrete method (ConvertRequest.spec_for); with AUTO it serves to ask what the backend lacks."""
        bias = self.bias_correction if self.bias_correction is not None else capabilities.bias_correction
        smooth = self.smooth_quant if self.smooth_quant is not None else capabilities.smooth_quant and smoothable
        return replace(self, method=method or self.method or capabilities.default_methods[0], bias_correction=bias,
                       smooth_quant=smooth)

    def passes_on(self) -> tuple[str, ...]:
        """The whole-model passes this spec turns on, in PASSES' order."""
        return tuple(name for name, on in self.pass_flags().items() if on)

    def layers(self, precision: str) -> tuple[str, ...]:
        """The layers overridden to `precision` ("float" or "int16"), in the order given."""
        return tuple(o.layer for o in self.overrides if o.precision == precision)

    def with_override(self, layer: str, precision: str) -> "QuantSpec":
        """This spec with `layer` at `precision` (replacing an earlier override of the same layer)."""
        kept = tuple(o for o in self.overrides if o.layer != layer)
        return replace(self, overrides=(*kept, LayerOverride(layer, precision)))

    def to_json(self) -> dict:
        """Every field by name (the method as its string, None: the default recipe's); `from_json` reads it back."""
        return {"precision": self.precision, "method": self.method and str(self.method), "weight_bits": self.weight_bits,
                "activation_bits": self.activation_bits, "granularity": self.granularity,
                "int8_io": self.int8_io, "bias_correction": self.bias_correction, "smooth_quant": self.smooth_quant,
                "int16_stem": self.int16_stem, "int16_activations": self.int16_activations, "optimize": self.optimize, "overrides": [o.to_json() for o in self.overrides],
                **({"group_size": self.group_size} if self.precision == Precision.INT4_WEIGHTS else {})}

    @classmethod
    def from_json(cls, d: dict) -> "QuantSpec":
        """Inverse of `to_json`, validated as a new spec is; missing keys take the defaults."""
        overrides = tuple(LayerOverride(o["layer"], o["precision"]) for o in d.get("overrides", ()))
        return cls(**{**{k: v for k, v in d.items() if k != "overrides"}, "overrides": overrides})


@dataclass(frozen=True)
class Lack:
    """What an int8 backend cannot do of a spec: `reason` completes "the <target> backend ...", `short` is
    the same for a list of targets left out, and `has` tells whether another backend's Capabilities have it."""

    reason: str
    short: str
    fix: str
    has: Callable[["Capabilities"], bool]


@dataclass(frozen=True)
class Capabilities(PassFlags):
    """What an int8 converter can express, declared by it and checked against a spec before any work."""

    methods: tuple[Method, ...] = ()  # calibration methods native to the backend
    # What the default recipe (no --calib-method) chooses between: the first, unless another drifts clearly less on
    # calibration samples (edgekit.engine.choice.DEFAULT_MARGIN_DB); one method: nothing to choose.
    default_methods: tuple[Method, ...] = (Method.MINMAX,)
    int8_io: bool = False  # integer model inputs and outputs
    granularities: tuple[str, ...] = ("per_channel",)  # of int8 weights
    fallbacks: tuple[str, ...] = ()  # what a layer kept back from int8 can become (FALLBACKS)
    bias_correction: bool = False  # whole-model passes (PASSES) it has
    smooth_quant: bool = False
    int16_stem: bool = False
    int16_activations: bool = False

    def __post_init__(self):
        object.__setattr__(self, "methods", tuple(Method.parse(m) for m in self.methods))
        object.__setattr__(self, "default_methods", tuple(Method.parse(m) for m in self.default_methods))

    def passes(self) -> tuple[str, ...]:
        """The whole-model passes (PASSES) this backend has, in the order they are tried."""
        return tuple(name for name, has in self.pass_flags().items() if has)

    def lacks(self, spec: QuantSpec) -> Lack | None:
        """The first thing of `spec` this backend cannot express, or None (AUTO is every method it has)."""
        method = spec.method
        if method not in (None, Method.AUTO) and method not in self.methods:
            have = ", ".join(self.methods)
            return Lack(f"has no '{method}' calibration (it has {have})", f"no '{method}' calibration (it has {have})",
                        f"use --calib-method {' or '.join(self.methods)} or auto", lambda c: method in c.methods)
        if spec.weight_bits != 8 or spec.activation_bits != 8:
            return Lack(f"quantizes to 8-bit weights and activations, not w{spec.weight_bits}a{spec.activation_bits}",
                        f"no w{spec.weight_bits}a{spec.activation_bits}",
                        "keep single layers at int16 activations with --keep LAYER=int16 where the backend has it",
                        lambda c: False)
        if spec.int8_io and not self.int8_io:
            return Lack("cannot give a model integer inputs and outputs", "no integer inputs and outputs",
                        "drop --int8-io for this target", lambda c: c.int8_io)
        for name in spec.passes_on():
            if name not in self.passes():
                label = PASSES[name]
                return Lack(f"has no {label}", f"no {label}",
                            f"drop --{name.replace('_', '-')} for this target ({PASS_TARGETS[name]} have it)",
                            lambda c, name=name: name in c.passes())
        if spec.granularity not in self.granularities:
            shown = spec.granularity.replace("_", "-")
            return Lack(f"has no {shown} weight quantization", f"no {shown} weights",
                        f"use {' or '.join(g.replace('_', '-') for g in self.granularities)}",
                        lambda c: spec.granularity in c.granularities)
        for o in spec.overrides:
            if o.precision not in self.fallbacks:
                having = " or ".join(self.fallbacks) or "nothing: it quantizes the whole model"
                return Lack(f"cannot keep layer {o.layer!r} at {o.precision}", f"cannot keep layers at {o.precision}",
                            f"it can keep layers at {having}", lambda c, p=o.precision: p in c.fallbacks)
        return None


def auto_specs(base: QuantSpec, methods, passes) -> list[QuantSpec]:
    """`--calib-method auto`'s candidates: every method but those asked for by name only (BY_NAME_ONLY),
    each with every combination of the whole-model `passes` (CALIBRATION_PASSES names) that `base` does not
    already turn on, the passes off first."""
    free = [p for p in passes if p in CALIBRATION_PASSES and p not in base.passes_on()]
    return [replace(base, method=method, **dict(zip(free, on)))
            for method, *on in product([m for m in methods if m not in BY_NAME_ONLY], *([False, True] for _ in free))]


def parse_overrides(items) -> tuple[LayerOverride, ...]:
    """`--keep LAYER=float` / `--keep LAYER=int16` (a bare LAYER means float), or {layer: precision}."""
    out = [LayerOverride(layer, "float" if precision is None else str(precision).strip())
           for layer, precision in key_values(items, last=True)]
    layers = [o.layer for o in out]
    twice = sorted({n for n in layers if layers.count(n) > 1})
    if twice:
        raise BadInput(f"layer(s) {', '.join(twice)} overridden more than once", fix="give each layer one --keep")
    return tuple(out)


def unknown_layers(asked, known, what: str) -> BadInput:
    """The error for overrides naming layers the model does not have."""
    sample = ", ".join(sorted(known)[:8]) + (", ..." if len(known) > 8 else "")
    return BadInput(f"no layer named {', '.join(map(repr, asked))} in {what}",
                    fix=f"name layers as `edgekit layers` shows them (this model has: {sample or 'none'})")
