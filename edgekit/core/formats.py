"""Model formats and their detection by content: bytes first, the extension only as a hint."""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from edgekit.core.errors import BadInput, reading


@dataclass(frozen=True)
class Format:
    """A model format edgekit knows; `extensions` only hint (detection reads the bytes) and may be shared."""

    id: str
    family: str  # "torch", "tf", or the format's own id for artifacts
    extensions: tuple[str, ...]
    description: str
    judged_by: str = "samples"  # what its artifacts are judged against: outputs on samples, or an LM's "tokens"


FORMATS: dict[str, Format] = {
    f.id: f
    for f in (
        Format("torch-export", "torch", (".pt2", ".pt"), "ExportedProgram archive (torch.export.save)"),
        Format("torchscript", "torch", (".pt", ".pth"), "TorchScript archive (torch.jit.save)"),
        Format("torch-pickle", "torch", (".pt", ".pth", ".bin"), "pickled module or state_dict (torch.save)"),
        Format("torch-python", "torch", (), "Python import spec module:factory"),
        Format("tf-savedmodel", "tf", (), "TensorFlow SavedModel directory"),
        Format("keras", "tf", (".keras", ".h5"), "Keras model file"),
        Format("hf-causal-lm", "lm", (), "Hugging Face causal LM folder (config.json + safetensors)", "tokens"),
        Format("onnx", "onnx", (".onnx",), "ONNX ModelProto"),
        Format("tflite", "tflite", (".tflite",), "LiteRT/TFLite flatbuffer"),
        Format("pte", "pte", (".pte",), "ExecuTorch program"),
        Format("ptl", "ptl", (".ptl",), "PyTorch Mobile lite-interpreter archive"),
        Format("ort", "ort", (".ort",), "ONNX Runtime mobile format"),
    )
}

# A Python import spec: dotted.module:attribute (never an existing path).
IMPORT_SPEC = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")

_ZIP_MAGIC = b"PK\x03\x04"
_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"


def _flatbuffer_id(head: bytes) -> bytes:
    return head[4:8] if len(head) >= 8 else b""


def _zip_kind(path: Path) -> str | None:
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
    except (zipfile.BadZipFile, OSError):
        return "corrupt"
    leaves = {n.split("/", 1)[1] if "/" in n else n for n in names}
    if "archive_format" in leaves or any(n.startswith("models/") and n.endswith(".json") for n in leaves):
        return "torch-export"
    if "bytecode.pkl" in leaves:
        return "ptl"
    if "constants.pkl" in leaves and any(n.startswith("code/") for n in leaves):
        return "torchscript"
    if "data.pkl" in leaves:
        return "torch-pickle"
    if "config.json" in leaves and any(n.endswith(".weights.h5") for n in leaves):
        return "keras"
    return None


def detect(location: str | Path) -> str:
    """Return the format id of a model file, directory or import spec.

    Raises BadInput with the reason when the location is missing, empty, truncated, or holds
    something edgekit does not read, and when the content contradicts the extension.
    """
    with reading(location, "a model file"):
        return _detect(str(location))


def _detect(text: str) -> str:
    path = Path(text)
    if not path.exists():
        if IMPORT_SPEC.match(text):
            return "torch-python"
        raise BadInput(f"model not found: {text}", fix="check the path (or give an import spec module:factory)")
    if path.is_dir():
        if (path / "saved_model.pb").is_file():
            return "tf-savedmodel"
        if (path / "config.json").is_file() and any(path.glob("model*.safetensors*")):
            return "hf-causal-lm"
        raise BadInput(
            f"{text} is a directory but not a TensorFlow SavedModel (no saved_model.pb inside), nor a "
            "Hugging Face model folder (config.json and safetensors weights)",
            fix="point at a SavedModel or model folder, or at a model file",
        )
    size = path.stat().st_size
    if size == 0:
        raise BadInput(f"{text} is empty (0 bytes)", fix="re-save the model; the file was not written completely")
    with open(path, "rb") as f:
        head = f.read(16)
    ext = path.suffix.lower()

    found: str | None = None
    if head.startswith(_ZIP_MAGIC):
        found = _zip_kind(path)
        if found == "corrupt":
            raise BadInput(
                f"{text} is a damaged or truncated zip archive",
                fix="re-save it (torch.export.save / torch.jit.save) and copy the whole file",
            )
    elif head.startswith(_HDF5_MAGIC):
        found = "keras"
    elif head[:1] == b"\x80" and ext in (".pt", ".pth", ".bin", ".pkl"):
        found = "torch-pickle"  # a legacy (non-zip) torch.save pickle
    else:
        ident = _flatbuffer_id(head)
        if ident == b"TFL3":
            found = "tflite"
        elif ident[:2] == b"ET":
            found = "pte"
        elif ident == b"ORTM":
            found = "ort"
        elif ext == ".onnx" or head[:1] == b"\x08":
            found = _onnx_if_parsable(path)

    if found is None:
        if ext in (".pt", ".pt2", ".pth"):
            kind = "text" if _looks_like_text(head) else "unrecognised bytes"
            raise BadInput(
                f"{text} is not a PyTorch model: its content is {kind}",
                fix="save it with torch.export.save (.pt2) or torch.jit.save (.pt)",
            )
        known = ", ".join(sorted({e for f in FORMATS.values() for e in f.extensions}))
        raise BadInput(f"{text}: unrecognised model format", fix=f"edgekit reads {known}, SavedModel directories and module:factory specs")
    if ext == ".pt2" and found != "torch-export":
        raise BadInput(
            f"{text} is named .pt2 but holds a {FORMATS[found].description}, not an ExportedProgram",
            fix="rename it to match its content, or re-save with torch.export.save",
        )
    if ext in {e for f in FORMATS.values() for e in f.extensions} and ext not in FORMATS[found].extensions:
        raise BadInput(
            f"{text} is named {ext} but holds a {FORMATS[found].description}",
            fix=f"rename it with one of {', '.join(FORMATS[found].extensions) or 'no extension'}",
        )
    return found


