"""The record of an accuracy-aware int8 search (edgekit.engine.search), typed: why it stopped, each
step it took and what each kept layer or whole-model pass contributed. JSON only in a result's document,
the artifact cache and a check's baseline (`to_json` / `from_json`, the keys unchanged)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Mapping

from edgekit.core.quant import PASSES, LayerOverride


class StopReason(StrEnum):
    """Why a search stopped (a str, so the JSON keeps the word)."""

    MET = "met"  # every budget holds
    NEAR_TIES = "near-ties"  # only top-1 is missed, and every disagreeing sample is a near-tie
    NO_FALLBACK = "no-fallback"  # the backend cannot keep single layers back
    STEPS = "steps"  # the step limit was reached
    EXHAUSTED = "exhausted"  # no ranked layer is left to keep back


@dataclass(frozen=True)
class KeptLayer:
    """A layer the search kept back, and what that did: its bytes and float weight bytes added and the change of
    each budget metric (None where a metric has no value), at the step that kept it."""

    layer: str
    precision: str  # the fallback it was kept at (LayerOverride.precision)
    step: int
    bytes: int
    float_weight_bytes: int
    contribution: Mapping[str, float | None]

    def to_json(self) -> dict:
        """The fields by name."""
        return {"layer": self.layer, "precision": self.precision, "step": self.step, "bytes": self.bytes,
                "float_weight_bytes": self.float_weight_bytes, "contribution": dict(self.contribution)}

    @classmethod
    def from_json(cls, d: Mapping) -> "KeptLayer":
        """Inverse of `to_json`."""
        return cls(d["layer"], d["precision"], d["step"], d["bytes"], d["float_weight_bytes"], dict(d["contribution"]))


@dataclass(frozen=True)
class SearchStep:
    """One conversion of the search: what changed (a layer kept back, or a whole-model pass turned on),
    whether it was kept, and — when it was measured — the budget metrics, int8 share and size."""

    step: int
    layer: str | None
    precision: str | None
    change: str | None  # "layer", a PASSES name, or None for the first conversion
    accepted: bool
    note: str
    values: Mapping[str, float | None] | None = None
    int8_share: float | None = None
    bytes: int | None = None
    layers: tuple[Mapping, ...] | None = None  # the overrides of the spec measured
    seconds: float | None = None

    def to_json(self) -> dict:
        """The step's keys; the measured ones (values, int8_share, bytes, layers, seconds) only when it was measured."""
        out = {"step": self.step, "layer": self.layer, "precision": self.precision, "change": self.change,
               "accepted": self.accepted, "note": self.note}
        if self.values is not None:
            out.update(values=dict(self.values), int8_share=self.int8_share, bytes=self.bytes,
                       layers=list(self.layers or ()), seconds=self.seconds)
        return out

    @classmethod
    def from_json(cls, d: Mapping) -> "SearchStep":
        """Inverse of `to_json`; unknown keys are dropped, absent measured ones stay None."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: tuple(v) if k == "layers" else v for k, v in d.items() if k in known})


@dataclass(frozen=True)
class SearchRecord:
    """A whole search: its terms (budgets, min_int8_share, max_steps), why it stopped, the model it kept and
    every step; `seconds` is the search's wall time, `ranking_seconds` the part spent ranking layers."""

    budgets: Mapping[str, float]
    stopped: StopReason
    why: str
    conversions: int
    seconds: float
    rankings: int
    ranking_seconds: float
    min_int8_share: float
    max_steps: int
    values: Mapping[str, float | None]  # the budget metrics of the model kept
    int8_share: float
    bytes: int
    overrides: tuple[LayerOverride, ...]  # the layers kept back, as the QuantSpec of the model kept has them
    kept: tuple[KeptLayer, ...]  # the layers the search itself kept back, in the order it kept them
    steps: tuple[SearchStep, ...]
    passes: Mapping[str, bool] = field(default_factory=dict)  # PASSES name → on in the model kept
    contributions: Mapping[str, Mapping | None] = field(default_factory=dict)  # PASSES name → its metric gains
    samples: int | None = None  # the held-out samples it searched on
    note: str | None = None  # where its choice did not hold on the verification samples

    def __post_init__(self):
        object.__setattr__(self, "stopped", StopReason(self.stopped))

    def to_json(self) -> dict:
        """The fields by name, except passes and contributions: flattened to `<pass>` and `<pass>_contribution`."""
        out = {"budgets": dict(self.budgets), "stopped": self.stopped, "why": self.why, "conversions": self.conversions,
               "seconds": self.seconds, "rankings": self.rankings, "ranking_seconds": self.ranking_seconds,
               "min_int8_share": self.min_int8_share, "max_steps": self.max_steps, "values": dict(self.values),
               "int8_share": self.int8_share, "bytes": self.bytes, "overrides": [o.to_json() for o in self.overrides],
               "kept": [k.to_json() for k in self.kept], "steps": [s.to_json() for s in self.steps]}
        for name in PASSES:
            out[name] = self.passes.get(name, False)
            out[f"{name}_contribution"] = self.contributions.get(name)
        if self.samples is not None:
            out["samples"] = self.samples
        if self.note is not None:
            out["note"] = self.note
        return out

    @classmethod
    def from_json(cls, d: Mapping) -> "SearchRecord":
        """Inverse of `to_json`; a pass missing from `d` reads as off, with no contribution."""
        plain = {f.name for f in fields(cls)} - {"steps", "passes", "contributions", "overrides", "kept"}
        return cls(**{k: v for k, v in d.items() if k in plain}, overrides=tuple(LayerOverride(o["layer"], o["precision"]) for o in d.get("overrides", ())),
                   kept=tuple(KeptLayer.from_json(k) for k in d.get("kept", ())), steps=tuple(SearchStep.from_json(s) for s in d.get("steps", ())),
                   passes={p: d.get(p, False) for p in PASSES},
                   contributions={p: d.get(f"{p}_contribution") for p in PASSES})
