"""`edgekit report`: sizes of real artifacts, their side files, ratios, breakdowns, and every output format."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import DIGITS, DIGITS_CALIB, run_cli

pytestmark = pytest.mark.slow

EXTENSIONS = {".tflite", ".pte", ".ptl", ".onnx", ".ort"}


PRECISIONS = ("fp32", "fp16", "int8", "int8-dynamic")
# What the digits CNN converts to: every target at every precision it reaches (18 artifacts).
EXPECTED = {f"digits_cnn{'' if p == 'fp32' else '.' + p}{ext}": (fmt, p)
            for fmt, ext, precisions in (("tflite", ".tflite", PRECISIONS), ("pte", ".pte", PRECISIONS),
                                         ("ptl", ".ptl", ("fp32", "int8")), ("onnx", ".onnx", PRECISIONS),
                                         ("ort", ".ort", PRECISIONS))
            for p in precisions}


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    """The digits CNN on every target at every precision it reaches — one folder."""
    from edgekit.calibration.sources import CalibrationSpec
    from edgekit.engine.request import build_request
    from edgekit.engine.pipeline import convert

    out = tmp_path_factory.mktemp("report")
    for precision in PRECISIONS:
        convert(build_request(str(DIGITS), ("all",), str(out), precision=precision,
                               calibration=CalibrationSpec(str(DIGITS_CALIB)) if precision == "int8" else None))
    return out


@pytest.fixture(scope="module")
def report(artifacts):
    from edgekit.features.report import build_report

    return build_report([artifacts])


def _by_name(report):
    return {Path(a.path).name: a for a in report.artifacts}


def test_every_artifact_listed_with_the_bytes_of_all_its_files(artifacts, report):
    on_disk = {p.name for p in artifacts.iterdir() if p.suffix in EXTENSIONS}
    assert set(_by_name(report)) == on_disk
    assert on_disk == set(EXPECTED)
    for a in report.artifacts:
        assert a.bytes == sum(Path(f).stat().st_size for f, _ in a.files)
        assert a.files[0][0] == a.path
    arts = _by_name(report)
    assert [Path(f).name for f, _ in arts["digits_cnn.onnx"].files] == ["digits_cnn.onnx", "digits_cnn.onnx.data"]
    assert [Path(f).name for f, _ in arts["digits_cnn.ort"].files] == ["digits_cnn.ort",
                                                                       "digits_cnn.required_operators.config"]
    # every file in the folder belongs to exactly one artifact: nothing missed, nothing counted twice
    counted = [Path(f).name for a in report.artifacts for f, _ in a.files]
    assert sorted(counted) == sorted(p.name for p in artifacts.iterdir())
    assert report.total_bytes == sum(p.stat().st_size for p in artifacts.iterdir())


def test_formats_precisions_and_ratios(report):
    arts = _by_name(report)
    assert {n: (a.format, a.precision) for n, a in arts.items()} == EXPECTED
    # the name and the weights agree (int8-dynamic weights look int8)
    assert all(a.inspected_precision == a.precision.removesuffix("-dynamic") for a in arts.values())
    for name, fp32 in (("digits_cnn.int8.tflite", "digits_cnn.tflite"), ("digits_cnn.int8.onnx", "digits_cnn.onnx")):
        a = arts[name]
        assert Path(a.fp32_path).name == fp32 and a.fp32_bytes == arts[fp32].bytes
        assert a.ratio_to_fp32 < 0.45
    assert 0.45 < arts["digits_cnn.fp16.onnx"].ratio_to_fp32 < 0.7
    fp32_of = {fmt: name for name, (fmt, p) in EXPECTED.items() if p == "fp32"}
    for name, (fmt, precision) in EXPECTED.items():  # every smaller precision is linked to its fp32 twin
        if precision != "fp32":
            assert Path(arts[name].fp32_path).name == fp32_of[fmt] and arts[name].ratio_to_fp32 < 0.7, name
    assert arts["digits_cnn.tflite"].ratio_to_fp32 is None  # no ratio of an fp32 artifact to itself
    for a in report.artifacts:
        assert a.ratio_to_lower_bound >= 1, a.path
        assert a.lower_bound_bytes == a.parameters * {"fp32": 4, "fp16": 2, "int8": 1, "int8-dynamic": 1}[a.precision]
        assert 38_000 < a.parameters < 39_000  # the digits CNN has 38,282 weights and biases


def test_breakdowns_by_dtype_op_and_tensor(report):
    for a in report.artifacts:
        assert sum(a.weight_bytes_by_dtype.values()) == a.weight_bytes > 0
        assert a.weight_bytes <= a.bytes
        assert a.op_counts and all(n > 0 for n in a.op_counts.values())
        assert a.largest_tensors[0]["bytes"] == max(t["bytes"] for t in a.largest_tensors)
        assert tuple(a.largest_tensors[0]["shape"]) in ((64, 512), (512, 64))  # the first Linear layer (or transposed)
    arts = _by_name(report)
    assert max(arts["digits_cnn.int8.tflite"].weight_bytes_by_dtype, key=arts["digits_cnn.int8.tflite"].weight_bytes_by_dtype.get) == "int8"
    # a quantized file's int8 shares as its runtime runs it, in the report too
    for name in ("digits_cnn.int8.tflite", "digits_cnn.int8.pte", "digits_cnn.int8.onnx"):
        ran = arts[name].executed
        assert ran["int8_heavy_op_share"] == 1.0 and ran["runtime"], (name, ran)
        assert any(n.startswith("as it runs: 100.0% int8 of") for n in arts[name].notes), arts[name].notes
    assert arts["digits_cnn.tflite"].executed is None
    assert "float16" in arts["digits_cnn.fp16.onnx"].weight_bytes_by_dtype
    assert any("CONV" in op for op in arts["digits_cnn.tflite"].op_counts)


def test_precision_inferred_from_the_weights_when_the_name_has_none(artifacts, tmp_path):
    from edgekit.features.report import build_report

    renamed = tmp_path / "mystery.tflite"
    shutil.copy(artifacts / "digits_cnn.int8.tflite", renamed)
    (a,) = build_report([renamed]).artifacts
    assert (a.precision, a.precision_source, a.fp32_path) == ("int8", "inspection", None)
    assert a.bytes == renamed.stat().st_size


def test_fp32_partner_found_beside_a_single_artifact(artifacts):
    from edgekit.features.report import build_report

    (a,) = build_report([artifacts / "digits_cnn.int8.onnx"]).artifacts
    assert Path(a.fp32_path).name == "digits_cnn.onnx"
    assert a.fp32_bytes == (artifacts / "digits_cnn.onnx").stat().st_size + (artifacts / "digits_cnn.onnx.data").stat().st_size


def test_cli_json_and_html(artifacts, tmp_path, report):
    page = tmp_path / "sizes.html"
    proc = run_cli("report", artifacts, "--json", "--html", page)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)  # stdout is one JSON document
    assert doc["schema"] == "edgekit.report/1"
    listed = {Path(a["path"]).name: a for a in doc["artifacts"]}
    assert set(listed) == set(_by_name(report))
    for a in doc["artifacts"]:
        assert a["bytes"] == sum(f["bytes"] for f in a["files"]) == sum(Path(f["path"]).stat().st_size for f in a["files"])
        assert sum(a["weight_bytes_by_dtype"].values()) == a["weight_bytes"]
        assert a["ratio_to_lower_bound"] >= 1
    assert listed["digits_cnn.int8.tflite"]["ratio_to_fp32"] < 0.45
    assert doc["total_bytes"] == sum(a["bytes"] for a in doc["artifacts"])

    text = page.read_text(encoding="utf-8")
    assert text.lstrip().startswith("<!DOCTYPE html>")
    svg = re.search(r"<svg\b.*?</svg>", text, re.S)
    assert svg is not None
    assert len(re.findall(r"<rect\b", svg.group(0))) == len(doc["artifacts"])
    assert not re.search(r"https?://", text)
    assert "<script" not in text.lower() and "<link" not in text.lower()
    for name in listed:
        assert name in text


def test_cli_markdown_and_table(artifacts, report):
    proc = run_cli("report", artifacts, "--markdown")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| artifact"))
    assert set(lines[header + 1]) <= set("|-: ")
    rows = []
    for line in lines[header + 2:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    assert len(rows) == len(report.artifacts)
    assert sorted(re.search(r"`([^`]+)`", r).group(1) for r in rows) == sorted(a.path for a in report.artifacts)

    table = run_cli("report", artifacts / "digits_cnn.int8.tflite", artifacts / "digits_cnn.tflite")
    assert table.returncode == 0, table.stderr
    assert "digits_cnn.int8.tflite" in table.stdout and "edgekit size report" in table.stdout
    assert re.search(r"\b0\.[0-4]\d×", table.stdout)  # the int8 file's ratio to its fp32 twin


def test_cli_refuses_a_source_model_and_a_missing_path(tmp_path):
    proc = run_cli("report", DIGITS)
    assert proc.returncode == 2 and "not an edge artifact" in proc.stderr and "Traceback" not in proc.stderr
    missing = run_cli("report", tmp_path / "nope")
    assert missing.returncode == 2 and "not found" in missing.stderr
    both = run_cli("report", tmp_path, "--json", "--markdown")
    assert both.returncode == 2


CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--force-device-scale-factor=1")


def _screenshot(page: Path, png: Path, size: tuple[int, int], timeout: float = 60) -> None:
    """Headless Chromium (Debian's package, `make browser`) renders `page` into `png`, `size` CSS px."""
    import os
    import signal
    import subprocess
    import tempfile

    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("chromium is not installed: run `make browser` (`make test` does it) to install Debian's "
                    "chromium for the HTML report's screenshot test")
    with tempfile.TemporaryDirectory(prefix="edgekit-chromium-") as profile:
        cmd = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--screenshot={png}",
               f"--window-size={size[0]},{size[1]}", page.resolve().as_uri()]
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # chromium's helper processes too
            out, _ = proc.communicate()
            pytest.fail(f"chromium took over {timeout:g} s to screenshot {page}:\n{out[-3000:]}")
    assert proc.returncode == 0 and png.is_file(), f"chromium failed ({proc.returncode}):\n{out[-3000:]}"


