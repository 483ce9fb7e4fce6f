"""What a run's artifacts are judged against: the `Reference` seam.

A run computes its reference once, from the source, and judges every artifact against it, whether the run
built the artifact or was given it. Two kinds, chosen by what the source's format is judged by
(`edgekit.core.formats.Format.judged_by`):

- samples (`SampleReference`): the source's outputs on the verification samples; an artifact is run on the
  same samples in its runtime and compared output by output, by the metrics that fit each output's kind
  (edgekit.core.verify.compare), at a second size of its dynamic dimensions too (edgekit.engine.sizes).
- tokens (`edgekit.engine.lm_job.TokenReference`): a decoder LM's logits and greedy tokens on held-out windows
  of text; an artifact is run token by token with its cache and judged by token agreement, perplexity and
  generation (edgekit.core.lm_verify).

Each kind gives its own thresholds for a precision and the words the progress line says.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable, Protocol

from edgekit.calibration.data import SampleSet
from edgekit.core.artifact import ModelArtifact
from edgekit.core.source import Source
from edgekit.core.verify import THRESHOLDS, Verdict, applicable_thresholds, compare
from edgekit.engine.build import Progress
from edgekit.engine.isolation import run_isolated
from edgekit.engine.sizes import verify_second_size

# (artifact, samples) → (its outputs, its inspection): how a run gets an artifact's outputs (a job keeps them)
Runner = Callable[[ModelArtifact, SampleSet], tuple]


class Reference(Protocol):
    """What every artifact of one run is judged against, computed once from the source."""

    @property
    def what(self) -> str:
        """What an artifact is run on, for the progress line ("on 64 samples")."""

    def thresholds(self, precision: str, asked: dict) -> dict:
        """edgekit's thresholds at `precision` for this kind, the user's (`asked`) on top."""

    def unnamed_precision(self, inspection) -> str:
        """The precision of a given artifact whose file name does not say it, from its `inspection`."""

    def judge(self, artifact: ModelArtifact, thresholds: dict, asked: dict, tell: Progress) -> Verdict:
        """The artifact run in its runtime (loading only what it declares it needs) and judged."""

    def run_by(self, runner: Runner) -> "Reference":
        """This reference, running an artifact on samples through `runner` where it runs it on samples."""


def verify(reference: Reference, artifact: ModelArtifact, target, thresholds: dict, asked: dict, say: Progress) -> Verdict:
    """`reference.judge` of the artifact `target` made or was given, its start and its verdict said as progress."""
    tell = lambda msg: say(f"{target.name}: {msg}")  # noqa: E731
    tell(f"verifying in {target.runtime} {reference.what}")
    started = time.perf_counter()
    verdict = reference.judge(artifact, thresholds, asked, tell)
    tell(f"{verdict.status} ({time.perf_counter() - started:.1f} s to verify)")
    return verdict


def _run(artifact: ModelArtifact, samples: SampleSet) -> tuple:
    return run_isolated(artifact, samples.inputs, inspect=True)


def cached_runner() -> Runner:
    """A Runner that runs each artifact on each set of samples once (an `auto` candidate verified on the held-out
    samples the run also verifies on is not run again)."""
    ran: dict = {}

    def run(artifact: ModelArtifact, samples: SampleSet) -> tuple:
        key = (artifact.path, id(samples))
        if key not in ran:
            ran[key] = _run(artifact, samples)
        return ran[key]

    return run


@dataclass(frozen=True)
class SampleReference:
    """The source's `outputs` on the verification `samples`, judged by the metrics of each output's kind (`kinds`:
    the user's --output-kind); `runner` runs an artifact on samples (a job's keeps each run once)."""

    source: Source
    samples: SampleSet
    outputs: list
    kinds: dict = field(default_factory=dict)
    runner: Runner = _run

    @property
    def what(self) -> str:
        """"on N samples"."""
        return f"on {len(self.samples)} samples"

    def thresholds(self, precision: str, asked: dict) -> dict:
        """THRESHOLDS at `precision`, the user's on top."""
        return {**THRESHOLDS.get(precision, {}), **asked}

    def unnamed_precision(self, inspection) -> str:
        """What its weights look like (int8, fp16 or fp32)."""
        return inspection.precision

    def run_by(self, runner: Runner) -> "SampleReference":
        """This reference with `runner`."""
        return replace(self, runner=runner)

    def judge(self, artifact: ModelArtifact, thresholds: dict, asked: dict, tell: Progress) -> Verdict:
        """The artifact's outputs compared with the source's under `thresholds` as they apply to what it is
        (edgekit.core.verify.applicable_thresholds: an a16w8 or by-design weight-only artifact is held to its int8
        weights; `asked` are the user's), then at a second size of its dynamic dimensions."""
        outputs, inspection = self.runner(artifact, self.samples)
        thresholds = applicable_thresholds(thresholds, asked, inspection, declared=bool(artifact.meta.kept_float))
        verdict = compare(self.outputs, outputs, thresholds, self.samples.labels, inspection, self.kinds)
        return verify_second_size(self.source, artifact, verdict, self.samples, self.outputs, thresholds, tell)
