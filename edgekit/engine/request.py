"""A convert request, typed, and the one builder every front door uses (the Python API, the command
line, `check` and `bench`): it reads the user's vocabulary — strings as the command line gives them,
or mappings as the API takes them — and refuses what cannot be used, before any work."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from edgekit.calibration.sources import CalibrationSpec
from edgekit.core.budgets import SearchSpec, parse_budgets
from edgekit.core.errors import BadInput
from edgekit.core.formats import ORT_PLATFORMS
from edgekit.core.quant import Capabilities, Method, Precision, QuantSpec, parse_overrides
from edgekit.core.verify import KINDS, parse_output_kinds, parse_thresholds
from edgekit.engine.deadline import DEFAULT_TIME_BUDGET
from edgekit.sources.loading import SourceOptions


@dataclass(frozen=True)
class ConvertRequest:
    """What a conversion is asked to do. `quant` may leave choices to edgekit (method AUTO or None, bias
    correction and SmoothQuant None); `spec_for` settles them for one backend."""

    source: str
    targets: tuple[str, ...] = ("all",)
    out_dir: str = "edgekit-out"
    quant: QuantSpec = QuantSpec()
    search: SearchSpec = SearchSpec()  # budgets: keep the fewest layers back until they hold (edgekit.engine.search)
    eval_data: str | None = None
    thresholds: dict = field(default_factory=dict)
    source_options: SourceOptions = SourceOptions()
    calibration: CalibrationSpec | None = None
    output_kinds: dict = field(default_factory=dict)  # output name → edgekit.core.verify.KINDS key (--output-kind)
    attribute_failures: bool = False  # a failed int8 verdict names the layers that lose the most (--attribution)
    ort_platform: str = "arm"  # the CPU an .ort is laid out for (--ort-platform): edgekit.converters.onnx_to_ort
    time_budget: float | None = DEFAULT_TIME_BUDGET  # seconds each target may take (--time-budget); None: unbounded

    def __post_init__(self):
        if not self.targets:
            raise ValueError("at least one target is needed")
        if self.search.budgets and self.precision != Precision.INT8:
            raise BadInput("--budget needs --precision int8 (or --int8): it keeps layers of a static int8 model back")
        if self.time_budget is not None and not self.time_budget >= 0:
            raise BadInput(f"--time-budget {self.time_budget!r} is not a number of seconds", fix="give seconds ≥ 0 (0: none)")
        if self.ort_platform not in ORT_PLATFORMS:
            raise BadInput(f"unknown --ort-platform {self.ort_platform!r}", fix=f"use one of {', '.join(ORT_PLATFORMS)}")
        unknown = {k: v for k, v in self.output_kinds.items() if v not in KINDS}
        if unknown:
            raise BadInput(f"unknown output kind {unknown}", fix=f"use one of {', '.join(KINDS)}")

    @property
    def precision(self) -> str:
        """The precision every target is asked for (one of PRECISIONS); the spec is its one home."""
        return self.quant.precision

    @property
    def auto(self) -> bool:
        """Whether the calibration method is chosen per target on held-out samples."""
        return self.quant.method is Method.AUTO

    def spec_for(self, converter=None, method: Method | None = None, smoothable: bool = False) -> QuantSpec:
        """The spec a route's int8 `converter` (None: a route that does not calibrate) is given: the
        method `method` (else the request's; a route that does not calibrate ignores it), bias correction
        where the backend has it and SmoothQuant where it has it and the model is `smoothable`, unless the
        request says otherwise."""
        if method is None:
            method = Method.MINMAX if self.auto else self.quant.method
        capabilities = converter.capabilities if converter is not None else Capabilities()
        return self.quant.for_backend(capabilities, method, smoothable)

    @property
    def judged_at(self) -> dict:
        """The thresholds the user set, and each budget as the threshold the verdict holds it to too."""
        return {**self.thresholds, **{b.metric: b.limit for b in self.search.budgets}}

    @property
    def chooses_on_held_out(self) -> bool:
        """Whether the run's choices (auto's method, the search's steps, and within a search the default
        recipe's method) are measured on calibration samples held out from calibration."""
        return self.auto or bool(self.search.budgets)

    def default_choice(self, converter) -> tuple[Method, ...]:
        """The methods the default recipe chooses between on `converter`'s backend (Capabilities.default_methods):
        empty where there is nothing to choose (the request names its method, or the backend has one default)."""
        if self.quant.method is not None or converter is None or len(converter.capabilities.default_methods) < 2:
            return ()
        return converter.capabilities.default_methods


def build_request(source: str, targets: str | Iterable[str] = ("all",), out: str = "edgekit-out", *,
                  precision: str = Precision.FP32, int8: bool = False, calibration: str | CalibrationSpec | None = None,
                  calib_samples: int | None = None, calib_preprocess: str | None = None, calib_method: str | None = None,
                  eval_data: str | None = None, thresholds: Mapping | Iterable[str] = (),
                  output_kinds: Mapping | Iterable[str] = (), int8_io: bool = False,
                  bias_correction: bool | None = None, smooth_quant: bool | None = None, int16_stem: bool = False,
                  int16_activations: bool = False, optimize: str = "latency",
                  granularity: str = "per-channel", group_size: int = 32,
                  keep: Mapping | Iterable[str] = (), budgets: Mapping | Iterable[str] = (),
                  min_int8_share: float = 0.8, max_steps: int = 8, attribute_failures: bool = False,
                  ort_platform: str = "arm", time_budget: float | None = DEFAULT_TIME_BUDGET,
                  source_options: SourceOptions = SourceOptions()) -> ConvertRequest:
    """The request for these options, each as the command line spells it (`keep`, `budgets`,
    `thresholds` and `output_kinds` also as {name: value}); BadInput for any that cannot be used."""
    precision = Precision.parse(precision)
    if int8:
        if precision not in (Precision.FP32, Precision.INT8):
            raise BadInput(f"--int8 contradicts --precision {precision}", fix="give one of them")
        precision = Precision.INT8
    if calibration is None and (calib_samples is not None or calib_preprocess is not None):
        raise BadInput("--calib-samples and --calib-preprocess need --calib", fix="give the calibration data too")
    if isinstance(calibration, str):
        calibration = CalibrationSpec(calibration, calib_samples, calib_preprocess)
    quant = QuantSpec(precision, calib_method, granularity=str(granularity).replace("-", "_"), int8_io=int8_io,
                      bias_correction=bias_correction, smooth_quant=smooth_quant, int16_stem=int16_stem,
                      int16_activations=int16_activations, optimize=optimize, group_size=int(group_size),
                      overrides=parse_overrides(keep))
    search = SearchSpec(parse_budgets(budgets), min_int8_share, max_steps)
    try:
        seconds = float(time_budget) if time_budget else None
    except (TypeError, ValueError):
        raise BadInput(f"--time-budget {time_budget!r} is not a number of seconds", fix="give seconds ≥ 0 (0: none)") from None
    return ConvertRequest(str(source), (targets,) if isinstance(targets, str) else tuple(targets), str(out), quant,
                          search, eval_data=str(eval_data) if eval_data else None,
                          thresholds=parse_thresholds(thresholds), source_options=source_options,
                          calibration=calibration, output_kinds=parse_output_kinds(output_kinds),
                          attribute_failures=attribute_failures, ort_platform=ort_platform,
                          time_budget=seconds)
