"""`edgekit check`: the CI gate on the example config, broken budgets, and config errors."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from edgekit.features.check import load_config
from edgekit.features.check.run import Options, request
from edgekit.core.errors import BadInput
from tests import damage
from tests.conftest import (DIGITS, DIGITS_CALIB, DIGITS_EVAL, KERAS, KERAS_CALIB, KERAS_EVAL, REPO, convert_sample,
                            run_cli)

pytestmark = pytest.mark.slow
EXAMPLE = REPO / "edgekit.toml"


def digits_config(tmp_path, lines: str, budgets: str) -> Path:
    """A config checking the digits CNN (on its eval split) with the given model lines and budgets."""
    config = tmp_path / "edgekit.toml"
    config.write_text(f"""
[[models]]
name = "digits"
path = "{DIGITS}"
eval = "{DIGITS_EVAL}"
{lines}
{budgets}
""")
    return config


def digits_onnx_config(tmp_path, budgets: str) -> Path:
    """The digits CNN on onnx at fp32 with the given [models.budgets] lines."""
    return digits_config(tmp_path, 'targets = ["onnx"]', "[models.budgets]\n" + budgets)


def test_the_example_config_passes_with_junit_and_markdown(tmp_path):
    junit, summary = tmp_path / "check.xml", tmp_path / "summary.md"
    proc = run_cli("check", EXAMPLE, "--junit", junit, "--markdown", summary, "--json", "-o", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "edgekit.check/1" and doc["failed"] == 0 and doc["passed"] == 4
    suite = ET.parse(junit).getroot()
    assert suite.tag == "testsuite" and suite.get("tests") == "4" and suite.get("failures") == "0"
    assert sorted(c.get("name") for c in suite.iter("testcase")) == ["onnx fp32", "onnx int8", "tflite fp32", "tflite int8"]
    text = summary.read_text()
    assert "edgekit check: ✅ all passed (4 cases)" in text and text.count("| digits_cnn |") == 4
    # Again: every case comes from the artifact cache, the source is not even opened, the results are the same.
    again = run_cli("check", EXAMPLE, "--json", "-o", tmp_path / "out")
    assert again.returncode == 0, again.stderr
    assert again.stderr.count("placed from the cache") == 4 and "loading" not in again.stderr, again.stderr
    assert json.loads(again.stdout) == doc
    assert all(Path(c["path"]).is_file() for c in doc["cases"])
    # In two worker processes, converting again: the same results.
    parallel = run_cli("check", EXAMPLE, "--json", "--no-cache", "--jobs", "2", "-o", tmp_path / "out")
    assert parallel.returncode == 0, parallel.stderr
    assert "placed from the cache" not in parallel.stderr and "loading" in parallel.stderr
    assert json.loads(parallel.stdout) == doc
    # As Ray tasks on a local Ray instance the check starts itself: the same results, nothing from Ray on stderr.
    ray = run_cli("check", EXAMPLE, "--json", "--no-cache", "--executor", "ray", "--jobs", "2", "-o", tmp_path / "out")
    assert ray.returncode == 0, ray.stderr
    assert json.loads(ray.stdout) == doc
    assert "ray" not in ray.stderr.lower(), ray.stderr


def test_check_opens_each_source_model_once(tmp_path, monkeypatch):
    """Two precisions and the attribution of both int8 cases share one opened model and one reference run per set
    of samples: the eval samples, and the 32 calibration samples the default recipe chooses its onnx method on."""
    import edgekit.engine.pipeline
    import edgekit.features.attribution
    import edgekit.sources.loading
    from edgekit.features.check import run_checks

    opened = []
    real_open = edgekit.sources.loading.open_source
    for caller in (edgekit.engine.pipeline, edgekit.features.attribution):  # where open_source is called from
        monkeypatch.setattr(caller, "open_source", lambda *a, **k: opened.append(a[0]) or real_open(*a, **k))
    lines = []
    cases = run_checks(load_config(EXAMPLE), str(tmp_path / "out"), progress=lines.append, attribution="all")
    assert [c.status for c in cases] == ["pass"] * 4
    assert all(c.layers for c in cases if c.precision == "int8")  # attributed, against the fp32 artifacts
    assert opened == [str(DIGITS)]
    runs = [line for line in lines if line.startswith("running the source model")]
    assert sorted(runs) == ["running the source model on 32 samples", "running the source model on 360 samples"], lines


def test_a_broken_size_budget_exits_1_and_is_named(tmp_path):
    config = digits_onnx_config(tmp_path, "max_bytes = 100000\nmax_accuracy_drop = 0.0")
    junit = tmp_path / "check.xml"
    proc = run_cli("check", config, "--junit", junit, "-o", tmp_path / "out")
    assert proc.returncode == 1, proc.stderr
    assert "FAIL digits onnx fp32: size" in proc.stdout and "> budget 100000" in proc.stdout
    failure = ET.parse(junit).getroot().find("testcase/failure")
    assert failure is not None and "> budget 100000" in failure.get("message")


@pytest.mark.parametrize("body, message", [
    ('[[models]]\npath = "m.pt2"\ntargets = ["onnx"]\ncolour = "red"\n', r"unknown key\(s\) \['colour'\]"),
    ('[[models]]\npath = "m.pt2"\ntargets = ["onnx"]\n[models.budgets]\ncosinus = 0.9\n', "unknown budget 'cosinus'"),
    ('[[models]]\npath = "m.pt2"\ntargets = ["onnx"]\nprecisions = ["int4"]\n', r"precisions: unknown precision .int4."),
    ('[[models]]\npath = "m.pt2"\ntargets = ["onnx"]\nprecisions = ["int8"]\n', "int8 needs 'calibration'"),
    ('[[models]]\ntargets = ["onnx"]\n', "missing 'path'"),
    ('[[models]]\npath = "m.pt2"\ntargets = ["onnx"]\n[models.budgets]\nmax_bytes = "big"\n', "max_bytes must be a number"),
    ('models = 3\n', r"no \[\[models\]\] listed"),
    ('[[models]\n', "is not valid TOML"),
    ('[[models]]\npath = "m.pt2"\nartifacts = ["nowhere.tflite"]\n', r"artifacts: not found: .*nowhere.tflite"),
    ('[[models]]\npath = "m.pt2"\nartifacts = []\ntargets = ["onnx"]\n', "either 'artifacts' or 'targets'"),
    ('[[models]]\npath = "m.pt2"\ntargets = []\n', "targets is empty"),
    ('[[models]]\npath = "m.pt2"\ntargets = ["onnx"]\ntime_budget = "1h"\n', r"time_budget: '1h' is not a number of seconds"),
], ids=["key", "budget", "precision", "calibration", "path", "number", "models", "toml", "artifact", "both", "no-targets",
        "seconds"])
def test_config_errors_name_the_key(tmp_path, body, message):
    config = tmp_path / "edgekit.toml"
    config.write_text(body)
    with pytest.raises(BadInput, match=message):
        load_config(config)


def test_a_models_time_budget_reaches_its_requests(tmp_path):
    (tmp_path / "m.pt2").write_bytes(b"")
    config = tmp_path / "edgekit.toml"
    config.write_text('[[models]]\npath = "m.pt2"\ntargets = ["onnx"]\ntime_budget = 600\n[[models]]\nname = "b"\n'
                      'path = "m.pt2"\ntargets = ["onnx"]\ntime_budget = 0\n')
    timed, unbounded = load_config(config)
    assert (timed.time_budget, unbounded.time_budget) == (600.0, None)
    assert request(timed, "fp32", Options(str(tmp_path / "out"))).time_budget == 600.0
    assert request(unbounded, "fp32", Options(str(tmp_path / "out"))).time_budget is None


def test_a_config_error_exits_2(tmp_path):
    config = tmp_path / "edgekit.toml"
    config.write_text('[[models]]\npath = "m.pt2"\ntargets = ["onnx"]\ncolour = "red"\n')
    proc = run_cli("check", config)
    assert proc.returncode == 2 and "unknown key(s) ['colour']" in proc.stderr and "Traceback" not in proc.stderr


def test_a_baseline_records_the_run_and_later_runs_report_change(tmp_path):
    config = digits_onnx_config(tmp_path, "cosine = 0.9999")
    first = run_cli("check", config, "--update-baseline", "-o", tmp_path / "out")
    assert first.returncode == 0, first.stderr
    baseline_path = tmp_path / "edgekit.baseline.json"
    baseline = json.loads(baseline_path.read_text())
    entry = baseline["cases"]["digits onnx fp32"]
    assert entry["bytes"] > 100_000 and len(entry["sha256"]["model"]) == 64 and entry["tool_versions"]["onnx"]
    # Pretend the baseline was better, as after a regression.
    entry["metrics"]["cosine"], entry["bytes"] = 1.5, 1000
    baseline_path.write_text(json.dumps(baseline))
    second = run_cli("check", config, "--json", "-o", tmp_path / "out")
    assert second.returncode == 0, second.stderr
    (case,) = json.loads(second.stdout)["cases"]
    assert any(c.startswith("onnx fp32 cosine 1.5 → ") and c.endswith(", budget 0.9999") for c in case["changes"])
    assert any(c.startswith("onnx fp32 bytes 1000 → ") for c in case["changes"])


# --- the gate against deliberately damaged artifacts -------------------------------------------

BUDGETS = """
[models.budgets]
max_accuracy_drop = 0.01
[models.budgets.int8]
cosine = 0.995
sqnr_db = 38.0
"""


@pytest.fixture(scope="module")
def digits_artifacts(tmp_path_factory) -> dict[str, Path]:
    """Healthy artifacts of the digits CNN, by "target precision": onnx fp32, tflite and onnx int8."""
    fp32 = convert_sample(tmp_path_factory, DIGITS, DIGITS_CALIB, DIGITS_EVAL, "fp32", targets=("onnx",))
    int8 = convert_sample(tmp_path_factory, DIGITS, DIGITS_CALIB, DIGITS_EVAL, "int8", targets=("tflite", "onnx"))
    return {f"{r.target} {r.artifact.precision}": Path(r.artifact.path) for res in (fp32, int8) for r in res.artifacts}


def given_config(tmp_path, *artifacts: Path) -> Path:
    """A config checking the given artifacts of the digits CNN against the example config's budgets."""
    listed = ", ".join(f'"{a}"' for a in artifacts)
    return digits_config(tmp_path, f'calibration = "{DIGITS_CALIB}"\nartifacts = [{listed}]', BUDGETS)


