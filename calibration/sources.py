"""Calibration data sources: .npz, a folder of .npy, a folder of images, a Python function, random.

Everything is loaded and validated against the model's signature before any conversion runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgekit.calibration.data import SampleSet, load_samples, random_samples, validate
from edgekit.core.errors import BadInput, reading
from edgekit.core.formats import IMPORT_SPEC
from edgekit.core.signature import Signature
from edgekit.core.user_code import call_user, import_spec

MIN_SAMPLES = 10
RANDOM_DEFAULT = 100
RANDOM_WARNING = ("calibrated on RANDOM inputs: int8 ranges do not match real data, so accuracy may be far "
                  "worse than with representative samples; pass --calib data.npz")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")


@dataclass(frozen=True)
class ImagePreprocess:
    """How images become model inputs: resize, scale, normalise, lay out.

    Written on the command line as `size=32x32,scale=1/255,mean=0.5,std=0.25,layout=NCHW,color=gray`;
    every key is optional and defaults from the model's input signature.
    """

    size: tuple[int, int] | None = None  # (height, width)
    scale: float = 1 / 255
    mean: tuple[float, ...] = (0.0,)
    std: tuple[float, ...] = (1.0,)
    layout: str | None = None  # NCHW | NHWC
    color: str | None = None  # gray | rgb

    @classmethod
    def parse(cls, text: str | None) -> "ImagePreprocess":
        """The --calib-preprocess text, e.g. `size=224x224,mean=0.485/0.456/0.406`; None or "" gives the defaults,
        and an unknown key or unreadable value is a BadInput."""
        if not text:
            return cls()
        fields: dict = {}
        for item in text.split(","):
            key, sep, value = item.strip().partition("=")
            try:
                if not sep:
                    raise ValueError("expected key=value")
                if key == "size":
                    h, w = re.split(r"[x×]", value)
                    fields["size"] = (int(h), int(w))
                elif key == "scale":
                    num, _, den = value.partition("/")
                    fields["scale"] = float(num) / float(den or 1)
                elif key in ("mean", "std"):
                    fields[key] = tuple(float(v) for v in value.split("/"))
                elif key == "layout":
                    if value.upper() not in ("NCHW", "NHWC"):
                        raise ValueError("layout is NCHW or NHWC")
                    fields["layout"] = value.upper()
                elif key == "color":
                    if value.lower() not in ("gray", "rgb"):
                        raise ValueError("color is gray or rgb")
                    fields["color"] = value.lower()
                else:
                    raise ValueError(f"unknown key {key!r}")
            except ValueError as e:
                raise BadInput(f"cannot read --calib-preprocess item {item!r}: {e}",
                               fix="keys: size=HxW, scale=1/255, mean=a/b/c, std=a/b/c, layout=NCHW|NHWC, color=gray|rgb") from None
        return cls(**fields)


@dataclass(frozen=True)
class CalibrationSpec:
    """Where calibration data comes from and how much of it to use."""

    source: str
    samples: int | None = None
    preprocess: str | None = None
    project: str | None = None  # module:function specs must name code of this folder (check configs)

    def __post_init__(self):
        if self.samples is not None and self.samples < 1:
            raise BadInput(f"--calib-samples must be at least 1, got {self.samples}")


def load_calibration(spec: CalibrationSpec, signature: Signature) -> tuple[SampleSet, list[str]]:
    """Load, validate and trim calibration data. Returns the samples and any warnings."""
    warnings: list[str] = []
    src = spec.source
    path = Path(src)
    if src == "random":
        data = random_samples(signature, spec.samples or RANDOM_DEFAULT, seed=1)
        return data, [RANDOM_WARNING]
    if path.is_file():
        if path.suffix.lower() != ".npz":
            raise BadInput(f"calibration file {src} is not an .npz",
                           fix="give an .npz, a folder of .npy files or images, module:function, or random")
        data = load_samples(path, signature, what="calibration data")
    elif path.is_dir():
        data = _from_directory(path, signature, ImagePreprocess.parse(spec.preprocess))
    elif IMPORT_SPEC.match(src):
        data = _from_function(src, signature, spec.project)
    else:
        raise BadInput(f"calibration data not found: {src}",
                       fix="give an .npz, a folder of .npy files or images, module:function, or random")
    if spec.samples is not None:
        if spec.samples > len(data):
            warnings.append(f"--calib-samples {spec.samples} asked for more than the {len(data)} samples in {src}; "
                            f"using all {len(data)}")
        data = data.head(spec.samples)
    if len(data) < MIN_SAMPLES:
        raise BadInput(f"too few calibration samples in {src}: {len(data)}, at least {MIN_SAMPLES} are needed",
                       fix="give more representative samples (a few hundred is typical)")
    return data, warnings


def _from_directory(path: Path, signature: Signature, prep: ImagePreprocess) -> SampleSet:
    npys = sorted(path.glob("*.npy"))
    images = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    subdirs = {d.name: d for d in path.iterdir() if d.is_dir()}
    what = f"calibration folder {path}"
    if len(signature.inputs) > 1 and set(signature.input_names) <= set(subdirs):
        arrays = {name: _stack_npys(sorted(subdirs[name].glob("*.npy")), f"{what}/{name}")
                  for name in signature.input_names}
        return validate(arrays, signature, what=what, source=str(path))
    if npys:
        if len(signature.inputs) != 1:
            raise BadInput(f"{what} holds .npy files but the model has {len(signature.inputs)} inputs",
                           fix=f"make one sub-folder per input: {', '.join(signature.input_names)}")
        arrays = {signature.inputs[0].name: _stack_npys(npys, what)}
        return validate(arrays, signature, what=what, source=str(path))
    if images:
        return _from_images(images, signature, prep, what, str(path))
    raise BadInput(f"{what} holds no .npy files and no images ({', '.join(IMAGE_SUFFIXES)})")


def _stack_npys(files: list[Path], what: str) -> np.ndarray:
    if not files:
        raise BadInput(f"{what} holds no .npy files")
    arrays = []
    for f in files:
        with reading(f, "a .npy array", fix="save each sample with numpy.save"):
            arrays.append(np.load(f, allow_pickle=False))
    for f, a in zip(files, arrays):
        if a.dtype.kind not in "biuf":
            raise BadInput(f"{what}: {f.name} holds {a.dtype}, not numbers", fix="save each sample as a numeric array")
    dtypes = {a.dtype.str for a in arrays}
    if len(dtypes) != 1:
        raise BadInput(f"{what}: the .npy files have different dtypes {sorted(dtypes)}",
                       fix="save every sample with the model's input dtype")
    shapes = {a.shape for a in arrays}
    if len(shapes) != 1:
        raise BadInput(f"{what}: the .npy files have different shapes {sorted(shapes)}",
                       fix="save one sample per file, all of the model's input shape")
    # One sample per file, shaped like the input (with or without its batch axis of 1).
    return np.stack(arrays)


def _from_images(files: list[Path], signature: Signature, prep: ImagePreprocess, what: str, source: str) -> SampleSet:
    from PIL import Image

    if len(signature.inputs) != 1 or len(signature.inputs[0].shape) != 4:
        raise BadInput(f"{what}: images can calibrate a model with one 4-D image input; this one takes {signature.describe()}")
    spec = signature.inputs[0]
    layout = prep.layout or signature.layout
    n, a, b, c = spec.shape
    channels, (h, w) = (a, (b, c)) if layout == "NCHW" else (c, (a, b))
    if prep.size:
        h, w = prep.size
    if channels not in (1, 3):
        raise BadInput(f"{what}: the model's input {spec.describe()} has {channels} channels in {layout}; images give 1 or 3",
                       fix="set layout=NCHW or layout=NHWC in --calib-preprocess")
    color = prep.color or ("gray" if channels == 1 else "rgb")
    mean = np.asarray(prep.mean, np.float32).reshape(-1)
    std = np.asarray(prep.std, np.float32).reshape(-1)
    if mean.size not in (1, channels) or std.size not in (1, channels):
        raise BadInput(f"{what}: mean/std need 1 or {channels} values")
    samples = []
    for f in files:
        with reading(f, "an image", fix="remove or replace the damaged image"):
            with Image.open(f) as img:
                img = img.convert("L" if color == "gray" else "RGB").resize((w, h), Image.BILINEAR)
                arr = np.asarray(img, np.float32)
        arr = arr[..., None] if arr.ndim == 2 else arr  # H, W, C
        arr = (arr * prep.scale - mean) / std
        if layout == "NCHW":
            arr = arr.transpose(2, 0, 1)
        samples.append(np.array(arr, np.float32, copy=True))
    return validate({spec.name: np.stack(samples)}, signature, what=what, source=source)


def _from_function(spec: str, signature: Signature, project: str | None = None) -> SampleSet:
    fn = import_spec(spec, "calibration function", project)
    items = call_user(lambda: list(fn() if callable(fn) else fn), f"calibration function {spec}")
    names = signature.input_names
    per_input: dict[str, list] = {n: [] for n in names}
    for i, item in enumerate(items):
        if isinstance(item, dict):
            values = [item.get(n) for n in names]
        elif isinstance(item, (tuple, list)):
            values = list(item)
        else:
            values = [item]
        if len(values) != len(names) or any(v is None for v in values):
            raise BadInput(f"calibration function {spec}: sample {i} gives {len(values)} value(s) for "
                           f"{len(names)} input(s) ({', '.join(names)})",
                           fix="yield one tuple per sample, one array per input in the model's order")
        for n, v in zip(names, values):
            per_input[n].append(np.asarray(v.detach().cpu().numpy() if hasattr(v, "detach") else v))
    if not items:
        raise BadInput(f"calibration function {spec} yielded no samples")
    try:
        arrays = {n: np.stack(v) for n, v in per_input.items()}
    except ValueError as e:
        raise BadInput(f"calibration function {spec}: samples differ in shape ({e})") from None
    return validate(arrays, signature, what=f"calibration function {spec}", source=spec)
