"""onnx → ort: ONNX Runtime's mobile format, with its required-operators config beside it.

The conversion is onnxruntime's own tool (`onnxruntime.tools.convert_onnx_models_to_ort`), run
in-process with:

- the **Fixed** optimization style: the graph is optimized once, now, and saved as ONNX Runtime
  will run it (QDQ groups fused into QLinearConv/QGemm, Conv+Relu into FusedConv). A minimal or
  mobile build then runs the file as is. The Runtime style only pays off with NNAPI/CoreML, whose
  partitioning is unknown at conversion time, and needs a session option to replay its
  optimizations; the checker's NNAPI/CoreML verdict is recorded so a user can tell when to prefer it.
- `target_platform="arm"`: the file is for phones, so ONNX Runtime keeps int8 QDQ groups signed
  (`session.qdqisint8allowed=1`) and leaves out the x86-only NCHWc layout.
- optimization level `all`, except for fp16 models: at `all`, ONNX Runtime's x86 CPU kernels (no
  fp16 convolution) make it fold the fp16 weights into float32 ones, so the file would double.
  fp16 uses level `layout` instead, which keeps fp16 weights (and the Casts the CPU EP inserts).

The tool writes `<name>.ort` and `<name>.required_operators.config` (the `--include_ops_by_config`
input of a reduced ONNX Runtime build); edgekit names them `<stem>.ort` and
`<stem>.required_operators.config`. An integer-I/O sidecar (`<model>.io.json`) is carried along.

ONNX Runtime's mobile usability checker (`onnxruntime.tools.mobile_helpers.usability_checker`) runs
on the input ONNX; its NNAPI/CoreML partitioning goes into `meta["mobile_package"]` with whether the
model fits the pre-built mobile packages. Since ONNX Runtime 1.19 those packages
(onnxruntime-android, the onnxruntime-c/objc pods) hold every operator and type, so a model fits when
every op of its .ort has a CPU kernel in this onnxruntime and the device runs this version or newer.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shutil
from pathlib import Path

from edgekit import io_params
from edgekit.artifact import ModelArtifact
from edgekit.errors import ConversionFailed
from edgekit.formats import ORT_CONFIG_SUFFIX
from edgekit.registry import Converter


OPTIMIZATION_STYLE = "Fixed"
TARGET_PLATFORM = "arm"
LEVEL_ENV = "ORT_CONVERT_ONNX_MODELS_TO_ORT_OPTIMIZATION_LEVEL"  # the tool's only way to set the level
PACKAGES = "onnxruntime-android / onnxruntime-c / onnxruntime-objc"
COREML_FORMATS = {"coreml_mlprogram": "coreml_supported_mlprogram_ops.md",
                  "coreml_neuralnetwork": "coreml_supported_neuralnetwork_ops.md"}


class OnnxToOrt(Converter):
    name = "onnx_to_ort"
    source = "onnx"
    target = "ort"
    precisions = ("fp32", "fp16", "int8", "int8-dynamic")
    extra = "onnx"
    requires = ("onnx", "onnxruntime")  # no torch: ONNX models from TensorFlow take this edge too
    cost = 1.0
    tools = ("onnx", "onnxruntime")

    @classmethod
    def accepts(cls, in_precision: str, out_precision: str) -> bool:
        return in_precision == out_precision and out_precision in cls.precisions

    def convert(self, src: ModelArtifact, out_path: Path, precision: str, ctx) -> ModelArtifact:
        level = "layout" if precision == "fp16" else "all"
        work = ctx.work_dir / f"{out_path.stem}.ort-tool"
        model = _tool_input(src, work / "in")
        ort_file, config = _convert(model, work / "out", level)
        os.replace(ort_file, out_path)
        config_path = out_path.with_name(out_path.stem + ORT_CONFIG_SUFFIX)
        _write_config(config, config_path, out_path.name)
        files = [str(out_path), str(config_path)]
        sidecar = io_params.read(src.path)
        if sidecar is not None:
            files.append(str(io_params.write(out_path, sidecar["inputs"], sidecar["outputs"])))
        mobile = mobile_package(model, config_path)
        shutil.rmtree(work, ignore_errors=True)
        meta = {"mobile_package": mobile,
                "ort_format": {"optimization_style": OPTIMIZATION_STYLE, "optimization_level": level,
                               "target_platform": TARGET_PLATFORM}}
        return ModelArtifact("ort", str(out_path), src.signature, precision, files=tuple(files), meta=meta)


def _tool_input(src: ModelArtifact, folder: Path) -> Path:
    """The ONNX file to hand the tool: the model itself, unless the tool would skip its name.

    The tool ignores files named *.optimized.onnx (its own by-products); such a model is linked into
    a private folder as model.onnx, its external-data files at the same relative places.
    """
    from edgekit.formats import onnx_files

    model = Path(src.path)
    if not model.name.lower().endswith(".optimized.onnx"):
        return model
    staged = folder / "model.onnx"
    for f in onnx_files(model):
        rel = Path(os.path.relpath(f, model.parent))
        if rel.parts[0] == "..":
            raise ConversionFailed(f"{model.name} keeps external data outside its folder ({rel})",
                                   converter=OnnxToOrt.name, fix="rename the model so it does not end in .optimized.onnx")
        dest = staged if Path(f) == model else folder / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(f, dest)
        except OSError:
            shutil.copy2(f, dest)
    return staged


@contextlib.contextmanager
def _quiet_tool():
    """The tool prints progress and configures the root logger at import: keep both out of edgekit."""
    root = logging.getLogger()
    handlers = list(root.handlers)
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            import onnxruntime.tools.ort_format_model  # noqa: F401 - its import calls logging.basicConfig
        finally:
            for h in root.handlers[:]:
                if h not in handlers:
                    root.removeHandler(h)
        logging.getLogger("ort_format_model.utils").setLevel(logging.WARNING)  # "Created config in ..."
        yield


def _convert(model: Path, out_dir: Path, level: str) -> tuple[Path, Path]:
    """Run onnxruntime's converter on one model; returns the .ort and its required-operators config."""
    with _quiet_tool():
        from onnxruntime.tools.convert_onnx_models_to_ort import OptimizationStyle, convert_onnx_models_to_ort

        saved = os.environ.get(LEVEL_ENV)
        os.environ[LEVEL_ENV] = level
        try:
            convert_onnx_models_to_ort(model, output_dir=out_dir, target_platform=TARGET_PLATFORM,
                                       optimization_styles=[OptimizationStyle[OPTIMIZATION_STYLE]])
        finally:
            if saved is None:
                os.environ.pop(LEVEL_ENV, None)
            else:
                os.environ[LEVEL_ENV] = saved
    ort_files = sorted(out_dir.glob("*.ort"))
    configs = sorted(out_dir.glob("*.config"))
    if len(ort_files) != 1 or len(configs) != 1:
        found = ", ".join(p.name for p in sorted(out_dir.iterdir())) or "nothing"
        raise ConversionFailed(f"onnxruntime's converter wrote {found}, expected one .ort and one .config",
                               converter=OnnxToOrt.name)
    return ort_files[0], configs[0]