def check_json(config, tmp_path, *extra) -> tuple[int, dict, str]:
    proc = run_cli("check", config, "--json", "-o", tmp_path / "out", *extra)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def test_given_healthy_artifacts_pass_and_name_their_layers(digits_artifacts, tmp_path):
    config = given_config(tmp_path, *digits_artifacts.values())
    code, doc, _ = check_json(config, tmp_path, "--attribution", "all")
    assert code == 0 and doc["passed"] == 3, doc
    cases = {f"{c['target']} {c['precision']}": c for c in doc["cases"]}
    assert set(cases) == {"onnx fp32", "tflite int8", "onnx int8"}
    for key in ("tflite int8", "onnx int8"):
        layers = cases[key]["layers"]
        # every conv and linear layer, under the source model's module names, with finite SQNR
        assert {"features.0", "features.2", "classifier.1", "classifier.3"} <= {d["layer"] for d in layers}
        assert all(d["sqnr_db"] > 30 for d in layers if d["layer"].startswith(("features", "classifier")))
        assert [d["loss_db"] for d in layers] == sorted((d["loss_db"] for d in layers), reverse=True)
    assert cases["onnx fp32"]["layers"] == []  # attribution is for int8 artifacts


@pytest.mark.parametrize("artifact, layer", [("tflite int8", "features.2"), ("onnx int8", "features.2"),
                                             ("onnx int8", "classifier.1")])
