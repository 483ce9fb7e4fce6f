"""Per-layer drift: which layers of a quantized artifact lose the most signal — the ranking, shared by
the runtime children that trace a model and by attribution.

Each backend traces the quantized model and its float counterpart on the same inputs and reports,
for every op of the quantized model, its output tensor, its activation inputs, and the SQNR of
that output against the float model (float vs. dequantized):

    tflite  the LiteRT interpreter with every intermediate tensor kept, against the fp32 .tflite
            litert-torch makes from the same source (ops aligned in execution order)
    onnx    onnxruntime's QDQ debugging (qdq_loss_debug): activations matched by tensor name
            against the fp32 .onnx the int8 model was quantized from, plus each weight's SQNR
    pte     the PT2E-quantized graph the .pte is lowered from, node by node against the float
            exported program (XNNPACK runs the .pte as one delegate call, with no intermediates)

SQNR accumulates along the graph: every layer after a bad one looks bad too. So layers are ranked
by the SQNR they lose themselves — the worst SQNR among their inputs minus the SQNR of their
output — and the layer that breaks a model comes first. The model's inputs count as layers too
(their quantization, against the float input). No layer is credited with input quality above
INPUT_CAP_DB: 8-bit quantization keeps about 50 dB at best, and a float input (exact, 140 dB)
would otherwise make the first layer look like the worst. Names are the source model's module paths
where the backend keeps them (features.2), else the backend's own op names.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgekit.core.verify import sqnr_from_sums

CEILING_DB = 140.0  # what an exact match counts as (float32 noise is about 140 dB below the signal)
INPUT_CAP_DB = 60.0  # the most input SQNR a layer is credited with (int8 keeps ~6 dB per bit)
SHOWN = 5


@dataclass(frozen=True)
class Traced:
    """One op of the quantized model as a backend traced it."""

    layer: str  # the source model's layer (module path) where known, else the backend's op name
    op: str  # the backend's op type
    tensor: str  # key of its output in the SQNR table
    inputs: tuple[str, ...]  # keys of its activation inputs (not weights)
    weight_sqnr_db: float | None = None
    gain_db: float | None = None  # the outputs' SQNR gained with its layer alone kept float, where measured
    quantized: bool = True  # False: the op reads no quantized tensor (it runs float already), where the tracer knows


@dataclass(frozen=True)
class LayerDrift:
    """One ranked layer: the SQNR its output has (drift accumulated so far), the SQNR it loses itself, and
    where the backend measured it, what the model's outputs gain with the layer alone kept float (`gain_db`).
    The ranking orders by the measured gain where there is one, else by the loss."""

    layer: str
    op: str
    tensor: str
    sqnr_db: float  # output vs. the float model (accumulated drift)
    loss_db: float  # SQNR lost in this layer: worst input SQNR minus output SQNR
    weight_sqnr_db: float | None = None
    gain_db: float | None = None  # the outputs' SQNR gained with this layer alone kept float, where measured
    # False: the op runs float already in the quantized model, reading no quantized tensor; what it "loses" is its
    # inputs' error grown by its arithmetic (a product doubles it), and keeping it float changes nothing
    quantized: bool = True

    def to_json(self) -> dict:
        """Every field by name, dB rounded to 3 decimals; the module's `from_json` reads it back."""
        return {"layer": self.layer, "op": self.op, "tensor": self.tensor, "sqnr_db": round(self.sqnr_db, 3),
                "loss_db": round(self.loss_db, 3),
                "weight_sqnr_db": None if self.weight_sqnr_db is None else round(self.weight_sqnr_db, 3),
                "gain_db": None if self.gain_db is None else round(self.gain_db, 3), "quantized": self.quantized}

    def text(self) -> str:
        """One line for people: the layer, what it loses, its output SQNR (and its weights' when known), and
        what keeping it float gains the outputs where that was measured."""
        weights = f", weights {self.weight_sqnr_db:.1f} dB" if self.weight_sqnr_db is not None else ""
        gain = f"; kept float, the outputs gain {self.gain_db:+.2f} dB" if self.gain_db is not None else ""
        return f"{self.layer} ({self.op}): loses {self.loss_db:.1f} dB (output SQNR {self.sqnr_db:.1f} dB{weights}){gain}"