def _write_config(config: Path, dest: Path, ort_name: str) -> None:
    """The tool's config, with its header naming the .ort beside it instead of a temporary path."""
    lines = config.read_text().splitlines()
    body = [ln for ln in lines if not ln.startswith("#")]
    dest.write_text("\n".join(["# Generated from model/s:", f"# - {ort_name}", *body]) + "\n")


def required_ops(config: Path) -> list[tuple[str, int, str]]:
    """(domain, opset, op) for every line `domain;opset;op1,op2` of a required-operators config."""
    out = []
    for line in config.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            domain, opset, ops = line.strip().split(";", 2)
            out += [(domain, int(opset), op.split("{", 1)[0]) for op in ops.split(",") if op]
    return out


def mobile_package(model: Path, config: Path) -> dict:
    """Whether the model fits ONNX Runtime's pre-built mobile packages, and what the checker says
    about the NNAPI and CoreML execution providers."""
    import onnxruntime as ort
    from onnxruntime.capi.onnxruntime_pybind11_state import get_all_opkernel_def

    kernels = {}
    for k in get_all_opkernel_def():
        if k.provider == "CPUExecutionProvider":
            kernels.setdefault((k.domain or "ai.onnx", k.op_name), []).append(k.version_range)
    ops = required_ops(config)
    missing = [f"{domain}:{op} (opset {opset})" for domain, opset, op in ops
               if not any(lo <= opset <= hi for lo, hi in kernels.get((domain, op), []))]
    out = {"fits": not missing, "package": f"{PACKAGES} >= {ort.__version__}", "ops": len(ops),
           "unsupported_ops": missing}
    try:
        out.update(_usability(model))
    except Exception as e:  # noqa: BLE001 - the checker is advisory; its failure must not fail the conversion
        out["checker_error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
    return out


def _usability(model: Path) -> dict:
    """ONNX Runtime's usability checker, as `analyze_model` runs it, kept as data instead of log lines."""
    import tempfile

    from onnxruntime.tools.mobile_helpers import usability_checker as uc
    from onnxruntime.tools.onnx_model_utils import ModelProtoWithShapeInfo, optimize_model

    silent = logging.getLogger("edgekit.ort_usability")
    silent.propagate, silent.disabled = False, True
    with tempfile.TemporaryDirectory(prefix="edgekit-ort-usability-") as tmp:
        optimized = Path(tmp) / "model.onnx"  # basic optimizations first, as the checker does
        optimize_model(model, optimized, use_external_initializers=True)
        shaped = ModelProtoWithShapeInfo(optimized).model_with_shape_info
    dynamic_inputs, _ = uc.check_shapes(shaped.graph, silent)
    checks = {"nnapi": lambda m, fixed: uc.check_nnapi_partitions(m, fixed)}
    for key, table in COREML_FORMATS.items():
        checks[key] = lambda m, fixed, table=table: uc.check_coreml_partitions(m, fixed, table)
    out, any_ep = {}, False
    for key, check in checks.items():
        info = check(shaped, True)
        suitability = info.suitability()
        entry = {"suitability": suitability.name, "partitions": info.num_partitions,
                 "supported_nodes": info.num_supported_nodes, "nodes": info.num_nodes,
                 "unsupported_ops": sorted(info.unsupported_ops)}
        if suitability != uc.PartitioningInfo.TryWithEP.YES and dynamic_inputs:
            entry["with_fixed_shapes"] = check(shaped, False).suitability().name
        any_ep |= suitability != uc.PartitioningInfo.TryWithEP.NO or entry.get("with_fixed_shapes", "NO") != "NO"
        out[key] = entry
    out["try_nnapi_or_coreml"] = any_ep
    return out
