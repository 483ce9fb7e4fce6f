"""Input and output signatures: names, shapes, dtypes, layout — the contract every runner follows."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from edgekit.core.errors import BadInput

_DTYPES = ("float32", "float16", "int8", "uint8", "int32", "int64", "bool")


@dataclass(frozen=True)
class TensorSpec:
    """One model input or output: a name, a static shape and a NumPy dtype name."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"

    def __post_init__(self):
        if not self.name:
            raise ValueError("a tensor needs a name")
        if any((not isinstance(d, int)) or d < 1 for d in self.shape):
            raise ValueError(f"{self.name}: every dimension must be a positive integer, got {self.shape}")
        if self.dtype not in _DTYPES:
            raise ValueError(f"{self.name}: unsupported dtype {self.dtype!r}; known: {', '.join(_DTYPES)}")

    def describe(self) -> str:
        """For messages: `x=1,3,224,224 (float32)` (close to, but not, the --input-shape syntax)."""
        return f"{self.name}={','.join(map(str, self.shape))} ({self.dtype})"


@dataclass(frozen=True)
class Signature:
    """The model's inputs in call order, and its outputs once known. `layout` is NCHW or NHWC."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...] = field(default=())
    layout: str = "NCHW"

    @property
    def input_names(self) -> tuple[str, ...]:
        """The inputs' names in call order, so samples keyed by name can be passed positionally."""
        return tuple(s.name for s in self.inputs)

    def describe(self) -> str:
        """The inputs only, each as TensorSpec.describe says it, space-separated; for messages."""
        return " ".join(s.describe() for s in self.inputs)

    def to_json(self) -> dict:
        """inputs and outputs as lists of {name, shape, dtype}, and layout; `from_json` reads it back."""
        return {
            "inputs": [{"name": s.name, "shape": list(s.shape), "dtype": s.dtype} for s in self.inputs],
            "outputs": [{"name": s.name, "shape": list(s.shape), "dtype": s.dtype} for s in self.outputs],
            "layout": self.layout,
        }

    @classmethod
    def from_json(cls, raw: dict) -> "Signature":
        """Inverse of `to_json`, each tensor validated again; missing outputs read as none, missing layout NCHW."""
        def specs(key):
            return tuple(TensorSpec(t["name"], tuple(t["shape"]), t["dtype"]) for t in raw.get(key, ()))

        return cls(specs("inputs"), specs("outputs"), layout=raw.get("layout", "NCHW"))


_SHAPE_RE = re.compile(r"^(?:(?P<name>[A-Za-z_][\w.]*)=)?(?P<dims>\d+(?:,\d+)*)(?::(?P<dtype>\w+))?$")


def parse_input_shapes(specs: list[str] | tuple[str, ...]) -> tuple[TensorSpec, ...]:
    """Parse `--input-shape` values: `NAME=1,3,224,224`, `1,3,224,224` or `NAME=1,16:int64`."""
    parsed = []
    for i, text in enumerate(specs):
        m = _SHAPE_RE.match(text.replace(" ", ""))
        if not m:
            raise BadInput(
                f"cannot read --input-shape {text!r}",
                fix="write it as NAME=1,3,224,224 (optionally :dtype, e.g. tokens=1,16:int64)",
            )
        dims = tuple(int(d) for d in m["dims"].split(","))
        try:
            parsed.append(TensorSpec(m["name"] or f"input_{i}", dims, m["dtype"] or "float32"))
        except ValueError as e:
            raise BadInput(f"--input-shape {text!r}: {e}") from None
    names = [s.name for s in parsed]
    if len(set(names)) != len(names):
        raise BadInput(f"--input-shape names repeat: {names}", fix="give each input once")
    return tuple(parsed)


def check_against(declared: tuple[TensorSpec, ...], model: Signature, *, source: str) -> None:
    """Raise BadInput when user-declared input specs do not fit the model's own signature."""
    if len(declared) != len(model.inputs):
        raise BadInput(
            f"{source} gives {len(declared)} input(s) but the model takes {len(model.inputs)}",
            fix=f"use the model's signature: {model.describe()}",
        )
    for given, want in zip(declared, model.inputs):
        if given.shape != want.shape:
            raise BadInput(
                f"input shape {given.describe()} does not fit the model: it takes {want.describe()}",
                fix=f"use --input-shape {want.name}={','.join(map(str, want.shape))}",
            )
