"""The options of a conversion, declared once: each one's name at every front door that takes it — the
command line's flag (`edgekit convert`), the Python API's keyword (`edgekit.convert`, also the request
builder's), a check config's key (`[[models]]` in edgekit.toml) — or why that door does not take it.

`tests/test_option_schema.py` holds every front door to this table: an option a door lacks without a reason here,
or a door's option missing here, fails it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DOORS = ("cli", "api", "config")


@dataclass(frozen=True)
class Option:
    """One option: its API keyword (`name`), command-line flag, check-config key (its name under `[[models]]`,
    or under `[models.search]` for `search.KEY`), and, for each door that does not take it, why."""

    name: str
    flag: str
    key: str | None = None
    why_not: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        if set(self.why_not) - set(DOORS):
            raise ValueError(f"{self.name}: unknown door in {sorted(self.why_not)}")
        if (self.key is None) != ("config" in self.why_not):
            raise ValueError(f"{self.name}: a config key, or why a check config does not take it")


_CHECK_RUN = "a property of the whole check run: `edgekit check`'s own option"
_TRUST = "trust is the user's to give on the command line, never a config's (a pull request can change the config)"

CONVERT_OPTIONS = (
    Option("source", "MODEL", "path"),
    Option("targets", "--target", "targets"),
    Option("out", "--out", why_not={"config": "each case is placed under check's --out, in <name>/<precision>"}),
    Option("precision", "--precision", "precisions"),
    Option("int8", "--int8", why_not={"config": "a shortcut for precision int8; a config lists its precisions"}),
    Option("max_seq_len", "--max-seq-len", "max_seq_len"),
    Option("prefill_len", "--prefill-len", "prefill_len"),
    Option("group_size", "--group-size", "group_size"),
    Option("int8_io", "--int8-io", "int8_io"),
    Option("calibration", "--calib", "calibration"),
    Option("calib_samples", "--calib-samples", "calib_samples"),
    Option("calib_method", "--calib-method", "calib_method"),
    Option("calib_preprocess", "--calib-preprocess", "calib_preprocess"),
    Option("bias_correction", "--bias-correction", "bias_correction"),
    Option("smooth_quant", "--smooth-quant", "smooth_quant"),
    Option("int16_stem", "--int16-stem", "int16_stem"),
    Option("int16_activations", "--int16-activations", "int16_activations"),
    Option("optimize", "--optimize", "optimize"),
    Option("ort_platform", "--ort-platform", "ort_platform"),
    Option("granularity", "--granularity", "granularity"),
    Option("eval_data", "--eval", "eval"),
    Option("input_shapes", "--input-shape", "input_shape"),
    Option("example_inputs", "--example-inputs", "example_inputs"),
    Option("model_class", "--model-class", "model_class"),
    Option("trust_pickle", "--trust-pickle", why_not={"config": _TRUST}),
    Option("trust_model_code", "--trust-model-code", why_not={"config": _TRUST}),
    Option("thresholds", "--threshold", "budgets"),
    Option("output_kinds", "--output-kind", "output_kinds"),
    Option("budgets", "--budget", "budgets"),
    Option("min_int8_share", "--min-int8-share", "search.min_int8_share"),
    Option("max_steps", "--max-steps", "search.max_steps"),
    Option("keep", "--keep", why_not={"config": "check keeps the layers its baseline's search kept (--update-baseline)"}),
    Option("attribution", "--attribution", why_not={"config": _CHECK_RUN + " (--attribution failing|all|none)"}),
    Option("time_budget", "--time-budget", "time_budget"),
    Option("cache", "--no-cache", why_not={"config": _CHECK_RUN + " (--no-cache)"}),
    Option("as_json", "--json", why_not={"api": "the API returns the result; its to_json() is this document",
                                         "config": _CHECK_RUN + " (--json, --junit, --markdown)"}),
    Option("bench", "--bench", why_not={"api": "edgekit.bench times artifacts",
                                        "config": "a check times artifacts where a latency budget asks for it"}),
    Option("progress", "", why_not={"cli": "the command line prints its progress on stderr",
                                    "config": _CHECK_RUN + " (its progress on stderr)"}),
)


def config_keys(options=CONVERT_OPTIONS) -> set[str]:
    """The `[[models]]` keys the options take (a `search.KEY` counts as `search`)."""
    return {o.key.partition(".")[0] for o in options if o.key is not None}
