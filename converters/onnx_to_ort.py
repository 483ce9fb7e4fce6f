"""onnx → ort: ONNX Runtime's mobile format, with its required-operators config beside it.

The conversion is onnxruntime's own tool (`onnxruntime.tools.convert_onnx_models_to_ort`), run
in-process with:

- the **Fixed** optimization style: the graph is optimized once, now, and saved as ONNX Runtime
  will run it (QDQ groups fused into QLinearConv/QGemm, Conv+Relu into FusedConv). A minimal or
  mobile build then runs the file as is. The Runtime style only pays off with NNAPI/CoreML, whose
  partitioning is unknown at conversion time, and needs a session option to replay its
  optimizations; the checker's NNAPI/CoreML verdict is recorded so a user can tell when to prefer it.
- `target_platform="arm"` by default (`--ort-platform arm`): the file is for phones, so ONNX Runtime keeps
  int8 QDQ groups signed (`session.qdqisint8allowed=1`) and leaves out the x86-only NCHWc layout.
  `--ort-platform x86` lays it out for x86-64 instead (amd64: int8 as the uint8 its x86 kernels take,
  the NCHWc layout). The choice is written into the file's metadata (`edgekit.ort_platform`), where
  `inspect` and `bench` read it: an ARM-laid-out .ort timed on an x86 host is said to be so.
- optimization level `all`, except for fp16 models: at `all`, ONNX Runtime's x86 CPU kernels (no
  fp16 convolution) make it fold the fp16 weights into float32 ones, so the file would double.
  fp16 uses level `layout` instead, which keeps fp16 weights (and the Casts the CPU EP inserts).

The tool writes `<name>.ort` and `<name>.required_operators.config` (the `--include_ops_by_config`
input of a reduced ONNX Runtime build); edgekit names them `<stem>.ort` and
`<stem>.required_operators.config`. An integer-I/O sidecar (`<model>.io.json`) is carried along.

The same model gives the same bytes: ONNX Runtime writes the file's kernel-type-string table
(`KernelTypeStrResolver`: for each op, which inputs/outputs each type constraint names) by walking
a hash map whose order is seeded per process, so the table's entries, strings and vtables land in
the file in a different order every run; only the offset vectors are sorted afterwards, so the
content is the same and the bytes are not. `canonical_ort` rebuilds that table (op ids and type strings in
sorted order) with the `flatbuffers` package and keeps the model, which ONNX Runtime wrote before
the table, byte for byte.

ONNX Runtime's mobile usability checker (`onnxruntime.tools.mobile_helpers.usability_checker`) runs
on the input ONNX; its NNAPI/CoreML partitioning goes into `meta.mobile_package` with whether the
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
import tempfile
from pathlib import Path

from edgekit.core import io_params
from edgekit.core.artifact import ArtifactMeta, ModelArtifact
from edgekit.core.errors import ConversionFailed
from edgekit.core.formats import ORT_CONFIG_SUFFIX, ORT_PLATFORM_KEY, ORT_PLATFORMS, onnx_files
from edgekit.core.quant import Precision
from edgekit.converters.base import ConvertContext, Converter
from edgekit.targets.ort.inspect import _fbs


OPTIMIZATION_STYLE = "Fixed"
LEVEL_ENV = "ORT_CONVERT_ONNX_MODELS_TO_ORT_OPTIMIZATION_LEVEL"  # the tool's only way to set the level
PACKAGES = "onnxruntime-android / onnxruntime-c / onnxruntime-objc"
COREML_FORMATS = {"coreml_mlprogram": "coreml_supported_mlprogram_ops.md",
                  "coreml_neuralnetwork": "coreml_supported_neuralnetwork_ops.md"}


class OnnxToOrt(Converter):
    """The onnx → ort edge (see the module's docstring): a format change only, so any quantization is the
    ONNX model's, made by the step before it."""

    name = "onnx_to_ort"
    source = "onnx"
    target = "ort"
    # int4-weights: a decoder LM's 4-bit MatMulNBits weights are packed bytes; its embedding table is int8
    precisions = (Precision.FP32, Precision.FP16, Precision.INT8, Precision.INT8_DYNAMIC, Precision.INT8_WEIGHTS, Precision.INT4_WEIGHTS)
    extra = "onnx"
    requires = ("onnx", "onnxruntime")  # no torch: ONNX models from TensorFlow take this edge too
    cost = 1.0
    tools = ("onnx", "onnxruntime")

    @classmethod
    def accepts(cls, in_precision: str, out_precision: str) -> bool:
        """Only the precision the ONNX model already has: this edge changes the format, never the precision."""
        return in_precision == out_precision and out_precision in cls.precisions

    def convert(self, src: ModelArtifact, out_path: Path, precision: str, ctx: ConvertContext) -> ModelArtifact:
        """The .ort (Fixed style, for ARM, byte-reproducible where the table can be rebuilt), its
        required-operators config and any integer-I/O sidecar; the mobile-package verdict goes in the meta."""
        level = "layout" if precision == Precision.FP16 else "all"
        work = ctx.work_dir / f"{out_path.stem}.ort-tool"
        model = _tool_input(src, work / "in", ctx.ort_platform)
        ort_file, config = _convert(model, work / "out", level, ORT_PLATFORMS[ctx.ort_platform])
        canonical = canonical_ort(ort_file.read_bytes())
        if canonical is not None:
            ort_file.write_bytes(canonical)
        os.replace(ort_file, out_path)
        config_path = out_path.with_name(out_path.stem + ORT_CONFIG_SUFFIX)
        _write_config(config, config_path, out_path.name)
        files = [str(out_path), str(config_path)]
        sidecar = io_params.read(src.path)
        if sidecar is not None:
            files.append(str(io_params.write(out_path, sidecar["inputs"], sidecar["outputs"])))
        mobile = mobile_package(model, config_path)
        shutil.rmtree(work, ignore_errors=True)
        meta = ArtifactMeta(mobile_package=mobile, ort_format={
            "optimization_style": OPTIMIZATION_STYLE, "optimization_level": level,
            "target_platform": ORT_PLATFORMS[ctx.ort_platform],
            "canonical_layout": canonical is not None}, lm=src.meta.lm)  # a decoder LM's record travels with it
        return ModelArtifact("ort", str(out_path), src.signature, precision, files=tuple(files), meta=meta)


def _tool_input(src: ModelArtifact, folder: Path, platform: str) -> Path:
    """The ONNX file to hand the tool: the model with `platform` in its metadata (ORT_PLATFORM_KEY), as model.onnx
    in a private folder (the tool ignores files named *.optimized.onnx, its own by-products), its
    external-data files linked at the same relative places."""
    import onnx

    model = Path(src.path)
    staged = folder / "model.onnx"
    proto = onnx.load(str(model), load_external_data=False)
    kept = [p for p in proto.metadata_props if p.key != ORT_PLATFORM_KEY]
    del proto.metadata_props[:]
    proto.metadata_props.extend(kept + [onnx.StringStringEntryProto(key=ORT_PLATFORM_KEY, value=platform)])
    for f in onnx_files(model):
        rel = Path(os.path.relpath(f, model.parent))
        if rel.parts[0] == "..":
            raise ConversionFailed(f"{model.name} keeps external data outside its folder ({rel})",
                                   converter=OnnxToOrt.name, fix="save the model with its external data beside it")
        if Path(f) == model:
            continue
        dest = folder / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(f, dest)
        except OSError:
            shutil.copy2(f, dest)
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(proto, str(staged))
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


def _convert(model: Path, out_dir: Path, level: str, platform: str) -> tuple[Path, Path]:
    """Run onnxruntime's converter on one model for `platform` (its target_platform); returns the .ort and its
    required-operators config."""
    with _quiet_tool():
        from onnxruntime.tools.convert_onnx_models_to_ort import OptimizationStyle, convert_onnx_models_to_ort

        saved = os.environ.get(LEVEL_ENV)
        os.environ[LEVEL_ENV] = level
        try:
            convert_onnx_models_to_ort(model, output_dir=out_dir, target_platform=platform,
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


ALIGN = 8  # flatbuffers' widest scalar; onnxruntime forces no wider alignment on any vector
ORT_IDENTIFIER = b"ORTM"
SESSION_FIELDS = {0, 1, 3}  # InferenceSession: ort_version, model, kernel_type_str_resolver (2 is deprecated)


def canonical_ort(data: bytes) -> bytes | None:
    """The .ort `data` with its kernel-type-string table rebuilt in a canonical order, or None when
    the file holds anything this rewrite does not know (it is then left as onnxruntime wrote it).

    ONNX Runtime builds the file back to front: the model first (it ends the file), then the table,
    then the root table. The model with everything it references therefore starts at the model
    table (or at its vtable, written just below it) and runs to the end of the file; those bytes are
    kept as they are, at the same distance from the end of the buffer, so every offset inside them
    and every alignment stays valid. In front of them come a new table, in sorted order, and a new
    root pointing at both.
    """
    import flatbuffers

    fbs = _fbs()
    buf = bytearray(data)
    if len(buf) < 8 or not fbs.InferenceSession.InferenceSession.InferenceSessionBufferHasIdentifier(buf, 0):
        return None
    session = fbs.InferenceSession.InferenceSession.GetRootAs(buf, 0)
    model, resolver = session.Model(), session.KernelTypeStrResolver()
    if model is None or resolver is None or not _fields(session._tab) <= SESSION_FIELDS:
        return None
    table = _read_resolver(resolver)
    if table is None:
        return None
    entries, positions = table
    start = min(model._tab.Pos, _vtable(model._tab))  # the model's bytes: [start, end of file)
    if any(pos >= start for pos in positions):  # the table was not written after the model
        return None
    size = len(buf)
    kept = bytes(buf[start:])

    b = flatbuffers.Builder(len(kept) + 1024)  # it builds back to front too: the kept bytes go in first, at the end
    b.head = len(b.Bytes) - len(kept)
    b.Bytes[b.head:] = kept
    b.minalign = ALIGN
    new_resolver = _sorted_resolver(b, fbs, entries)

    version = session.OrtVersion()
    version_at = _field_target(session._tab, 0)
    if version is None:
        version_off = 0
    elif version_at is not None and version_at >= start:  # onnxruntime writes it first: among the kept bytes
        version_off = size - version_at
    else:
        version_off = b.CreateString(version)
    fbs.InferenceSession.InferenceSessionStart(b)
    if version_off:
        fbs.InferenceSession.InferenceSessionAddOrtVersion(b, version_off)
    fbs.InferenceSession.InferenceSessionAddModel(b, size - model._tab.Pos)
    fbs.InferenceSession.InferenceSessionAddKernelTypeStrResolver(b, new_resolver)
    b.Finish(fbs.InferenceSession.InferenceSessionEnd(b), file_identifier=ORT_IDENTIFIER)
    out = bytes(b.Output())
    return out if _same_session(fbs, out, model._tab.Pos + len(out) - size, kept, version, entries) else None


def _sorted_resolver(b, fbs, entries: dict) -> int:
    """A KernelTypeStrResolver of `entries` ({op id: {type string: [(arg type, index)]}}) built into `b` with
    its keys in the order flatbuffers looks them up (bytewise); its offset."""
    strings: dict[bytes, int] = {}

    def string(text: bytes) -> int:
        if text not in strings:
            strings[text] = b.CreateString(text)
        return strings[text]

    def vector(offsets: list[int]) -> int:
        b.StartVector(4, len(offsets), 4)
        for off in reversed(offsets):
            b.PrependUOffsetTRelative(off)
        return b.EndVector()

    ops = []
    for op_id in sorted(entries):  # flatbuffers orders keyed tables bytewise, as bytes compare
        type_strs = []
        for type_str in sorted(entries[op_id]):
            args = []
            for arg_type, index in entries[op_id][type_str]:
                fbs.ArgTypeAndIndex.ArgTypeAndIndexStart(b)
                fbs.ArgTypeAndIndex.ArgTypeAndIndexAddArgType(b, arg_type)
                fbs.ArgTypeAndIndex.ArgTypeAndIndexAddIndex(b, index)
                args.append(fbs.ArgTypeAndIndex.ArgTypeAndIndexEnd(b))
            args_vector, name = vector(args), string(type_str)
            fbs.KernelTypeStrArgsEntry.KernelTypeStrArgsEntryStart(b)
            fbs.KernelTypeStrArgsEntry.KernelTypeStrArgsEntryAddKernelTypeStr(b, name)
            fbs.KernelTypeStrArgsEntry.KernelTypeStrArgsEntryAddArgs(b, args_vector)
            type_strs.append(fbs.KernelTypeStrArgsEntry.KernelTypeStrArgsEntryEnd(b))
        type_strs_vector, name = vector(type_strs), string(op_id)
        fbs.OpIdKernelTypeStrArgsEntry.OpIdKernelTypeStrArgsEntryStart(b)
        fbs.OpIdKernelTypeStrArgsEntry.OpIdKernelTypeStrArgsEntryAddOpId(b, name)
        fbs.OpIdKernelTypeStrArgsEntry.OpIdKernelTypeStrArgsEntryAddKernelTypeStrArgs(b, type_strs_vector)
        ops.append(fbs.OpIdKernelTypeStrArgsEntry.OpIdKernelTypeStrArgsEntryEnd(b))
    ops_vector = vector(ops)
    fbs.KernelTypeStrResolver.KernelTypeStrResolverStart(b)
    fbs.KernelTypeStrResolver.KernelTypeStrResolverAddOpKernelTypeStrArgs(b, ops_vector)
    return fbs.KernelTypeStrResolver.KernelTypeStrResolverEnd(b)


def _same_session(fbs, out: bytes, model_pos: int, kept: bytes, version, entries: dict) -> bool:
    """Whether the rebuilt file `out` leads to the same model bytes (`kept`, its model table now at `model_pos`),
    the same version and the same table."""
    check = fbs.InferenceSession.InferenceSession.GetRootAs(bytearray(out), 0)
    if check.Model() is None or check.Model()._tab.Pos != model_pos or not out.endswith(kept):
        return False
    reread = check.KernelTypeStrResolver()
    reread = _read_resolver(reread) if reread is not None else None
    return check.OrtVersion() == version and reread is not None and reread[0] == entries


def _read_resolver(resolver):
    """{op id: {kernel type string: [(arg type, index), ...]}} of a KernelTypeStrResolver table, with
    the position of every table in it; None if a table holds a field this module does not know or
    a key twice."""
    entries, positions = {}, [resolver._tab.Pos]
    if not _fields(resolver._tab) <= {0}:
        return None
    for i in range(resolver.OpKernelTypeStrArgsLength()):
        op = resolver.OpKernelTypeStrArgs(i)
        type_strs = {}
        if op is None or op.OpId() is None or not _fields(op._tab) <= {0, 1} or op.OpId() in entries:
            return None
        positions.append(op._tab.Pos)
        for j in range(op.KernelTypeStrArgsLength()):
            entry = op.KernelTypeStrArgs(j)
            if (entry is None or entry.KernelTypeStr() is None or not _fields(entry._tab) <= {0, 1}
                    or entry.KernelTypeStr() in type_strs):
                return None
            positions.append(entry._tab.Pos)
            args = []
            for k in range(entry.ArgsLength()):
                arg = entry.Args(k)
                if arg is None or not _fields(arg._tab) <= {0, 1}:
                    return None
                positions.append(arg._tab.Pos)
                args.append((arg.ArgType(), arg.Index()))
            type_strs[entry.KernelTypeStr()] = args
        entries[op.OpId()] = type_strs
    return entries, positions


def _vtable(tab) -> int:
    """Where a flatbuffer table's vtable starts."""
    from flatbuffers import encode, packer

    return tab.Pos - encode.Get(packer.soffset, tab.Bytes, tab.Pos)


def _fields(tab) -> set[int]:
    """The field numbers a flatbuffer table holds (its vtable's non-zero entries)."""
    from flatbuffers import encode, packer

    vtable = _vtable(tab)
    count = (encode.Get(packer.voffset, tab.Bytes, vtable) - 4) // 2
    return {i for i in range(count) if encode.Get(packer.voffset, tab.Bytes, vtable + 4 + 2 * i)}


def _field_target(tab, field: int) -> int | None:
    """Where the object an offset field of a table points to starts, or None if the field is absent."""
    from flatbuffers import encode, packer

    at = tab.Offset(4 + 2 * field)
    if not at:
        return None
    return tab.Pos + at + encode.Get(packer.uoffset, tab.Bytes, tab.Pos + at)


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
