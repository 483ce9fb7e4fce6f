"""Every option of a conversion reaches every front door — the command line, the Python API, a check config —
or the schema (edgekit.core.option_schema) says why not; and no door has an option the schema does not declare."""

from __future__ import annotations

import inspect
import pytest

import edgekit
from edgekit.core.errors import BadInput
from edgekit.core.option_schema import CONVERT_OPTIONS, config_keys
from tests.conftest import DIGITS, DIGITS_CALIB, run_cli


def _cli_flags() -> dict[str, str]:
    """`edgekit convert`'s options: first flag (or the argument's name in capitals) → parameter name."""
    import typer.main

    from edgekit.cli.app import app

    command = typer.main.get_command(app).commands["convert"]
    return {(p.opts[0] if p.opts[0].startswith("-") else p.name.upper()): p.name for p in command.params}


def _api_keywords() -> set[str]:
    return {n for n, p in inspect.signature(edgekit.convert).parameters.items() if p.kind is not p.VAR_KEYWORD}


def _model_keys() -> set[str]:
    from edgekit.features.check.config import MODEL_KEYS

    return set(MODEL_KEYS) - {"name", "artifacts"}


@pytest.mark.parametrize("option", CONVERT_OPTIONS, ids=lambda o: o.name)
def test_every_option_reaches_every_door_or_says_why_not(option):
    doors = {"cli": option.flag in _cli_flags(), "api": option.name in _api_keywords(),
             "config": option.key is not None and option.key.partition(".")[0] in _model_keys()}
    for door, there in doors.items():
        assert there != (door in option.why_not), (option.name, door, option.why_not.get(door))


def test_no_door_has_an_option_the_schema_does_not_declare():
    assert set(_cli_flags()) == {o.flag for o in CONVERT_OPTIONS if "cli" not in o.why_not}
    assert _api_keywords() == {o.name for o in CONVERT_OPTIONS if "api" not in o.why_not}
    assert _model_keys() == config_keys()


def test_a_config_key_of_the_wrong_type_is_named(tmp_path):
    from edgekit.features.check.config import load_config

    (tmp_path / "edgekit.toml").write_text('[[models]]\npath = "m.onnx"\ntargets = ["onnx"]\ngroup_size = "64"\n')
    with pytest.raises(BadInput) as refused:
        load_config(tmp_path / "edgekit.toml")
    assert refused.value.message.endswith("models[0] (m.onnx).group_size: '64' is not int"), refused.value.message
    assert refused.value.fix == "write group_size = 64"


@pytest.mark.slow
def test_options_once_only_on_the_command_line_reach_a_check_and_the_api(tmp_path):
    """`calib_samples` from a check config (16: 3 held out to verify on, 13 to calibrate), `optimize` from the API."""
    config = tmp_path / "edgekit.toml"
    config.write_text(f'[[models]]\nname = "digits"\npath = "{DIGITS}"\ntargets = ["onnx"]\nprecisions = ["int8"]\n'
                      f'calibration = "{DIGITS_CALIB}"\ncalib_samples = 16\n')
    proc = run_cli("check", config, "--out", tmp_path / "check", "--no-cache")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "cosine" in proc.stderr and "on 13 calibration samples" in proc.stderr, proc.stderr

    result = edgekit.convert(DIGITS, "onnx", out=tmp_path / "api", int8=True, calibration=DIGITS_CALIB,
                             calib_samples=16, optimize="size")
    [artifact] = result.artifacts
    assert artifact.artifact.meta.quantization.optimize == "size"
    assert result.to_json()["artifacts"][0]["quantization"]["optimize"] == "size"
