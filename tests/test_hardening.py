"""Bad, damaged and hostile input as a careless user or an attacker gives it: exit 2 naming the file,
nothing written outside --out, nothing left behind by a killed run, and JSON that describes exactly the
files a run placed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from edgekit.core.errors import BadInput
from tests.conftest import DIGITS, DIGITS_CALIB, DIGITS_EVAL, REPO, run_cli


def _config(folder: Path, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "edgekit.toml"
    path.write_text(body)
    return path


def _error(proc: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""


# --- check configs: names are folder names, import specs name the project's own code --------------------


@pytest.mark.parametrize("name", ["../../escaped", "/tmp/edgekit-absolute-name", "a/b", "..", ".hidden"])
def test_a_model_name_cannot_put_artifacts_outside_out(tmp_path, name):
    config = _config(tmp_path / "project", f'[[models]]\nname = {json.dumps(name)}\npath = "{DIGITS}"\n'
                                           'targets = ["onnx"]\n')
    proc = run_cli("check", config, "--out", tmp_path / "out", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "is not a plain name" in _error(proc)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["project"]  # not even --out was made
    assert not Path("/tmp/edgekit-absolute-name").exists()


def test_two_models_with_one_name_are_refused(tmp_path):
    from edgekit.features.check import load_config

    body = f'[[models]]\nname = "m"\npath = "{DIGITS}"\ntargets = ["onnx"]\n' * 2
    with pytest.raises(BadInput, match="more than one model is named 'm'"):
        load_config(_config(tmp_path, body))


@pytest.mark.parametrize("key,spec", [("path", "sys:exit"), ("path", "os:abort"), ("calibration", "os:abort"),
                                      ("calibration", "tests.calib_fns:digit_tuples")])
def test_a_config_import_spec_outside_its_project_is_refused(tmp_path, key, spec):
    """`sys:exit` once ended the run with exit 0 and no JUnit file; `os:abort` killed the CLI. A module of
    edgekit's own test suite is outside this config's folder too."""
    model = f'path = "{DIGITS}"\n' if key != "path" else f'path = "{spec}"\ninput_shape = ["x=1,1,8,8"]\n'
    calib = f'calibration = "{spec}"\n' if key == "calibration" else ""
    config = _config(tmp_path / "project", f'[[models]]\nname = "m"\n{model}{calib}targets = ["onnx"]\n'
                                           f'precisions = ["{"int8" if calib else "fp32"}"]\n')
    junit = tmp_path / "junit.xml"
    proc = run_cli("check", config, "--out", tmp_path / "out", "--junit", junit, cwd=REPO)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "names a module outside the project folder" in _error(proc)
    assert not (tmp_path / "out").exists() and not junit.exists()


def test_import_specs_resolve_inside_the_project_only(tmp_path):
    from edgekit.core.user_code import import_spec

    (tmp_path / "mycalib.py").write_text("def samples():\n    return [1, 2, 3]\n")
    assert import_spec("mycalib:samples", "calibration function", tmp_path)() == [1, 2, 3]
    for spec in ("json:loads", "numpy:zeros", "subprocess:run"):
        with pytest.raises(BadInput, match="outside the project folder"):
            import_spec(spec, "calibration function", tmp_path)


# --- damaged inputs: exit 2 with the file named, the same from check and report -----------------------


def _damaged_npz(path: Path, how: str) -> Path:
    with np.load(DIGITS_CALIB) as data:
        np.savez_compressed(path, **{k: data[k] for k in data.files})
    raw = bytearray(path.read_bytes())
    if how == "inflate":  # the compressed stream of the first member: zlib.error
        raw[200:260] = bytes(b ^ 0x5A for b in raw[200:260])
    else:  # the central directory: BadZipFile
        raw[-30:-10] = bytes(20)
    path.write_bytes(raw)
    return path


@pytest.mark.parametrize("option", ["--calib", "--eval"])
@pytest.mark.parametrize("how,error", [("inflate", "zlib.error"), ("directory", "zipfile.BadZipFile")])
def test_a_damaged_compressed_npz_exits_2_naming_it(tmp_path, option, how, error):
    bad = _damaged_npz(tmp_path / "data.npz", how)
    extra = ["--int8"] if option == "--calib" else []
    proc = run_cli("convert", DIGITS, "-t", "onnx", *extra, option, bad, "--out", tmp_path / "out")
    assert proc.returncode == 2, proc.stderr
    line = _error(proc)
    assert str(bad) in line and error in line
    assert not (tmp_path / "out").exists()


def _flip(src: Path, dst: Path, how: str) -> Path:
    raw = bytearray(src.read_bytes())
    if how == "truncate":
        raw = raw[: len(raw) // 3]
    else:
        rng = np.random.default_rng(1)
        for i in rng.integers(16, min(len(raw), 4000), 200):
            raw[i] ^= 0xFF
    dst.write_bytes(raw)
    return dst


@pytest.mark.slow
@pytest.mark.parametrize("ext,how", [(".tflite", "flip"), (".ort", "truncate"), (".ptl", "flip"), (".pte", "truncate")])
def test_a_damaged_artifact_exits_2_from_report_and_from_check(converted_digits, tmp_path, ext, how):
    _, out = converted_digits
    bad = _flip(out / f"digits_cnn{ext}", tmp_path / f"damaged{ext}", how)
    report = run_cli("report", bad, "--json")
    assert report.returncode == 2, report.stderr
    assert str(bad) in _error(report) and report.stdout == ""
    config = _config(tmp_path, f'[[models]]\nname = "m"\npath = "{DIGITS}"\neval = "{DIGITS_EVAL}"\n'
                               f'artifacts = ["{bad}"]\n')
    check = run_cli("check", config, "--out", tmp_path / "out")
    assert check.returncode == 2, check.stderr
    assert _error(check) == _error(report)


def test_a_config_that_is_not_utf8_exits_2(tmp_path):
    config = tmp_path / "edgekit.toml"
    config.write_bytes(b'[[models]]\nname = "\xff\xfe"\npath = "m.pt2"\n')
    proc = run_cli("check", config, "--out", tmp_path / "out")
    assert proc.returncode == 2
    assert str(config) in _error(proc) and "UnicodeDecodeError" in _error(proc)


@pytest.mark.parametrize("command", ["convert", "report"])
def test_an_over_long_path_exits_2(tmp_path, command):
    long = tmp_path / ("a" * 300 + ".pt2")
    proc = run_cli(command, long)
    assert proc.returncode == 2, proc.stderr
    assert "the path is too long" in _error(proc)


def test_a_damaged_io_sidecar_is_named(converted_digits, tmp_path):
    from edgekit.core import io_params

    _, out = converted_digits
    artifact = tmp_path / "digits_cnn.onnx"
    for f in ("digits_cnn.onnx", "digits_cnn.onnx.data"):
        shutil.copy(out / f, tmp_path / f)
    io_params.sidecar(artifact).write_text('{"inputs": [{"scale": "x"}], "outputs": []}')
    with pytest.raises(BadInput, match=r"digits_cnn.onnx.io.json is not an integer-I/O sidecar"):
        io_params.read(artifact)
    io_params.sidecar(artifact).write_bytes(b"\xff{")
    with pytest.raises(BadInput, match=r"cannot read an integer-I/O sidecar .*digits_cnn.onnx.io.json"):
        io_params.read(artifact)


# --- what report reads and prints ------------------------------------------------------------------------


def test_report_refuses_external_data_outside_the_models_folder(tmp_path):
    import onnx

    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"\0" * 64)
    folder = tmp_path / "models"
    folder.mkdir()
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])
    w = onnx.TensorProto(name="w", data_type=onnx.TensorProto.FLOAT, dims=[1, 4],
                         data_location=onnx.TensorProto.EXTERNAL)
    for key, value in (("location", "../secret.bin"), ("offset", "0"), ("length", "16")):
        w.external_data.add(key=key, value=value)
    graph = onnx.helper.make_graph([onnx.helper.make_node("Add", ["x", "w"], ["y"])], "g", [x], [y], [w])
    onnx.save(onnx.helper.make_model(graph), folder / "m.onnx")
    proc = run_cli("report", folder / "m.onnx", "--json")
    assert proc.returncode == 2
    assert "names external data outside its folder ('../secret.bin'" in _error(proc)
    assert "secret.bin" not in proc.stdout


@pytest.mark.slow
def test_report_prints_nothing_but_the_report(converted_digits):
    _, out = converted_digits
    proc = run_cli("report", out, "--json")
    assert proc.returncode == 0
    assert proc.stderr == ""  # no torchao or pytree chatter
    assert {a["format"] for a in json.loads(proc.stdout)["artifacts"]} == {"tflite", "pte", "ptl", "onnx", "ort"}


# --- output paths ---------------------------------------------------------------------------------------


def test_output_files_are_checked_before_the_run(tmp_path):
    (tmp_path / "a-file").write_text("")
    config = _config(tmp_path, f'[[models]]\nname = "m"\npath = "{DIGITS}"\ntargets = ["onnx"]\n')
    for option in ("--junit", "--markdown"):
        proc = run_cli("check", config, "--out", tmp_path / "out", option, tmp_path / "a-file" / "x.txt")
        assert proc.returncode == 2, proc.stderr
        assert f"{option} {tmp_path / 'a-file' / 'x.txt'}: cannot create the folder" in _error(proc)
        assert not (tmp_path / "out").exists()  # refused before any work
    proc = run_cli("report", DIGITS_EVAL, "--html", tmp_path / "a-file" / "r.html")
    assert proc.returncode == 2 and "--html" in _error(proc)


def _unshare_works() -> bool:
    if not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode == 0


def _in_tmpfs(mount: Path, options: str, *args) -> subprocess.CompletedProcess:
    """Run edgekit with a fresh tmpfs (`options`, e.g. size=100k or ro) mounted at `mount`, in a private
    user and mount namespace: a full disk or a read-only folder without touching the machine's."""
    mount.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["unshare", "-rm", "sh", "-c", f'mount -t tmpfs -o {options} tmpfs "$0" && exec "$@"',
                           str(mount), sys.executable, "-m", "edgekit", *map(str, args)],
                          cwd=REPO, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)


