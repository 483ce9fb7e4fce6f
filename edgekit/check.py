"""`edgekit check`: the CI gate. Convert and verify what a config lists; judge it against budgets.

The config (TOML) lists models, each with its targets, precisions, data and budgets:

    [[models]]
    name = "digits_cnn"
    path = "sample_models/digits_cnn.pt2"
    calibration = "sample_models/digits_calib.npz"   # needed for int8
    eval = "sample_models/digits_eval.npz"
    targets = ["tflite", "executorch", "onnx"]
    precisions = ["fp32", "int8"]

    [models.budgets]                 # for every precision ...
    max_accuracy_drop = 0.01         # task accuracy, source minus artifact (needs labels)
    [models.budgets.int8]            # ... and per precision, which wins
    cosine = 0.995                   # any verification metric: a minimum or a maximum as edgekit defines
    max_bytes = 60000

With `search = true` (or a `[models.search]` table with `min_int8_share` and `max_steps`), an int8
case that misses its metric budgets keeps the fewest layers back from int8 until they hold
(edgekit.search); the baseline records the layers it kept, and the next run starts from them.
`bias_correction = true` corrects the int8 models' biases after calibration, `smooth_quant = true`
smooths a transformer's linears before it (the search tries both on its own; the baseline records
whether it used them).

Instead of targets and precisions, a model may list `artifacts = ["build/m.int8.tflite", ...]`:
artifacts built elsewhere, verified as they are (target and precision read from the files).

Each model × target × precision is one case; a case fails when its verification fails or a budget
is broken. Failing int8 cases carry their layers ranked by the SQNR each loses (edgekit.attribution).
Every problem in the config is a BadInput naming the key. A config may come from a pull request, so
it cannot reach outside its project: `name` is a plain name (the model's folder under --out),
`module:function` specs must name modules inside the config's folder, and trust (--trust-pickle,
--trust-model-code) comes from the command line only.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from edgekit.errors import BadInput, reading
from edgekit.quant import PASSES
from edgekit.registry import PRECISIONS
from edgekit.verify import HIGHER_IS_BETTER

SCHEMA = "edgekit.check/1"
BUDGET_KEYS = {"max_accuracy_drop", "min_accuracy", "max_bytes", *HIGHER_IS_BETTER}
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # a model's name is a folder under --out: no separators, no ..
MODEL_KEYS = {"name", "path", "calibration", "eval", "targets", "precisions", "input_shape", "calib_method",
              "bias_correction", "smooth_quant", "budgets", "artifacts", "search"}
SEARCH_KEYS = {"min_int8_share", "max_steps"}


@dataclass(frozen=True)
class ModelCheck:
    name: str
    path: str
    targets: tuple[str, ...]
    precisions: tuple[str, ...]
    calibration: str | None = None
    eval: str | None = None
    input_shape: tuple[str, ...] = ()
    calib_method: str = "minmax"
    bias_correction: bool = False  # int8: correct biases after calibration (tflite from torch, executorch, onnx, ort)
    smooth_quant: bool = False  # int8: SmoothQuant before calibration (the same targets)
    budgets: dict = field(default_factory=dict)  # precision (or "*") → {key: limit}
    artifacts: tuple[str, ...] = ()  # given artifacts: verified as they are instead of converting
    project: str | None = None  # the config's folder: import specs must name its modules
    search: dict | None = None  # accuracy-aware int8 (edgekit.search): {min_int8_share, max_steps}, or None

    def budget(self, precision: str) -> dict:
        return {**self.budgets.get("*", {}), **self.budgets.get(precision, {})}

    def source_options(self, trust=None):
        """How to open this model: its input shapes and project from the config, trust from the command line."""
        from edgekit.loading import SourceOptions

        return SourceOptions(trust_pickle=bool(trust and trust.trust_pickle),
                             trust_model_code=bool(trust and trust.trust_model_code),
                             input_shapes=self.input_shape, project=self.project)


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
    precisions = strings("precisions", ["fp32"])
    bad = [p for p in precisions if p not in PRECISIONS]
    if bad:
        raise BadInput(f"{where}.precisions: unknown {bad}", fix=f"use {', '.join(PRECISIONS)}")
    if "int8" in precisions and not m.get("calibration") and not artifacts:
        raise BadInput(f"{where}: int8 needs 'calibration'", fix="point calibration at an .npz of real inputs")
    return ModelCheck(
        name=name, path=rel("path"), targets=strings("targets", []),
        precisions=precisions, calibration=rel("calibration"), eval=rel("eval"),
        input_shape=strings("input_shape", []), calib_method=str(m.get("calib_method", "minmax")),
        bias_correction=_flag(m, "bias_correction", where), smooth_quant=_flag(m, "smooth_quant", where),
        budgets=_budgets(m.get("budgets", {}), where), artifacts=artifacts, project=str(base.resolve()),
        search=_search(m.get("search"), where, "int8" in precisions),
    )


def _flag(m: dict, key: str, where: str) -> bool:
    value = m.get(key, False)
    if not isinstance(value, bool):
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


def _budgets(raw, where: str) -> dict:
    if not isinstance(raw, dict):
        raise BadInput(f"{where}.budgets must be a table")
    out: dict = {"*": {}}
    for key, value in raw.items():
        if key in PRECISIONS:
            if not isinstance(value, dict):
                raise BadInput(f"{where}.budgets.{key} must be a table")
            out[key] = {k: _limit(k, v, f"{where}.budgets.{key}") for k, v in value.items()}
        else:
            out["*"][key] = _limit(key, value, f"{where}.budgets")
    return out


def _limit(key: str, value, where: str) -> float:
    if key not in BUDGET_KEYS:
        raise BadInput(f"{where}: unknown budget '{key}'", fix=f"budgets: {', '.join(sorted(BUDGET_KEYS))}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadInput(f"{where}.{key} must be a number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Case:
    model: str
    target: str
    precision: str
    status: str  # pass | fail
    reasons: tuple[str, ...]
    bytes: int
    metrics: dict
    task_accuracy: dict | None
    path: str
    seconds: float
    hashes: dict = field(default_factory=dict)  # artifact, model and calibration data sha256
    tool_versions: dict = field(default_factory=dict)
    changes: tuple[str, ...] = ()  # against the baseline, when there is one
    budget: dict = field(default_factory=dict)
    layers: tuple = ()  # LayerDrift, the layer losing the most first (int8 only)
    layers_note: str | None = None  # why there is no attribution, when one was asked for
    overrides: tuple = ()  # the layers kept back from int8 ({"layer", "precision"})
    bias_correction: bool = False  # whether the int8 model's biases were corrected
    smooth_quant: bool = False  # whether its linears were smoothed
    search: dict | None = None  # the accuracy-aware search's record, when the case searched

    @property
    def name(self) -> str:
        return f"{self.model} {self.target} {self.precision}"

    def baseline_entry(self) -> dict:
        return {"bytes": self.bytes, "metrics": self.metrics.get("output_0", {}),
                "task_accuracy": self.task_accuracy, "sha256": self.hashes, "tool_versions": self.tool_versions,
                "overrides": list(self.overrides), "bias_correction": self.bias_correction,
                "smooth_quant": self.smooth_quant}


def run_checks(models: tuple[ModelCheck, ...], out_dir: str, progress=None, attribution: str = "failing",
               trust=None, seeds: dict | None = None, cache=None) -> list[Case]:
    """Convert (or take the given artifacts) and verify every model × precision; judge each against its budgets.

    `attribution`: for which int8 cases to rank the layers by drift — "failing", "all" or "none".
    `trust`: a SourceOptions whose trust_pickle/trust_model_code come from the command line (never
    from the config, which a pull request may change). `seeds`: case name → the layer overrides a
    baseline recorded, and whether it corrected biases (see `baseline_seeds`); a searching case starts
    from them.
    """
    from edgekit.calibration.sources import CalibrationSpec
    from edgekit.pipeline import ConvertRequest, Sources, convert, verify_artifacts
    from edgekit.quant import LayerOverride
    from edgekit.search import parse_budgets

    cases = []
    sources = Sources()  # each model is opened once, for every precision and for attribution
    for m in models:
        def request(precision: str, targets=None, seed=None) -> ConvertRequest:
            searching = m.search is not None and precision == "int8"
            return ConvertRequest(
                m.path, targets or m.targets or ("all",), str(Path(out_dir) / m.name / precision), precision=precision,
                eval_data=m.eval, thresholds=_metric_limits(m.budget(precision)),
                source_options=m.source_options(trust),
                calibration=CalibrationSpec(m.calibration, project=m.project) if m.calibration and precision == "int8" else None,
                calib_method=m.calib_method,
                **{p: precision == "int8" and (getattr(m, p) or bool(seed and seed[p])) for p in PASSES},
                overrides=tuple(LayerOverride(o["layer"], o["precision"]) for o in (seed or {}).get("overrides", ())),
                **({"budgets": parse_budgets({k: v for k, v in m.budget(precision).items() if k in _OUTPUT_METRICS}),
                    **m.search} if searching else {}),
            )

        if m.artifacts:
            result = verify_artifacts(request("fp32"), list(m.artifacts),
                                      lambda p: _metric_limits(m.budget(p)), progress, sources)
            judged = [_judge(m, r, result, r.artifact.precision) for r in result.artifacts]
        else:
            judged = []
            for precision in m.precisions:
                seeded = {t: (seeds or {}).get(f"{m.name} {t} {precision}") for t in m.targets}
                if m.search is not None and precision == "int8" and "all" not in m.targets and any(seeded.values()):
                    # Each target starts from the layers its last baseline kept back: one run per target.
                    runs = [request(precision, (t,), seeded[t]) for t in m.targets]
                else:
                    runs = [request(precision)]
                for req in runs:
                    result = convert(req, progress, sources=sources, cache=cache)
                    judged += [_judge(m, r, result, precision) for r in result.artifacts]
        floats = {c.target: c.path for c in judged if c.precision == "fp32"}  # the float references attribution needs
        cases += [_attribute(m, c, progress, trust, sources, floats.get(c.target)) if _wants_layers(c, attribution)
                  else c for c in judged]
    return cases


_OUTPUT_METRICS = {k for k in HIGHER_IS_BETTER if k not in ("int8_weight_share", "int8_compute_share",
                                                             "int8_heavy_op_share")}


def _metric_limits(budget: dict) -> dict:
    return {k: v for k, v in budget.items() if k in HIGHER_IS_BETTER}


def _judge(m: ModelCheck, r, result, precision: str) -> Case:
    """One artifact against its budgets: verification reasons, then accuracy and size budgets."""
    budget = m.budget(precision)
    reasons = list(r.verdict.reasons)
    acc = r.verdict.task_accuracy
    if "max_accuracy_drop" in budget or "min_accuracy" in budget:
        if acc is None:
            reasons.append("an accuracy budget needs eval data with labels")
        else:
            drop = acc["reference"] - acc["artifact"]
            if drop > budget.get("max_accuracy_drop", float("inf")):
                reasons.append(f"accuracy drop {drop * 100:.2f} points > budget "
                               f"{budget['max_accuracy_drop'] * 100:.2f} ({acc['reference']:.4f} → {acc['artifact']:.4f})")
            if acc["artifact"] < budget.get("min_accuracy", -1):
                reasons.append(f"accuracy {acc['artifact']:.4f} < budget {budget['min_accuracy']:.4f}")
    if r.bytes > budget.get("max_bytes", float("inf")):
        reasons.append(f"size {r.bytes} bytes > budget {int(budget['max_bytes'])}")
    hashes = {"artifact": r.sha256, "model": result.source_sha256,
              "calibration": _file_sha256(m.calibration) if m.calibration and precision == "int8" else None}
    quantization = r.artifact.meta.get("quantization") or {}
    return Case(m.name, r.target, precision, "fail" if reasons else "pass", tuple(reasons),
                r.bytes, r.verdict.metrics, acc, r.artifact.path,
                r.artifact.meta.get("seconds") or 0.0, hashes, dict(r.artifact.meta.get("tool_versions", {})),
                budget=budget, overrides=tuple(quantization.get("overrides", ())),
                search=r.artifact.meta.get("search"), **{p: bool(quantization.get(p)) for p in PASSES})


def _wants_layers(c: Case, attribution: str) -> bool:
    return c.precision == "int8" and (attribution == "all" or (attribution == "failing" and c.status == "fail"))


def _attribute(m: ModelCheck, c: Case, progress, trust, sources, float_path: str | None) -> Case:
    """The case with its layers ranked by the SQNR they lose, or a note saying why there are none. The source
    is the one `sources` opened for the conversion; the float reference is the case's fp32 artifact when the
    config has one."""
    from dataclasses import replace

    from edgekit.attribution import attribute
    from edgekit.calibration.sources import CalibrationSpec
    from edgekit.errors import EdgekitError

    try:
        model = sources.open(m.path, m.source_options(trust))
        layers = attribute(c.path, m.path, source_options=m.source_options(trust), model=model, float_path=float_path,
                           eval_data=m.eval,
                           calibration=CalibrationSpec(m.calibration, project=m.project) if m.calibration else None,
                           method=m.calib_method, bias_correction=c.bias_correction, smooth_quant=c.smooth_quant,
                           progress=progress)
    except EdgekitError as e:
        return replace(c, layers_note=f"no per-layer attribution: {e}")
    return replace(c, layers=tuple(layers))


def _file_sha256(path: str) -> str | None:
    from edgekit.artifact import sha256_files

    return sha256_files([path]) if Path(path).is_file() else None


BASELINE_SCHEMA = "edgekit.baseline/1"
COMPARED = ("cosine", "sqnr_db", "max_abs", "top1_agreement")


def write_baseline(cases: list[Case], path: str | Path) -> None:
    """Record what every case measured, for later runs to report change against."""
    import json

    doc = {"schema": BASELINE_SCHEMA, "cases": {c.name: c.baseline_entry() for c in cases}}
    Path(path).write_text(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")


def baseline_seeds(path: str | Path) -> dict:
    """Case name → {"overrides": the layer overrides, "bias_correction": bool, "smooth_quant": bool} the
    baseline at `path` recorded (only cases that kept layers back or used a whole-model pass); {} when
    there is no readable baseline."""
    import json

    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict) or doc.get("schema") != BASELINE_SCHEMA or not isinstance(doc.get("cases"), dict):
        return {}
    out = {}
    for name, entry in doc["cases"].items():
        if not isinstance(entry, dict):
            continue
        rows = entry.get("overrides")
        rows = rows if isinstance(rows, list) and all(isinstance(o, dict) and isinstance(o.get("layer"), str)
                                                      and o.get("precision") in ("float", "int16") for o in rows) else []
        passes = {p: entry.get(p) is True for p in PASSES}
        if rows or any(passes.values()):
            out[name] = {"overrides": rows, **passes}
    return out


def compare_baseline(cases: list[Case], path: str | Path) -> list[Case]:
    """Each case with the changes since the baseline ("tflite int8 cosine 0.995 → 0.981, budget 0.99")."""
    import json
    from dataclasses import replace

    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise BadInput(f"cannot read baseline {path}: {e}", fix="write one with --update-baseline") from None
    if doc.get("schema") != BASELINE_SCHEMA:
        raise BadInput(f"{path} is not an edgekit baseline ({BASELINE_SCHEMA})")
    out = []
    for c in cases:
        old = doc["cases"].get(c.name)
        if old is None:
            out.append(replace(c, changes=("new: not in the baseline",)))
            continue
        changes, budget = [], c.budget
        now = c.baseline_entry()
        for key in COMPARED:
            a, b = old["metrics"].get(key), now["metrics"].get(key)
            if a is not None and b is not None and abs(a - b) > 1e-6 * max(1.0, abs(a)):
                limit = f", budget {budget[key]:g}" if key in budget else ""
                changes.append(f"{c.target} {c.precision} {key} {a:.6g} → {b:.6g}{limit}")
        if old["bytes"] != now["bytes"]:
            limit = f", budget {int(budget['max_bytes'])}" if "max_bytes" in budget else ""
            changes.append(f"{c.target} {c.precision} bytes {old['bytes']} → {now['bytes']}{limit}")
        for what in ("model", "calibration"):
            if old["sha256"].get(what) != now["sha256"].get(what):
                changes.append(f"the {what} changed since the baseline")
        out.append(replace(c, changes=tuple(changes)))
    return out


def to_json(cases: list[Case]) -> dict:
    return {"schema": SCHEMA, "passed": sum(c.status == "pass" for c in cases),
            "failed": sum(c.status == "fail" for c in cases),
            "cases": [{"model": c.model, "target": c.target, "precision": c.precision, "status": c.status,
                       "reasons": list(c.reasons), "bytes": c.bytes, "path": c.path, "metrics": c.metrics,
                       "task_accuracy": c.task_accuracy, "sha256": c.hashes, "tool_versions": c.tool_versions,
                       "changes": list(c.changes), "layers": [d.to_json() for d in c.layers],
                       "layers_note": c.layers_note, "overrides": list(c.overrides),
                       "bias_correction": c.bias_correction, "smooth_quant": c.smooth_quant, "search": c.search}
                      for c in cases]}


def to_junit(cases: list[Case]) -> str:
    """JUnit XML: one test case per model × target × precision."""
    import xml.etree.ElementTree as ET

    suite = ET.Element("testsuite", name="edgekit check", tests=str(len(cases)),
                       failures=str(sum(c.status == "fail" for c in cases)))
    for c in cases:
        case = ET.SubElement(suite, "testcase", classname=f"edgekit.{c.model}", name=f"{c.target} {c.precision}",
                             time=f"{c.seconds:.3f}")
        if c.status == "fail":
            failure = ET.SubElement(case, "failure", message="; ".join(c.reasons))
            failure.text = "\n".join([*c.reasons, *_search_lines(c),
                                      *(f"layer {i}: {d.text()}" for i, d in enumerate(c.layers[:5], 1))])
        elif c.search:
            ET.SubElement(case, "system-out").text = "\n".join(_search_lines(c))
    return ET.tostring(ET.ElementTree(suite).getroot(), encoding="unicode", xml_declaration=True)


def _search_lines(c: Case) -> list[str]:
    """The accuracy-aware search of a case, in lines: why it stopped, then each layer kept back."""
    if not c.search:
        return []
    s = c.search
    lines = [f"search: {s['why']} ({s['conversions']} conversions, {s['seconds']:.1f} s; int8 share {s['int8_share']:.3f})"]
    for k in s["kept"]:
        gains = ", ".join(f"{m} {d:+.4g}" for m, d in k["contribution"].items() if d is not None)
        lines.append(f"kept back: {k['layer']} at {k['precision']} ({k['bytes']:+d} bytes; {gains})")
    for name, label in PASSES.items():
        if s.get(f"{name}_contribution"):
            gains = ", ".join(f"{m} {d:+.4g}" for m, d in s[f"{name}_contribution"].items() if d is not None)
            lines.append(f"{label} kept ({gains})")
    return lines


def to_markdown(cases: list[Case]) -> str:
    failed = [c for c in cases if c.status == "fail"]
    head = (f"### edgekit check: {'❌ ' + str(len(failed)) + ' failed' if failed else '✅ all passed'} "
            f"({len(cases)} cases)\n\n")
    rows = ["| model | target | precision | status | size | cosine | accuracy src → artifact |",
            "|---|---|---|---|---:|---:|---|"]
    for c in cases:
        m = c.metrics.get("output_0", {})
        acc = c.task_accuracy
        acc_text = f"{acc['reference'] * 100:.2f}% → {acc['artifact'] * 100:.2f}%" if acc else "—"
        rows.append(f"| {c.model} | {c.target} | {c.precision} | {'✅ pass' if c.status == 'pass' else '❌ fail'} | "
                    f"{c.bytes:,} B | {m.get('cosine', float('nan')):.6f} | {acc_text} |")
    details = "".join(f"\n- **{c.name}**: " + "; ".join(c.reasons) for c in failed)
    changed = "".join(f"\n- {change}" for c in cases for change in c.changes)
    return (head + "\n".join(rows) + "\n" + (f"\n#### Broken budgets{details}\n" if failed else "")
            + "".join(_search_markdown(c) for c in cases if c.search)
            + "".join(_layers_markdown(c) for c in cases if c.layers or c.layers_note)
            + (f"\n#### Changes since the baseline{changed}\n" if changed else ""))


def _search_markdown(c: Case) -> str:
    s = c.search
    rows = ["| layer kept back | at | bytes | contribution |", "|---|---|---:|---|"]
    for k in s["kept"]:
        gains = ", ".join(f"{m} {d:+.4g}" for m, d in k["contribution"].items() if d is not None)
        rows.append(f"| `{k['layer']}` | {k['precision']} | {k['bytes']:+,} | {gains} |")
    table = "\n" + "\n".join(rows) + "\n" if s["kept"] else ""
    return (f"\n#### Accuracy-aware int8: {c.name}\n{s['why']} — {s['conversions']} conversions, {s['seconds']:.1f} s, "
            f"{s['int8_share'] * 100:.1f}% of weight bytes int8\n{table}")


def _layers_markdown(c: Case) -> str:
    """The layers of one int8 case that lose the most SQNR, as a table."""
    from edgekit.attribution import SHOWN

    if not c.layers:
        return f"\n#### Layers of {c.name}\n{c.layers_note}\n"
    rows = ["| layer | op | SQNR lost | output SQNR | weight SQNR |", "|---|---|---:|---:|---:|"]
    for d in c.layers[:SHOWN]:
        w = f"{d.weight_sqnr_db:.1f} dB" if d.weight_sqnr_db is not None else "—"
        rows.append(f"| `{d.layer}` | {d.op} | {d.loss_db:.1f} dB | {d.sqnr_db:.1f} dB | {w} |")
    return f"\n#### Layers of {c.name} losing the most (SQNR vs. float, per layer)\n" + "\n".join(rows) + "\n"
