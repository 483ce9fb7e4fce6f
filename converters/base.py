"""Converters: the edges of the graph. One base class, one manifest, one lookup."""

from __future__ import annotations

import importlib
import time
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from edgekit.core.artifact import CARRIED, ModelArtifact
from edgekit.core.deps import EXTRAS, missing_modules, versions
from edgekit.core.errors import ConversionFailed, EdgekitError, MissingDependency, environment_error, first_line
from edgekit.core.formats import FORMATS, detect
from edgekit.core.quant import Capabilities, Precision, QuantSpec

if TYPE_CHECKING:  # the frameworks' types stay off the CLI's import path
    import numpy as np

    from edgekit.calibration.data import SampleSet
    from edgekit.core.source import Source

# Built-in converters, imported only when the graph is built. Converter modules import their
# framework inside convert(), so loading a class costs nothing heavy.
MANIFEST: dict[str, str] = {
    "torch_to_tflite": "edgekit.converters.torch_to_tflite:TorchToTflite",
    "torch_to_pte": "edgekit.converters.torch_to_pte:TorchToPte",
    "torch_to_onnx": "edgekit.converters.torch_to_onnx:TorchToOnnx",
    "torch_to_ptl": "edgekit.converters.torch_to_ptl:TorchToPtl",
    "onnx_quantize": "edgekit.converters.onnx_quantize:OnnxQuantize",
    "onnx_fixed_shapes": "edgekit.converters.onnx_fixed_shapes:OnnxFixedShapes",
    "onnx_to_ort": "edgekit.converters.onnx_to_ort:OnnxToOrt",
    "tf_to_tflite": "edgekit.converters.tf_to_tflite:TfToTflite",
    "tf_to_onnx": "edgekit.converters.tf_to_onnx:TfToOnnx",
    "lm_to_pte": "edgekit.converters.lm_to_pte:LmToPte",
    "lm_to_tflite": "edgekit.converters.lm_to_tflite:LmToTflite",
    "lm_to_onnx": "edgekit.converters.lm_to_onnx:LmToOnnx",
}
ENTRY_POINT_GROUP = "edgekit.converters"


def node_of(fmt: str) -> str:
    """The graph node of a format: PyTorch sources are the node 'torch', TF and Keras ones 'tf', decoder LM
    folders 'lm'."""
    family = FORMATS[fmt].family
    return family if family in ("torch", "tf", "lm") else fmt


@dataclass
class Reuse:
    """What the int8 conversions of one target share when a run makes several from the same calibration
    samples (`auto`'s candidates, a search's steps): a converter keeps there the work another conversion
    would repeat (ONNX: the pre-processed model, the activation statistics every method's ranges come from,
    the quantized model before bias correction; PT2E: the model observed once for every method, each
    candidate's quantized graph), under a key naming what that work depends on, and counts its passes over
    the calibration samples, which `auto`'s record reports."""

    kept: dict = field(default_factory=dict)
    calibration_passes: int = 0  # statistics collected by running the float model over the samples
    histograms: bool = True  # False: the conversions need each tensor's extremes only (the default recipe's choice)


@dataclass(frozen=True)
class ConvertContext:
    """What a converter may use beyond its input artifact."""

    source: "Source"  # the opened source model (a TorchSource for PyTorch sources)
    work_dir: Path  # the step's own folder: its output and its scratch files
    # the calibration data of the run's reference kind (edgekit.engine.reference): a model's samples, or a decoder
    # LM's calibration text as windows of token ids (GPTQ)
    calibration: "SampleSet | np.ndarray | None" = None
    spec: QuantSpec = QuantSpec()  # its method is a concrete one, never "auto"
    reuse: Reuse | None = None  # shared with the run's other conversions of this target, if any
    ort_platform: str = "arm"  # the CPU an .ort is laid out for (edgekit.core.formats.ORT_PLATFORMS)


