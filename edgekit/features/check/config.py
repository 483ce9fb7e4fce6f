"""The check config: [[models]] tables read, validated and turned into ModelChecks (see edgekit.features.check)."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from edgekit.core.errors import BadInput, reading
from edgekit.core.option_schema import config_keys
from edgekit.core.quant import PRECISION_ALIASES, PassFlags, Precision
from edgekit.core.verify import HIGHER_IS_BETTER, parse_output_kinds
from edgekit.sources.loading import SourceOptions
from edgekit.engine.deadline import DEFAULT_TIME_BUDGET

LATENCY_BUDGETS = ("max_latency_ms", "min_int8_speedup")  # host CPU latency at 1 thread (edgekit.features.bench)
# a decoder LM's budgets by the names its metrics' limits read as (min_token_agreement = 0.98)
LM_BUDGETS = {"min_token_agreement": "token_agreement", "max_perplexity_ratio": "perplexity_ratio"}
BUDGET_KEYS = {"max_accuracy_drop", "min_accuracy", "max_bytes", *LATENCY_BUDGETS, *HIGHER_IS_BETTER, *LM_BUDGETS}
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # a model's name is a folder under --out: no separators, no ..
# a case's options (edgekit.core.option_schema), and what only a config has: its name and given artifacts
MODEL_KEYS = {"name", "artifacts", *config_keys()}
# options passed to the request as they are, by type: {key: (type, example)}
_PLAIN = {"int8_io": (bool, "true"), "group_size": (int, "64"), "optimize": (str, '"accuracy"'),
          "ort_platform": (str, '"x86"'), "granularity": (str, '"per-tensor"')}
_CALIBRATION = {"calib_samples": (int, "64"), "calib_preprocess": (str, '"size=32x32,scale=1/255"')}
_SOURCE = {"max_seq_len": (int, "128"), "prefill_len": (int, "16"), "model_class": (str, '"model:Net"')}
SEARCH_KEYS = {"min_int8_share", "max_steps"}


@dataclass(frozen=True)
class ModelCheck(PassFlags):
    """One [[models]] table, validated: paths resolved against the config's folder (import specs and `random`
    as given), `name` unique in the config (it is the model's folder under --out)."""

    name: str
    path: str
    targets: tuple[str, ...]
    precisions: tuple[str, ...]
    calibration: str | None = None
    eval: str | None = None
    input_shape: tuple[str, ...] = ()
    calib_method: str | None = None  # None: the default recipe's
    bias_correction: bool | None = None  # int8: correct biases after calibration; None: wherever the backend has it
    smooth_quant: bool | None = None  # int8: SmoothQuant before calibration; None: where the model and backend have it
    int16_stem: bool = False  # int8: int16 activations at high resolution (onnx, ort)
    int16_activations: bool = False  # int8: int16 activations everywhere (onnx, ort)
    budgets: dict = field(default_factory=dict)  # precision (or "*") → {key: limit}
    artifacts: tuple[str, ...] = ()  # given artifacts: verified as they are instead of converting
    project: str | None = None  # the config's folder: import specs must name its modules
    search: dict | None = None  # accuracy-aware int8 (edgekit.engine.search): {min_int8_share, max_steps}, or None
    output_kinds: dict = field(default_factory=dict)  # output name → kind (edgekit.core.verify.KINDS)
    time_budget: float | None = DEFAULT_TIME_BUDGET  # seconds each target may take (edgekit.engine.deadline); None: none
    options: dict = field(default_factory=dict)  # the request's other options as given (_PLAIN: int8_io, group_size, …)
    calibration_options: dict = field(default_factory=dict)  # how much of the calibration data, and how (_CALIBRATION)
    opening: dict = field(default_factory=dict)  # how to open the source beyond input_shape (_SOURCE, example_inputs)

    def options_for(self, precision: str) -> dict:
        """The request options of the case at `precision`: int8_io at int8 only (the config's precisions share it)."""
        return {k: v for k, v in self.options.items() if k != "int8_io" or precision == Precision.INT8}

    def budget(self, precision: str) -> dict:
        """The limits for `precision`: the "*" budgets, overridden key by key by the precision's own."""
        return {**self.budgets.get("*", {}), **self.budgets.get(precision, {})}

    def source_options(self, trust=None):
        """How to open this model: its input shapes and project from the config, trust from the command line."""
        return SourceOptions(trust_pickle=bool(trust and trust.trust_pickle),
                             trust_model_code=bool(trust and trust.trust_model_code),
                             input_shapes=self.input_shape, project=self.project, **self.opening)


def load_config(path: str | Path) -> tuple[ModelCheck, ...]:
    """Read and validate a check config; paths inside it are relative to the config's folder."""
    path = Path(path)
    if not path.is_file():
        raise BadInput(f"check config not found: {path}", fix="write an edgekit.toml (see README, CI gate)")
    try:
        with reading(path, "a check config (UTF-8 TOML)"):
            text = path.read_text(encoding="utf-8")
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise BadInput(f"{path} is not valid TOML: {e}") from None
    unknown = set(raw) - {"models"}
    if unknown:
        raise BadInput(f"{path}: unknown top-level key(s) {sorted(unknown)}", fix="the config holds [[models]] tables")
    models = raw.get("models")
    if not isinstance(models, list) or not models:
        raise BadInput(f"{path}: no [[models]] listed", fix="add at least one [[models]] table")
    base = path.parent
    if not all(isinstance(m, dict) for m in models):
        raise BadInput(f"{path}: every entry of models must be a [[models]] table")
    checks = tuple(_model(m, i, base, path) for i, m in enumerate(models))
    names = [c.name for c in checks]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise BadInput(f"{path}: more than one model is named {', '.join(map(repr, twice))}; each name is its own "
                       "folder under --out", fix="give each [[models]] a distinct name")
    return checks


def _model(m: dict, i: int, base: Path, config: Path) -> ModelCheck:
    where = f"{config}: models[{i}]"
    unknown = set(m) - MODEL_KEYS
    if unknown:
        raise BadInput(f"{where}: unknown key(s) {sorted(unknown)}", fix=f"known keys: {', '.join(sorted(MODEL_KEYS))}")
    for key in ("path", "targets") if "artifacts" not in m else ("path",):
        if key not in m:
            raise BadInput(f"{where}: missing '{key}'")
    where = f"{config}: models[{i}] ({m.get('name', m['path'])})"

    def rel(key):
        value = m.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise BadInput(f"{where}.{key} must be a string")
        p = base / value
        if p.exists() or (":" not in value and value != "random"):
            return str(p)
        return value  # module:function specs and `random` stay as given

    def strings(key, default):
        value = m.get(key, default)
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise BadInput(f"{where}.{key} must be a list of strings")
        return tuple(value)

    if not isinstance(m["path"], str):
        raise BadInput(f"{where}.path must be a string")
    name = m.get("name") or Path(m["path"]).stem
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise BadInput(f"{where}.name {name!r} is not a plain name: it names the model's folder under --out",
                       fix="use letters, digits, '_', '-' and '.', starting with a letter or digit (at most 64)")
    artifacts = tuple(str(base / a) for a in strings("artifacts", []))
    if "artifacts" in m and ("targets" in m or "precisions" in m):
        raise BadInput(f"{where}: give either 'artifacts' or 'targets'/'precisions', not both",
                       fix="given artifacts are verified as they are; their target and precision come from the files")
    if "artifacts" in m and not artifacts:
        raise BadInput(f"{where}.artifacts is empty", fix="list artifact files, or use 'targets' to convert")
    missing = [a for a in artifacts if not Path(a).exists()]
    if missing:
        raise BadInput(f"{where}.artifacts: not found: {', '.join(missing)}")
    if not artifacts and not strings("targets", []):
        raise BadInput(f"{where}.targets is empty", fix="list targets (tflite, executorch, onnx, ort, ptl) or all")
    precisions = [_precision(p, f"{where}.precisions") for p in strings("precisions", ["fp32"])]
    if Precision.INT8 in precisions and not m.get("calibration") and not artifacts:
        raise BadInput(f"{where}: int8 needs 'calibration'", fix="point calibration at an .npz of real inputs")
    return ModelCheck(
        name=name, path=rel("path"), targets=strings("targets", []),
        precisions=precisions, calibration=rel("calibration"), eval=rel("eval"),
        input_shape=strings("input_shape", []), calib_method=_method(m, where),
        bias_correction=_flag(m, "bias_correction", where, None), smooth_quant=_flag(m, "smooth_quant", where, None),
        int16_stem=_flag(m, "int16_stem", where), int16_activations=_flag(m, "int16_activations", where),
        budgets=_budgets(m.get("budgets", {}), where), artifacts=artifacts, project=str(base.resolve()),
        search=_search(m.get("search"), where, Precision.INT8 in precisions), output_kinds=_output_kinds(m, where),
        time_budget=_seconds(m, "time_budget", where, DEFAULT_TIME_BUDGET), options=_typed(m, _PLAIN, where),
        calibration_options={k.removeprefix("calib_"): v for k, v in _typed(m, _CALIBRATION, where).items()},
        opening={**_typed(m, _SOURCE, where), **({"example_inputs": rel("example_inputs")} if "example_inputs" in m else {})},
    )


def _typed(m: dict, keys: dict, where: str) -> dict:
    """The values of `keys` ({key: (type, example)}) that `m` gives, each of its type; BadInput naming the key."""
    out = {}
    for key, (kind, example) in keys.items():
        if key not in m:
            continue
        value = m[key]
        if isinstance(value, bool) != (kind is bool) or not isinstance(value, kind):
            raise BadInput(f"{where}.{key}: {value!r} is not {'true or false' if kind is bool else kind.__name__}",
                           fix=f"write {key} = {example}")
        out[key] = value
    return out


def _seconds(m: dict, key: str, where: str, default: float) -> float | None:
    value = m.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise BadInput(f"{where}.{key}: {value!r} is not a number of seconds", fix=f"write {key} = 600 (0: no limit)")
    return float(value) or None


def _precision(word, where: str) -> Precision:
    """A precision of a check config, in the user's words (PRECISION_ALIASES); BadInput naming the key."""
    try:
        return Precision.parse(word)
    except BadInput as e:
        raise BadInput(f"{where}: {e.message}", fix=e.fix) from None


def _method(m: dict, where: str) -> str | None:
    value = m.get("calib_method")
    if value is not None and not isinstance(value, str):
        raise BadInput(f"{where}.calib_method: {value!r} is not a method name", fix='write calib_method = "minmax"')
    return value


def _flag(m: dict, key: str, where: str, default: bool | None = False) -> bool | None:
    value = m.get(key, default)
    if value is not default and not isinstance(value, bool):
        raise BadInput(f"{where}.{key}: {value!r} is not true or false", fix=f"write {key} = true")
    return value


def _search(raw, where: str, int8: bool) -> dict | None:
    """`search = true`, or a table with min_int8_share and max_steps: int8 cases search for the fewest
    layers to keep back until the model's metric budgets hold."""
    if raw is None or raw is False:
        return None
    if raw is True:
        raw = {}
    if not isinstance(raw, dict):
        raise BadInput(f"{where}.search must be true or a table", fix="search = true, or [models.search] with "
                                                                     "min_int8_share and max_steps")
    unknown = set(raw) - SEARCH_KEYS
    if unknown:
        raise BadInput(f"{where}.search: unknown key(s) {sorted(unknown)}", fix=f"known: {', '.join(sorted(SEARCH_KEYS))}")
    if not int8:
        raise BadInput(f"{where}.search needs int8 among the precisions", fix='precisions = ["int8"]')
    share, steps = raw.get("min_int8_share", 0.8), raw.get("max_steps", 8)
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
        raise BadInput(f"{where}.search.min_int8_share must be a share from 0 to 1, got {share!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise BadInput(f"{where}.search.max_steps must be a whole number ≥ 0, got {steps!r}")
    return {"min_int8_share": float(share), "max_steps": steps}


def _output_kinds(m: dict, where: str) -> dict:
    raw = m.get("output_kinds", {})
    if not isinstance(raw, dict):
        raise BadInput(f"{where}.output_kinds must be a table", fix='e.g. output_kinds = {output_1 = "regression"}')
    try:
        return parse_output_kinds(raw)
    except BadInput as e:
        raise BadInput(f"{where}.output_kinds: {e.message}", fix=e.fix) from None


def _budgets(raw, where: str) -> dict:
    if not isinstance(raw, dict):
        raise BadInput(f"{where}.budgets must be a table")
    out: dict = {"*": {}}
    for key, value in raw.items():
        if str(key).lower() in PRECISION_ALIASES:
            if not isinstance(value, dict):
                raise BadInput(f"{where}.budgets.{key} must be a table")
            out[Precision.parse(key)] = {LM_BUDGETS.get(k, k): _limit(k, v, f"{where}.budgets.{key}") for k, v in value.items()}
        else:
            out["*"][LM_BUDGETS.get(key, key)] = _limit(key, value, f"{where}.budgets")
    return out


def _limit(key: str, value, where: str) -> float:
    if key not in BUDGET_KEYS:
        raise BadInput(f"{where}: unknown budget '{key}'", fix=f"budgets: {', '.join(sorted(BUDGET_KEYS))}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadInput(f"{where}.{key} must be a number, got {value!r}")
    return float(value)
