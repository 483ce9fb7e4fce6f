"""One model × target × precision of a check, as judged."""

from __future__ import annotations

from dataclasses import dataclass, field

from edgekit.core.quant import LayerOverride
from edgekit.core.search_record import SearchRecord
from edgekit.core.verify import Status


@dataclass(frozen=True)
class Case:
    """One model × target × precision of a check as judged against its budgets: what the report, the JUnit
    file and the baseline are made from. `metrics` is by output, as in a verdict."""

    model: str
    target: str
    precision: str
    status: Status
    reasons: tuple[str, ...]
    bytes: int
    metrics: dict
    task_accuracy: dict | None
    path: str
    seconds: float
    hashes: dict = field(default_factory=dict)  # artifact, model and calibration data sha256
    tool_versions: dict = field(default_factory=dict)
    changes: tuple[str, ...] = ()  # against the baseline, when there is one
    budget: dict = field(default_factory=dict)
    layers: tuple = ()  # LayerDrift, the layer losing the most first (int8 only)
    layers_note: str | None = None  # why there is no attribution, when one was asked for
    overrides: tuple[LayerOverride, ...] = ()  # the layers kept back from int8
    bias_correction: bool = False  # whether the int8 model's biases were corrected
    smooth_quant: bool = False  # whether its linears were smoothed
    int16_stem: bool = False  # whether its high-resolution activations were int16
    int16_activations: bool = False  # whether all its activations were int16
    search: SearchRecord | None = None  # the accuracy-aware search's record, when the case searched
    latency: dict | None = None  # host CPU latency at 1 thread, when the model has a latency budget

    @property
    def name(self) -> str:
        """The case's key in the baseline and its name in reports: `model target precision`."""
        return f"{self.model} {self.target} {self.precision}"

    def baseline_entry(self) -> dict:
        """What the baseline keeps of the case: only the first output's metrics, plus what seeds a later search."""
        return {"bytes": self.bytes, "metrics": self.metrics.get("output_0", {}),
                "task_accuracy": self.task_accuracy, "sha256": self.hashes, "tool_versions": self.tool_versions,
                "overrides": [o.to_json() for o in self.overrides], "bias_correction": self.bias_correction,
                "smooth_quant": self.smooth_quant, "int16_stem": self.int16_stem,
                "int16_activations": self.int16_activations}