@pytest.mark.skipif(not _unshare_works(), reason="needs unprivileged user namespaces (unshare -rm) to mount a tmpfs")
def test_a_full_disk_and_a_read_only_out_exit_2_with_the_fix(tmp_path):
    full = _in_tmpfs(tmp_path / "full", "size=100k", "convert", DIGITS, "-t", "onnx", "--out", tmp_path / "full" / "o")
    assert full.returncode == 2, full.stderr
    assert "no space left on the device" in _error(full) and "give --out on another disk" in _error(full)
    ro = _in_tmpfs(tmp_path / "ro", "ro", "convert", DIGITS, "-t", "onnx", "--out", tmp_path / "ro")
    assert ro.returncode == 2, ro.stderr
    assert f"--out {tmp_path / 'ro'}: cannot write into" in _error(ro)
    assert "loading" not in ro.stderr  # refused before the model was opened


# --- placing artifacts --------------------------------------------------------------------------------------


def _onnx_with_external_data(path: Path) -> None:
    import onnx
    from onnx import numpy_helper

    w = numpy_helper.from_array(np.ones((64, 64), np.float32), "w")
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 64])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 64])
    graph = onnx.helper.make_graph([onnx.helper.make_node("MatMul", ["x", "w"], ["y"])], "g", [x], [y], [w])
    onnx.save(onnx.helper.make_model(graph), path, save_as_external_data=True, location=path.name + ".data",
              size_threshold=0)


