"""What a search is asked and what it answers: the values that cross `tuner.search`'s face.

`SearchOptions` (what the user asked, checked on construction: UsageError names the flag) and
`Target` (the workload, platform and space being tuned) go in; `SearchOutcome` (the study's
recorded trials) comes out of the driver, or inside `SearchInterrupted` when an interrupt
stopped it. `run_search` (`search/pipeline.py`) owns them; the driver (`search/driver.py`) runs
one platform's trials with them.
"""
from __future__ import annotations

from dataclasses import dataclass

from tuner.errors import UsageError
from tuner.platform import Platform
from tuner.precision import check_tolerance
from tuner.search.budget import BudgetStop
from tuner.search.objectives import LATENCY_ONLY, check_objectives
from tuner.search.samplers import SAMPLERS
from tuner.search_spaces import SearchSpace
from tuner.storage import StudyInfo, TrialRecord
from tuner.trial import (MIN_CONFIRM_ROUNDS, MIN_INTERVAL_VALUES, MIN_MB, CompileCap, MeasureSpec, check_pruner,
                         format_mb)
from tuner.workload import Workload, check_mode

__all__ = ["SearchInterrupted", "SearchOptions", "SearchOutcome", "Target"]


@dataclass(frozen=True)
class SearchOptions:
    """What the user asked of one search (typed, not an option bag).

    `measure` is how every trial and the confirmation measure the model file; the search
    fills in the platform being tuned. `space` is a JSON search-space file (None: the
    built-in space for the model's device); `unsafe` adds the knobs that change numerics;
    `precision` (`--precision`) adds the precision knob over those modes (tuner.precision),
    which needs `measure.tolerance` (`--tolerance`).
    `objectives` (`--objective`, tuner.search.objectives) are what the study minimises; `prefer`
    (`--prefer`, None: the first objective) picks the operating point confirmed and stored.
    `trials` (`--trials`) is the study's total; None: as many as `budget_s` allows. `budget_s`
    (`--budget`, None: none) is the wall clock of the whole search, confirmation included
    (`tuner.search.budget`). `runtime_knobs` (default; `--no-runtime-knobs` False): after the
    confirmation, the process stage chooses runtime knobs and takes the stored claim in fresh
    processes (`tuner.search.process_stage`).
    Made with values the search cannot run, it raises UsageError naming the flag.
    """

    measure: MeasureSpec
    trials: int | None
    sampler: str = "tpe"
    seed: int = 0
    resume: bool = False
    rounds: int = 20              # paired rounds when confirming: half choose, half report
    space: str | None = None
    unsafe: bool = False
    warm_start: bool = True       # enqueue stored best configs after the seeds (tuner.search.priors)
    pruner: str = "median"        # tuner.trial.pruning.PRUNERS: stops clearly slow trials' rounds early
    precision: tuple[str, ...] = ()   # tuner.precision modes beside fp32 (--precision); () for fp32 only
    objectives: tuple[str, ...] = LATENCY_ONLY   # tuner.search.OBJECTIVES names (--objective)
    prefer: str | None = None     # one of `objectives` (--prefer); None: the first
    cost_model: bool = False      # rank PROPOSALS proposals with tuner.search.cost_model, measure the best
    budget_s: float | None = None     # --budget: stop handing out trials when the rest would not fit
    runtime_knobs: bool = True    # --no-runtime-knobs off: the process stage (tuner.search.process_stage)

    def __post_init__(self) -> None:
        if self.trials is None and self.budget_s is None:
            raise UsageError("a search needs --trials N, --budget DURATION or both; e.g. --trials 30 or --budget 20m")
        if self.trials is not None and self.trials < 1:
            raise UsageError(f"--trials must be at least 1, got {self.trials}")
        if self.budget_s is not None and not self.budget_s > 0:
            raise UsageError(f"--budget must be above zero, got {self.budget_s:g} s; e.g. --budget 20m")
        if self.rounds < MIN_CONFIRM_ROUNDS:
            raise UsageError(f"--rounds must be at least {MIN_CONFIRM_ROUNDS} (half choose, half report, and a 95% interval "
                             f"needs {MIN_INTERVAL_VALUES} rounds per half), got {self.rounds}")
        if self.measure.repeat < 2:
            raise UsageError(f"--repeat must be at least 2 paired rounds, got {self.measure.repeat}")
        if self.sampler not in SAMPLERS:
            raise UsageError(f"unknown sampler {self.sampler!r}; choose one of: {', '.join(SAMPLERS)}")
        check_pruner(self.pruner)
        if self.cost_model and self.sampler == "grid":
            raise UsageError("--cost-model ranks a sampler's proposals, but --sampler grid walks every point "
                             "in its own order; drop --cost-model or pick another --sampler")
        if self.cost_model and self.objectives != LATENCY_ONLY:
            raise UsageError("--cost-model predicts latency only, so it cannot rank for several --objective "
                             "values; drop --cost-model or search --objective latency")
        check_objectives(self.objectives, self.preferred, self.sampler)
        check_tolerance(self.precision, self.measure.tolerance)
        check_mode(self.measure.mode, self.precision)
        if self.measure.threads is not None and self.measure.threads < 1:
            raise UsageError(f"--threads must be at least 1, got {self.measure.threads}")
        cap = self.measure.memory_limit_mb
        if cap is not None and cap < MIN_MB:
            raise UsageError(f"--memory-limit {format_mb(cap)} is below {format_mb(MIN_MB)}, too little for a trial "
                             f"process to load torch and compile; give at least {format_mb(MIN_MB)}, e.g. 4G")

    @property
    def preferred(self) -> str:
        """The objective that picks the stored operating point (`prefer`, or the first objective)."""
        return self.prefer or self.objectives[0]


@dataclass(frozen=True)
class Target:
    """The workload and platform being tuned, and the space to tune in."""

    workload: Workload
    platform: Platform
    space: SearchSpace


@dataclass(frozen=True)
class SearchOutcome:
    """A study's results (replayed ones included, cancelled ones never), by number; the trials
    this run cancelled (in flight at an interrupt, or at their --budget deadline: each one's error
    says which); whether the space ran out of new candidates first."""

    study: StudyInfo
    trials: tuple[TrialRecord, ...]
    exhausted: bool = False
    cancelled: tuple[TrialRecord, ...] = ()
    skipped: int = 0              # proposals holding a learned failure, told failed unmeasured
    warm_starts: tuple[tuple[int, str], ...] = ()   # (trial number, where from) of the warm starts measured
    budget: BudgetStop | None = None          # when --budget stopped the trials (None: it did not, or none)
    cut: tuple[int, ...] = ()                 # trials stopped at their --budget deadline (among `cancelled`)
    compile_cap: CompileCap | None = None     # the last adaptive compile cap handed to a trial (None: none yet)


class SearchInterrupted(KeyboardInterrupt):
    """The search stopped on an interrupt (Ctrl-C, or SIGTERM in the CLI). The trials in
    flight were stopped and recorded as cancelled; `outcome` holds what finished. With
    `confirming`, every trial had finished and the confirmation was stopped. A KeyboardInterrupt,
    so callers that do not know it still stop."""

    def __init__(self, outcome: SearchOutcome, *, confirming: bool = False):
        super().__init__("the search was interrupted")
        self.outcome = outcome
        self.confirming = confirming