def _bars(rgb, colors: dict[str, tuple[int, int, int]], min_run: int = 20) -> list[dict]:
    """The bars in a screenshot (an H×W×3 int16 array), top to bottom: blocks of consecutive rows that hold a horizontal run of at
    least `min_run` pixels of one bar colour (the legend's 10 px swatches are too small to count)."""
    import numpy as np

    rows = []  # (y, precision, left, right) of each row crossing a bar
    for prec, ref in colors.items():
        mask = (np.abs(rgb - np.array(ref, dtype=np.int16)) <= 2).all(axis=2)
        for y in np.flatnonzero(mask.sum(axis=1) >= min_run):
            xs = np.flatnonzero(mask[y])
            breaks = np.flatnonzero(np.diff(xs) != 1)
            starts, ends = np.r_[0, breaks + 1], np.r_[breaks, len(xs) - 1]
            if (ends - starts + 1).max() >= min_run:
                rows.append((int(y), prec, int(xs[0]), int(xs[-1])))
    bars: list[dict] = []
    for y, prec, left, right in sorted(rows):
        bar = bars[-1] if bars else None
        if bar and bar["precision"] == prec and bar["bottom"] == y - 1:  # the same bar, one row down
            bar.update(bottom=y, left=min(bar["left"], left), right=max(bar["right"], right))
        else:
            bars.append({"precision": prec, "top": y, "bottom": y, "left": left, "right": right})
    for bar in bars:
        bar["width"], bar["height"] = bar["right"] - bar["left"] + 1, bar["bottom"] - bar["top"] + 1
    return bars