def sqnr_db(reference, actual) -> float:
    """The SQNR of `actual` against `reference` in dB (edgekit.core.verify.sqnr_from_sums), within ±CEILING_DB."""
    r = np.asarray(reference, dtype=np.float64).ravel()
    a = np.asarray(actual, dtype=np.float64).ravel()
    if r.shape != a.shape:
        raise ValueError(f"cannot compare tensors of {r.size} and {a.size} values")
    return sqnr_from_sums(float(np.sum(r ** 2)), float(np.sum((r - a) ** 2)), CEILING_DB)


class SqnrSums:
    """SQNR per key over many samples, from running sums (no sample's tensors are kept)."""

    def __init__(self):
        self._sums: dict[str, list[float]] = {}

    def add(self, key: str, reference, actual) -> None:
        """Accumulate one sample of `key`: the float `reference` and the quantized model's `actual`."""
        r = np.asarray(reference, dtype=np.float64)
        a = np.asarray(actual, dtype=np.float64)
        s = self._sums.setdefault(key, [0.0, 0.0])
        s[0] += float(np.sum(r ** 2))
        s[1] += float(np.sum((r - a) ** 2))

    def result(self) -> dict[str, float]:
        """{key: SQNR in dB} over every sample added, uncapped: None for an exact match, -inf for a zero reference."""
        return {key: sqnr_from_sums(signal, noise) for key, (signal, noise) in self._sums.items()}


def rank(traced: list[Traced], sqnr: dict[str, float]) -> list[LayerDrift]:
    """Every traced op with a known output SQNR: those whose gain was measured first, the largest gain first,
    then the rest, the one that loses the most first.

    `traced` is in execution order. An op whose output has no SQNR (no float counterpart was
    found) passes on the worst SQNR of its own inputs, so the op after it is still judged against
    what actually reached it. An exact match (SQNR None, as SqnrSums gives it) counts as CEILING_DB.
    """
    sqnr = {k: CEILING_DB if v is None else v for k, v in sqnr.items()}
    level: dict[str, float] = dict(sqnr)
    out = []
    for t in traced:
        known = [level[i] for i in t.inputs if i in level]
        before = min([*known, INPUT_CAP_DB])
        if t.tensor not in sqnr:
            if known:
                level[t.tensor] = min(known)
            continue
        out.append(LayerDrift(t.layer, t.op, t.tensor, sqnr[t.tensor], before - sqnr[t.tensor], t.weight_sqnr_db,
                              t.gain_db, t.quantized))
    return sorted(out, key=lambda d: (d.gain_db is None, -(d.gain_db or 0.0), -d.loss_db))


def to_json(layers: list[LayerDrift]) -> list[dict]:
    return [d.to_json() for d in layers]


def from_json(rows: list[dict]) -> list[LayerDrift]:
    return [LayerDrift(r["layer"], r["op"], r["tensor"], r["sqnr_db"], r["loss_db"], r.get("weight_sqnr_db"),
                       r.get("gain_db"), r.get("quantized", True)) for r in rows]


def module_path_from_location(location: str) -> str | None:
    """features.0 from a torch.export location such as
    '__main__.Net/torch.nn.modules.container.Sequential_features/torch.nn.modules.conv.Conv2d_0'."""
    parts = location.split("/")[1:]
    if not parts or not all("." in p.rpartition("_")[0] for p in parts):
        return None  # not a torch location (a TensorFlow op name, say)
    names = [p.rpartition("_")[2] for p in parts]
    return ".".join(names) if all(names) else None


def keras_layer(name: str, layers: set[str]) -> str | None:
    """The Keras layer an op belongs to, from its TensorFlow name
    ('StatefulPartitionedCall/digits_keras_1/conv1_1/BiasAdd' → 'conv1' when conv1 is a layer)."""
    for part in (p for chunk in name.split(";") for p in chunk.split("/")):
        if part in layers:
            return part
        stem, _, suffix = part.rpartition("_")
        if suffix.isdigit() and stem in layers:  # tf.function uniquifies scopes: conv1 → conv1_1
            return stem
    return None