def test_placing_removes_side_files_an_earlier_artifact_left(tmp_path):
    """An earlier run's m.onnx.data and m.onnx.io.json do not belong to a new one-file m.onnx."""
    import onnx

    from edgekit.core import io_params
    from edgekit.core.artifact import ModelArtifact
    from edgekit.engine.build import place
    from edgekit.core.signature import Signature

    out, work, staging = tmp_path / "out", tmp_path / "work", tmp_path / "out" / ".staging"
    out.mkdir()
    work.mkdir()
    staging.mkdir()
    _onnx_with_external_data(out / "m.onnx")
    io_params.write(out / "m.onnx", [None], [None])
    (out / "other.onnx.io.json").write_text("{}")  # another artifact's: stays
    model = onnx.load(out / "m.onnx")
    onnx.save(model, work / "m.onnx")  # all in one file now
    placed = place(ModelArtifact("onnx", str(work / "m.onnx"), Signature(())), out, staging)
    assert placed.files == (str(out / "m.onnx"),)
    assert sorted(p.name for p in out.iterdir()) == [".staging", "m.onnx", "other.onnx.io.json"]
    assert list(staging.iterdir()) == []
    assert (out / "m.onnx").read_bytes() == (work / "m.onnx").read_bytes()  # the built file stays for other routes