def test_perturbed_weights_fail_and_attribution_names_the_layer_first(digits_artifacts, tmp_path, artifact, layer):
    healthy = digits_artifacts[artifact]
    damaged = tmp_path / healthy.name
    perturb = damage.perturb_tflite_weights if healthy.suffix == ".tflite" else damage.perturb_onnx_weights
    perturb(healthy, damaged, layer)
    junit, summary = tmp_path / "check.xml", tmp_path / "summary.md"
    code, doc, _ = check_json(given_config(tmp_path, damaged), tmp_path, "--junit", junit, "--markdown", summary)
    (case,) = doc["cases"]
    assert code == 1 and case["status"] == "fail"
    assert any("cosine" in r and "< 0.995" in r for r in case["reasons"]), case["reasons"]
    assert case["layers"][0]["layer"] == layer, case["layers"]
    suite = ET.parse(junit).getroot()
    assert suite.get("failures") == "1" and f"layer 1: {layer} " in suite.find("testcase/failure").text
    text = summary.read_text()
    assert f"Layers of digits {artifact} losing the most" in text and f"| `{layer}` |" in text


def test_swapped_output_channels_break_the_accuracy_budget(digits_artifacts, tmp_path):
    damaged = damage.swap_onnx_output_channels(digits_artifacts["onnx fp32"], tmp_path / "digits_cnn.onnx", 3, 5)
    code, doc, _ = check_json(given_config(tmp_path, damaged), tmp_path)
    (case,) = doc["cases"]
    assert code == 1 and case["precision"] == "fp32"
    assert any(r.startswith("accuracy drop") and "> budget 1.00" in r for r in case["reasons"]), case["reasons"]