class Converter:
    """One edge of the converter graph.

    Subclasses declare `source` and `target` nodes, the `precisions` they can produce, the
    `extra` that installs their framework, a `cost` and (for int8) their `capabilities`, and implement
    `convert()`. Calling the
    converter checks the input, runs `convert`, checks the output and names the converter in
    any failure.
    """

    name: ClassVar[str]
    source: ClassVar[str]
    target: ClassVar[str]
    precisions: ClassVar[tuple[str, ...]] = ("fp32",)
    extra: ClassVar[str]
    requires: ClassVar[tuple[str, ...] | None] = None  # modules needed; default: all of the extra's
    cost: ClassVar[float] = 1.0
    tools: ClassVar[tuple[str, ...]] = ()  # modules whose versions go in the report
    capabilities: ClassVar[Capabilities] = Capabilities()  # what its int8 can express (edgekit.core.quant)
    measures_before_lowering: ClassVar[bool] = False  # has quantized_outputs: auto ranks candidates without lowering
    # has trace_layers: its int8 artifact runs as one opaque call (no intermediates to read), so per-layer drift is
    # traced on the quantized model it lowers, rebuilt from the source
    traces_from_source: ClassVar[bool] = False

    @classmethod
    def missing(cls) -> tuple[str, ...]:
        """The modules it needs (`requires`, else its extra's) that cannot be imported here; nothing is imported."""
        return missing_modules(cls.requires if cls.requires is not None else EXTRAS[cls.extra])

    @classmethod
    def available(cls) -> bool:
        """Whether every module it needs is installed; planning prefers routes of available edges."""
        return not cls.missing()

    @classmethod
    def accepts(cls, in_precision: str, out_precision: str) -> bool:
        """Whether this edge turns a model at `in_precision` into one at `out_precision`."""
        return in_precision == Precision.FP32 and out_precision in cls.precisions

    def convert(self, src: ModelArtifact, out_path: Path, precision: str, ctx: ConvertContext) -> ModelArtifact:
        """Write `src` at `precision` to `out_path` (scratch files in ctx.work_dir) and return it. Call the
        converter instead: that checks input and output, records time and versions, and names it in failures."""
        raise NotImplementedError

    def quantized_outputs(self, src: ModelArtifact, ctx: ConvertContext, samples: "SampleSet") -> list:
        """For a converter that `measures_before_lowering`: the outputs on `samples` (one array per output, the
        samples stacked) of `src` quantized as ctx.spec says, before it is lowered to the target format, so
        that `auto` can rank its candidates and lower only the one it keeps (their work shared through
        ctx.reuse). Call `measure` instead: that names the converter in failures."""
        raise NotImplementedError

    @classmethod
    def trace_layers(cls, source: "Source", calibration: "SampleSet", spec: QuantSpec, inputs: dict) -> list:
        """For a converter that `traces_from_source`: the layers of the int8 artifact it makes of `source` with
        `spec` (calibrated on `calibration`), ranked by the SQNR they lose on `inputs`
        (edgekit.core.drift.LayerDrift), traced on the quantized model it would lower."""
        raise NotImplementedError

    def measure(self, src: ModelArtifact, ctx: ConvertContext, samples: "SampleSet") -> list:
        """`quantized_outputs`, its failures named as a conversion's are."""
        with self._failures():
            return self.quantized_outputs(src, ctx, samples)

    def __call__(self, src: ModelArtifact, out_path: Path, precision: str, ctx: ConvertContext) -> ModelArtifact:
        if node_of(src.format) != self.source:
            raise ConversionFailed(f"expects a {self.source} model, got {src.format}", converter=self.name)
        if not self.accepts(src.precision, precision):
            raise ConversionFailed(f"cannot make {precision} from a {src.precision} model", converter=self.name)
        if self.missing():
            raise MissingDependency(f"the {self.source} → {self.target} converter", self.extra, self.missing())
        started = time.perf_counter()
        with self._failures():
            out = self.convert(src, out_path, precision, ctx)
        self._ensure(out)
        return out.noting(
            seconds=round((src.meta.seconds or 0) + time.perf_counter() - started, 3),  # the whole route's
            tool_versions={**out.meta.tool_versions, **versions(self.tools)},
            route=(*(src.meta.route or (src.format,)), out.format),
            **{k: getattr(src.meta, k) for k in CARRIED if not getattr(out.meta, k)},
        )

    @contextmanager
    def _failures(self):
        """A library's exception in the block becomes a ConversionFailed naming this converter (an environment
        problem, the error that says so); edgekit's own errors pass as they are."""
        try:
            yield
        except EdgekitError:
            raise
        except Exception as e:
            env = environment_error(e)
            if env is not None:
                raise env from e
            root = e
            while root.__cause__ is not None:
                root = root.__cause__
            raise ConversionFailed(
                f"{type(root).__name__}: {first_line(root)}", converter=self.name,
                fix=f"the model uses something the {self.target} toolchain cannot lower; "
                    "try another target (edgekit graph lists them) or rewrite that part of the model",
            ) from e

    def _ensure(self, out: ModelArtifact) -> None:
        if out.format != self.target:
            raise ConversionFailed(f"produced {out.format}, declared {self.target}", converter=self.name)
        for f in out.files:
            if not Path(f).is_file() or Path(f).stat().st_size == 0:
                raise ConversionFailed(f"wrote no output at {f}", converter=self.name)
        found = detect(out.path)
        if found != self.target:
            raise ConversionFailed(f"wrote a {found} file, expected {self.target}", converter=self.name)


def _load(spec: str) -> type[Converter]:
    module, _, cls = spec.partition(":")
    return getattr(importlib.import_module(module), cls)


def converters() -> dict[str, type[Converter]]:
    """Every converter: the built-in manifest, then third-party entry points."""
    found = {name: _load(spec) for name, spec in MANIFEST.items()}
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            found[ep.name] = ep.load()
        except Exception as e:
            raise ConversionFailed(f"cannot load converter plug-in {ep.name} ({ep.value}): {e}") from None
    return found


def get(name: str) -> type[Converter]:
    table = converters()
    if name not in table:
        raise KeyError(f"no converter named {name!r}; known: {', '.join(sorted(table))}")
    return table[name]
