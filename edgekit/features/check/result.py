"""A check as one call and one value: `run_config` reads a config, runs it and compares it with (or
records) its baseline, as `edgekit check` does, and returns a `CheckResult` (the Python API's
`edgekit.check`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edgekit.core.results import finite
from edgekit.core.verify import Status
from edgekit.engine.cache import ArtifactCache
from edgekit.features.check.baseline import baseline_seeds, compare_baseline, write_baseline
from edgekit.features.check.case import Case
from edgekit.features.check.config import load_config
from edgekit.features.check.render import to_json, to_junit, to_markdown
from edgekit.features.check.run import run_checks
from edgekit.sources.loading import SourceOptions

ATTRIBUTIONS = ("failing", "all", "none")
EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class CheckResult:
    """Every model × target × precision of a check config, each a `Case` judged against its budgets, in
    the order `edgekit check` lists them."""

    cases: tuple[Case, ...]

    @property
    def passed(self) -> tuple[Case, ...]:
        """The cases that met every budget."""
        return tuple(c for c in self.cases if c.status == Status.PASS)

    @property
    def failed(self) -> tuple[Case, ...]:
        """The cases that failed verification or broke a budget, each with its `reasons` (empty when all passed)."""
        return tuple(c for c in self.cases if c.status == Status.FAIL)

    @property
    def ok(self) -> bool:
        """Whether every case passed (`edgekit check` exits 0 then, 1 otherwise)."""
        return not self.failed

    def to_json(self) -> dict:
        """The document `edgekit check --json` writes (schema `edgekit.check/1`; NaN and infinity as None)."""
        return finite(to_json(list(self.cases)))

    def to_junit(self) -> str:
        """JUnit XML, one test case per model × target × precision, as `--junit` writes it."""
        return to_junit(list(self.cases))

    def to_markdown(self) -> str:
        """The Markdown summary `--markdown` writes (and appends to $GITHUB_STEP_SUMMARY)."""
        return to_markdown(list(self.cases))


def run_config(config: str | Path, out: str | Path, *, models=None, jobs: int = 1, executor: str = "local",
               ray_address: str | None = None, attribution: str = "failing", baseline: str | Path | None = None,
               update_baseline: bool = False, trust: SourceOptions | None = None, cache: bool = False,
               progress=None) -> CheckResult:
    """Read the check config at `config`, convert and verify what it lists into `out`, judge every case.

    The baseline (`baseline`, else edgekit.baseline.json beside the config) seeds the searches and is
    compared with when it exists; with `update_baseline` this run's results are written to it instead.
    `trust` carries trust_pickle/trust_model_code (never read from the config); `cache` uses the artifact
    cache (edgekit.engine.cache); `progress` receives one line per step; `models`: the config as
    load_config read it, when the caller already did. Options are as checked by the caller.
    """
    models = models if models is not None else load_config(config)
    baseline = Path(baseline) if baseline is not None else Path(config).with_name("edgekit.baseline.json")
    seeds = {} if update_baseline else baseline_seeds(baseline)  # searches start where the baseline ended
    cases = run_checks(models, str(out), progress=progress, attribution=attribution, trust=trust, seeds=seeds,
                       cache=ArtifactCache() if cache else None, jobs=jobs, executor=executor,
                       ray_address=ray_address)
    if update_baseline:
        write_baseline(cases, baseline)
    elif baseline.is_file():
        cases = compare_baseline(cases, baseline)
    return CheckResult(tuple(cases))
