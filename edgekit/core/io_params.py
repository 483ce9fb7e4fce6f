"""Integer model I/O: the scale and zero-point a host applies at the model's boundary.

A .tflite stores them on its input and output tensors. A .pte or .onnx with integer I/O does not
expose them to a caller, so edgekit writes them beside the artifact as `<artifact>.io.json`:

    {"inputs":  [{"name": "x", "dtype": "int8", "scale": 0.0039, "zero_point": -128}],
     "outputs": [{"name": "output_0", "dtype": "int8", "scale": 0.25, "zero_point": 9}]}

Entries are in the model's input/output order; a float boundary tensor has no entry (null).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from edgekit.core.errors import BadInput, reading
from edgekit.core.formats import IO_SIDECAR_SUFFIX as SUFFIX

INTEGER_DTYPES = ("int8", "uint8", "int16")


def sidecar(artifact_path: str | Path) -> Path:
    return Path(str(artifact_path) + SUFFIX)


def write(artifact_path: str | Path, inputs: list[dict | None], outputs: list[dict | None]) -> Path:
    path = sidecar(artifact_path)
    path.write_text(json.dumps({"inputs": inputs, "outputs": outputs}, indent=2) + "\n")
    return path


def read(artifact_path: str | Path) -> dict | None:
    """The sidecar of `artifact_path`, or None; a damaged one is a BadInput naming it."""
    path = sidecar(artifact_path)
    if not path.is_file():
        return None
    with reading(path, "an integer-I/O sidecar (JSON)", fix="remove it, or convert again with --int8-io"):
        doc = json.loads(path.read_text(encoding="utf-8"))
        ok = isinstance(doc, dict) and all(isinstance(doc.get(k), list) for k in ("inputs", "outputs"))
        ok = ok and all(e is None or (isinstance(e, dict) and isinstance(e.get("scale"), (int, float))
                                      and isinstance(e.get("zero_point"), int) and e.get("dtype") in INTEGER_DTYPES)
                        for k in ("inputs", "outputs") for e in doc[k])
    if not ok:
        raise BadInput(f"{path} is not an integer-I/O sidecar: it needs 'inputs' and 'outputs' lists of "
                       "{name, dtype, scale, zero_point} or null", fix="remove it, or convert again with --int8-io")
    return doc


def quantize(x: np.ndarray, scale: float, zero_point: int, dtype) -> np.ndarray:
    """Float → integer with the model's own parameters (round to nearest, saturate)."""
    info = np.iinfo(dtype)
    return np.clip(np.round(x / scale) + zero_point, info.min, info.max).astype(dtype)


def dequantize(y: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    return (y.astype(np.float32) - zero_point) * np.float32(scale)