def test_html_page_renders_its_chart_in_a_browser(artifacts, tmp_path, report):
    """The page from `edgekit report --html`, as Chromium draws it: one bar per artifact, in order, in the
    colour of its precision, as long as its size says, above the summary table."""
    from edgekit.features.report.render import _COLORS

    page, png, size = tmp_path / "sizes.html", tmp_path / "sizes.png", (1280, 1000)
    proc = run_cli("report", artifacts, "--html", page)
    assert proc.returncode == 0, proc.stderr
    _screenshot(page, png, size)

    import numpy as np
    from PIL import Image

    with Image.open(png) as im:
        assert im.format == "PNG" and im.size == size
        rgb = np.asarray(im.convert("RGB"), dtype=np.int16)
    colors = {p: tuple(int(c[i:i + 2], 16) for i in (1, 3, 5)) for p, c in _COLORS.items()}
    bars = _bars(rgb, colors)
    # one bar per artifact, top to bottom in the report's order, each in the colour of its precision
    assert [b["precision"] for b in bars] == [a.precision for a in report.artifacts], bars
    assert len({b["left"] for b in bars}) == 1, bars  # all start at the chart's axis
    assert all(18 <= b["height"] <= 22 for b in bars), bars  # row_h - 6 = 20 px each, none merged or cut
    assert all(b2["top"] - b1["top"] >= 24 for b1, b2 in zip(bars, bars[1:])), bars  # separate rows
    biggest = max(a.bytes for a in report.artifacts)
    longest = max(b["width"] for b in bars)
    assert 415 <= longest <= 425, bars  # the chart's 420 px bar area, drawn at scale 1
    for b, a in zip(bars, report.artifacts):
        assert abs(b["width"] - a.bytes / biggest * 420) <= 3, (a.path, b, bars)  # as long as its size says
    assert sum(b["width"] * b["height"] for b in bars) > len(bars) * 100 * 18  # plenty of bar-coloured pixels
    # the summary table's header row (its #f3f3f3 background) is drawn below the chart
    header = (np.abs(rgb - np.array((0xF3, 0xF3, 0xF3), dtype=np.int16)) <= 1).all(axis=2)
    header_rows = np.flatnonzero(header.sum(axis=1) >= 600)
    assert header_rows.size >= 20 and header_rows[0] > bars[-1]["bottom"], header_rows[:5]