def test_a_wrong_input_scale_fails_and_attribution_blames_the_input(digits_artifacts, tmp_path):
    healthy = digits_artifacts["onnx int8"]
    damaged = damage.wrong_onnx_input_scale(healthy, tmp_path / healthy.name, 4.0)
    code, doc, _ = check_json(given_config(tmp_path, damaged), tmp_path)
    (case,) = doc["cases"]
    assert code == 1
    assert any("cosine" in r and "< 0.995" in r for r in case["reasons"]), case["reasons"]
    assert case["layers"][0]["layer"] == "input x", case["layers"]


def test_calibrating_on_random_data_breaks_the_sqnr_budget(tmp_path):
    config = digits_config(tmp_path, 'calibration = "random"\ntargets = ["tflite", "onnx"]\nprecisions = ["int8"]',
                           BUDGETS)
    code, doc, _ = check_json(config, tmp_path, "--attribution", "none")
    assert code == 1 and doc["failed"] == 2, doc
    for case in doc["cases"]:
        assert any(r.startswith("output_0 sqnr_db") and "< 38" in r for r in case["reasons"]), case["reasons"]


def test_layers_command_ranks_a_damaged_artifact_on_demand(digits_artifacts, tmp_path):
    healthy = digits_artifacts["tflite int8"]
    damaged = damage.perturb_tflite_weights(healthy, tmp_path / healthy.name, "classifier.1")
    proc = run_cli("layers", damaged, "--source", DIGITS, "--eval", DIGITS_EVAL, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "edgekit.layers/1" and doc["layers"][0]["layer"] == "classifier.1", doc["layers"][:3]
    text = run_cli("layers", damaged, "--source", DIGITS, "--eval", DIGITS_EVAL, "--top", "2")
    assert text.returncode == 0 and text.stdout.splitlines()[0].startswith("  1. classifier.1 (FULLY_CONNECTED): loses ")
    assert len(text.stdout.splitlines()) == 2


def test_layers_command_measures_what_keeping_each_onnx_layer_float_gains(digits_artifacts, tmp_path):
    healthy = digits_artifacts["onnx int8"]
    damaged = damage.perturb_onnx_weights(healthy, tmp_path / healthy.name, "classifier.1")
    proc = run_cli("layers", damaged, "--source", DIGITS, "--eval", DIGITS_EVAL, "--json")
    assert proc.returncode == 0, proc.stderr
    layers = json.loads(proc.stdout)["layers"]
    first = layers[0]
    # its float copy restores the outputs: the gain is the damage, measured in onnxruntime
    assert first["layer"] == "classifier.1" and first["gain_db"] > 10, layers[:3]
    weighted = [d for d in layers if d["weight_sqnr_db"] is not None]
    assert weighted and all(d["gain_db"] is not None for d in weighted)
    assert all(d["gain_db"] < 1 for d in weighted if d["layer"] != "classifier.1")  # the healthy layers


def test_layers_command_refuses_a_float_artifact(digits_artifacts):
    proc = run_cli("layers", digits_artifacts["onnx fp32"], "--source", DIGITS)
    assert proc.returncode == 2 and "is not an int8 artifact" in proc.stderr and "Traceback" not in proc.stderr


def test_layers_of_a_keras_model_carry_its_layer_names(tmp_path_factory):
    result = convert_sample(tmp_path_factory, KERAS, KERAS_CALIB, KERAS_EVAL, "int8", targets=("tflite",))
    (artifact,) = result.artifacts
    proc = run_cli("layers", artifact.artifact.path, "--source", KERAS, "--eval", KERAS_EVAL, "--json")
    assert proc.returncode == 0, proc.stderr
    names = {d["layer"] for d in json.loads(proc.stdout)["layers"]}
    # the sample's Keras layers (see sample_models/train_digits_keras.py), not TensorFlow op paths
    assert {"conv1", "conv2", "logits"} <= names and not any("/" in n for n in names), names


def test_layers_need_real_inputs(digits_artifacts):
    proc = run_cli("layers", digits_artifacts["tflite int8"], "--source", DIGITS)
    assert proc.returncode == 2 and "needs real inputs" in proc.stderr