def _looks_like_text(head: bytes) -> bool:
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _onnx_if_parsable(path: Path) -> str | None:
    """ONNX has no magic number: it is an ONNX file when the protobuf parses as a ModelProto."""
    try:
        import onnx
    except ImportError:
        return "onnx" if path.suffix.lower() == ".onnx" else None
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:
        if path.suffix.lower() == ".onnx":
            raise BadInput(f"{path} is named .onnx but is not a readable ONNX model", fix="re-export it") from None
        return None
    return "onnx" if model.graph.node or model.graph.input else None


def onnx_dims(value) -> list[int | str | None]:
    """The dimensions of an ONNX ValueInfoProto: an int where fixed, else its symbolic name or None. A
    dim_value of -1 or 0 is dynamic too: older exporters (Paddle2ONNX, early tf2onnx) write -1 for a free
    batch dimension."""
    return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or None)
            for d in value.type.tensor_type.shape.dim]


def onnx_files(path: Path) -> tuple[str, ...]:
    """The model file and every external-data file it references, which must lie in the model's folder."""
    import onnx
    from onnx.external_data_helper import uses_external_data

    path = Path(path)
    model = onnx.load(str(path), load_external_data=False)
    folder = path.parent.resolve()
    sidecars = set()
    for tensor in model.graph.initializer:
        if uses_external_data(tensor):
            for entry in tensor.external_data:
                if entry.key == "location":
                    if not (folder / entry.value).resolve().is_relative_to(folder) or Path(entry.value).is_absolute():
                        raise BadInput(f"{path} names external data outside its folder ({entry.value!r} for "
                                       f"{tensor.name!r}); edgekit reads nothing a model points to elsewhere",
                                       fix="keep the model's .data files beside it (onnx.save with location=a plain file name)")
                    sidecars.add(str(path.parent / entry.value))
    return (str(path), *sorted(sidecars))


ORT_CONFIG_SUFFIX = ".required_operators.config"  # written beside an .ort: the operators it needs
# The CPUs an .ort can be laid out for (onnxruntime's convert tool, target_platform): "arm" for phones keeps int8
# groups signed; "x86" (amd64) converts them to the uint8 its x86 kernels take and may use the NCHWc layout.
ORT_PLATFORMS = {"arm": "arm", "x86": "amd64"}
ORT_PLATFORM_KEY = "edgekit.ort_platform"  # the .ort's model metadata entry naming which of them it is for
IO_SIDECAR_SUFFIX = ".io.json"  # <artifact>.io.json: the integer I/O parameters (edgekit.core.io_params)
NAME_PRECISIONS = ("fp32", "fp16", "int8", "int8-dynamic", "int8-weights", "int4-weights")  # as edgekit names files: <stem>.<precision>.<ext>


def artifact_files(fmt: str, path: str | Path) -> tuple[str, ...]:
    """The artifact file and the side files that ship with it, the artifact first."""
    path = Path(path)
    files = [str(path)]
    if fmt == "onnx":
        files += [f for f in onnx_files(path)[1:] if Path(f).is_file()]
    files += [str(path.with_name(n)) for n in side_file_names(fmt, path) if path.with_name(n).is_file()]
    return tuple(dict.fromkeys(files))


def side_file_names(fmt: str, path: str | Path) -> tuple[str, ...]:
    """The names of the side files edgekit writes beside an artifact at `path` (present or not); an ONNX
    model's external data is named by the model itself (`onnx_files`)."""
    path = Path(path)
    return ((path.stem + ORT_CONFIG_SUFFIX,) if fmt == "ort" else ()) + (path.name + IO_SIDECAR_SUFFIX,)


def split_name(path: Path) -> tuple[str, str | None]:
    """(stem, precision from the name or None): digits_cnn.int8.tflite → ("digits_cnn", "int8")."""
    name = path.name
    ext = path.suffix
    base = name[: -len(ext)] if ext else name
    for prec in sorted(NAME_PRECISIONS, key=len, reverse=True):
        if base.endswith("." + prec):
            return base[: -len(prec) - 1], prec
    return base, None