@pytest.mark.slow
def test_a_stale_io_sidecar_does_not_fail_a_healthy_artifact(tmp_path):
    """--int8-io once left <model>.io.json behind; the next plain int8 run in that folder then failed `check`."""
    out = tmp_path / "out"
    common = ("convert", DIGITS, "-t", "onnx", "--int8", "--calib", DIGITS_CALIB, "--eval", DIGITS_EVAL, "--out", out)
    assert run_cli(*common, "--int8-io").returncode == 0
    assert (out / "digits_cnn.int8.onnx.io.json").is_file()
    proc = run_cli(*common, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["artifacts"][0]["files"] == [str(out / "digits_cnn.int8.onnx")]
    assert not (out / "digits_cnn.int8.onnx.io.json").exists()
    config = _config(tmp_path, f'[[models]]\nname = "m"\npath = "{DIGITS}"\neval = "{DIGITS_EVAL}"\n'
                               f'artifacts = ["{out / "digits_cnn.int8.onnx"}"]\n')
    check = run_cli("check", config, "--out", tmp_path / "check")
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.slow
def test_the_json_describes_the_files_this_run_placed(tmp_path):
    """A second run that places its own digits_cnn.onnx while the first is still converting another target
    does not change what the first reports."""
    from edgekit.core.artifact import sha256_files
    from edgekit.engine.request import build_request
    from edgekit.engine.pipeline import convert

    out = tmp_path / "out"
    other = tmp_path / "digits_cnn.pt2"
    shutil.copy(REPO / "sample_models" / "digits_mobilenet.pt2", other)  # another model, the same file names
    second = {}

    def progress(message: str) -> None:
        if message.startswith("ptl: converting") and not second:
            second["result"] = convert(build_request(str(other), ("onnx",), str(out)))

    first = convert(build_request(str(DIGITS), ("onnx", "ptl"), str(out)), progress)
    mine, theirs = first.to_json()["artifacts"][0], second["result"].to_json()["artifacts"][0]
    assert mine["path"] == theirs["path"] == str(out / "digits_cnn.onnx")
    assert mine["sha256"] != theirs["sha256"]
    assert theirs["sha256"] == sha256_files(theirs["files"])  # what is on disk now is the second run's
    reference = convert(build_request(str(DIGITS), ("onnx",), str(tmp_path / "alone"))).to_json()["artifacts"][0]
    assert (mine["sha256"], mine["bytes"]) == (reference["sha256"], reference["bytes"])


# --- killed runs ---------------------------------------------------------------------------------------


def test_a_later_run_removes_the_temporary_folders_of_dead_processes(tmp_path):
    from edgekit.core.quiet import private_dir

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".edgekit-tmp-{dead.stdout.strip()}-abc"
    live = tmp_path / f".edgekit-tmp-{os.getppid()}-abc"
    for d in (stale, live):
        d.mkdir()
        (d / "model.tflite").write_bytes(b"unverified")
    mine = Path(private_dir(tmp_path, ".edgekit-tmp-"))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, mine.name])
    assert mine.name.startswith(f".edgekit-tmp-{os.getpid()}-")


def _children(pid: int, module: str) -> list[int]:
    """Processes whose parent is `pid` and whose command line runs `module`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(stat.rpartition(")")[2].split()[1]) == pid and module in cmdline:
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def _start_and_wait_for_worker(tmp_path: Path) -> tuple[subprocess.Popen, int]:
    """A conversion caught mid-run: its runtime worker started (that happens before the source is opened) and
    its private folder made inside --out."""
    cli = subprocess.Popen([sys.executable, "-m", "edgekit", "convert", DIGITS, "-t", "ptl", "--eval", DIGITS_EVAL,
                            "--out", tmp_path / "out"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env={**os.environ, "TMPDIR": str(tmp_path / "tmp")})
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and cli.poll() is None:
        workers = _children(cli.pid, "edgekit.targets.worker")
        if workers and any((tmp_path / "out").glob(f".edgekit-tmp-{cli.pid}-*")):
            return cli, workers[0]
        time.sleep(0.02)
    cli.kill()
    pytest.fail(f"no runtime worker started: {cli.communicate()[1]}")


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc to find the worker")
def test_sigterm_ends_a_run_like_ctrl_c_and_sigkill_leaves_nothing_a_later_run_keeps(tmp_path):
    (tmp_path / "tmp").mkdir()
    cli, worker = _start_and_wait_for_worker(tmp_path)
    cli.send_signal(signal.SIGTERM)
    _, err = cli.communicate(timeout=120)
    assert cli.returncode == 130, err
    assert "interrupted; no partial output was left" in err
    assert not (tmp_path / "out").exists()  # it created the folder, wrote nothing to keep: removed
    assert not _alive(worker)

    cli, worker = _start_and_wait_for_worker(tmp_path)
    cli.kill()
    cli.communicate()
    deadline = time.monotonic() + 10
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(worker), "the runtime worker outlived the killed CLI"
    left = [p.name for p in (tmp_path / "out").iterdir()]
    assert left and all(n.startswith(f".edgekit-tmp-{cli.pid}-") for n in left)
    in_tmp = list((tmp_path / "tmp").iterdir())  # at most the command's own private folder (torch's caches in it)
    assert all(p.name.startswith(f"edgekit-{cli.pid}-") for p in in_tmp), in_tmp

    again = subprocess.run([sys.executable, "-m", "edgekit", "convert", DIGITS, "-t", "onnx", "--out", tmp_path / "out"],
                           cwd=REPO, capture_output=True, text=True, timeout=600,
                           env={**os.environ, "TMPDIR": str(tmp_path / "tmp")})
    assert again.returncode == 0, again.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["digits_cnn.onnx", "digits_cnn.onnx.data"]
    assert list((tmp_path / "tmp").iterdir()) == []  # the killed run's folders are gone


# --- damaged models the libraries choke on ------------------------------------------------------------------


@pytest.mark.slow
def test_an_hdf5_file_whose_reading_never_ends_exits_2(tmp_path):
    """A fuzzed Keras .h5 (a chunk of its own bytes inserted at the start) on which the HDF5 library spins
    forever inside one attribute read, deaf to Ctrl-C and SIGTERM; it is read in a child process first."""
    from edgekit.sources.tf_source import HDF5_PROBE_SECONDS

    started = time.monotonic()
    proc = run_cli("convert", REPO / "tests" / "data" / "hdf5_read_spins.h5", "-t", "tflite", "--out", tmp_path / "o",
                   timeout=HDF5_PROBE_SECONDS + 120)
    assert proc.returncode == 2, proc.stderr
    assert f"reading its HDF5 content did not finish in {HDF5_PROBE_SECONDS} s" in _error(proc)
    assert time.monotonic() - started < HDF5_PROBE_SECONDS + 60
    assert not (tmp_path / "o").exists()


def test_an_onnx_model_onnxruntime_refuses_exits_2(converted_digits, tmp_path):
    """It passes the ONNX checker (an attribute's value is not checked) but onnxruntime cannot make a session."""
    import onnx

    _, out = converted_digits
    model = onnx.load(out / "digits_cnn.onnx")
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    auto_pad = next((a for a in conv.attribute if a.name == "auto_pad"), None)
    if auto_pad is None:
        auto_pad = onnx.helper.make_attribute("auto_pad", "NOTSET")
        conv.attribute.append(auto_pad)
    auto_pad.s = b"\xc1OTSET"
    onnx.save(model, tmp_path / "bad.onnx")
    proc = run_cli("convert", tmp_path / "bad.onnx", "-t", "ort", "--out", tmp_path / "o")
    assert proc.returncode == 2, proc.stderr
    assert f"{tmp_path / 'bad.onnx'} does not run in onnxruntime" in _error(proc)
    # given to `check` as an artifact: it reads, but its runtime cannot run it; nothing was converted, so exit 2
    config = _config(tmp_path, f'[[models]]\nname = "m"\npath = "{DIGITS}"\neval = "{DIGITS_EVAL}"\n'
                               f'artifacts = ["{tmp_path / "bad.onnx"}"]\n')
    check = run_cli("check", config, "--out", tmp_path / "check")
    assert check.returncode == 2, check.stderr
    assert _error(check).startswith(f"edgekit: error: {tmp_path / 'bad.onnx'}: ONNX Runtime (CPU) failed running")
    assert "the file is damaged or not a valid artifact" in _error(check)
