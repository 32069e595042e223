"""What the driver does with each trial's result: a short ordered list of named steps.

As TVM MetaSchedule's `measure_callback/` does, each side effect of a result is a step with one
job, and the driver (`search/driver.py`) runs its steps in order for every result it hears:

1. `StoreRecord`: write the trial's record; once written, keep it and announce it (`on_result`);
2. `FeedPruning`: a correct trial's round values join the pruning history (`PruneHistory`);
3. `FeedCostModel`: the cost model hears the candidate's result (with `--cost-model` only);
4. `TellOptuna`: the sampler hears the result (`tell`);
5. `LearnFailures`: the learned failures hear it (a new failure may become a rule).

`tell` and `replay_args` are how a result is told to Optuna, live or replayed on resume.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

import optuna

from tuner.search.cost_model import CostRanker
from tuner.search.objectives import LATENCY_ONLY, objective_values
from tuner.search.priors import LearnedFailures
from tuner.storage import Store, StudyInfo, TrialRecord
from tuner.trial import Candidate, Measurement, PruneHistory, Status

__all__ = ["FeedCostModel", "FeedPruning", "LearnFailures", "ResultStep", "StoreRecord", "TellOptuna", "TrialResult",
           "replay_args", "tell"]


@dataclass(frozen=True)
class TrialResult:
    """One trial's result as the driver heard it: its study, Optuna trial, candidate and record."""

    study: StudyInfo
    trial: Any                    # the optuna trial it was asked as
    candidate: Candidate
    record: TrialRecord

    @property
    def measurement(self) -> Measurement:
        return self.record.measurement


class ResultStep(Protocol):
    """One side effect of a trial's result; the driver calls each step once per result, in order."""

    def __call__(self, result: TrialResult) -> None: ...


@dataclass(frozen=True)
class StoreRecord:
    """Write the record; only a record the store took (`Store.record_trial` True) is kept in
    `records` (candidate key -> record) and announced to `on_result`."""

    store: Store
    records: dict[str, TrialRecord]
    on_result: Callable[[TrialRecord], None]

    def __call__(self, result: TrialResult) -> None:
        if self.store.record_trial(result.study.id, result.record):
            self.records[result.candidate.key] = result.record
            self.on_result(result.record)


@dataclass(frozen=True)
class FeedPruning:
    """A correct trial's intermediate values join the history later trials are pruned against."""

    pruning: PruneHistory

    def __call__(self, result: TrialResult) -> None:
        if result.measurement.ok:
            self.pruning.add(result.measurement.intermediate)


@dataclass(frozen=True)
class FeedCostModel:
    """The cost model learns from every result, failures included (`CostRanker.heard`)."""

    ranker: CostRanker

    def __call__(self, result: TrialResult) -> None:
        self.ranker.heard(result.candidate, result.measurement)


@dataclass(frozen=True)
class TellOptuna:
    """The sampler hears the result (`tell`)."""

    study: optuna.Study
    objectives: tuple[str, ...]

    def __call__(self, result: TrialResult) -> None:
        tell(self.study, result.trial, result.measurement, self.objectives)


@dataclass(frozen=True)
class LearnFailures:
    """The learned failures hear the result (`LearnedFailures.heard`)."""

    failures: LearnedFailures

    def __call__(self, result: TrialResult) -> None:
        self.failures.heard(result.measurement)


def tell(study: optuna.Study, trial: Any, measurement: Measurement,
         objectives: tuple[str, ...] = LATENCY_ONLY) -> None:
    """Tell Optuna a result. A pruned trial reports its step values first, so Optuna keeps its
    last one as its value and TPE ranks it among the pruned by how far it got and how it did
    (latency alone: Optuna takes no intermediate values in a study of several objectives)."""
    if measurement.status is Status.PRUNED and objectives == LATENCY_ONLY:
        for step, value in measurement.steps.items():
            trial.report(value, step)
    study.tell(trial, **_tell_args(measurement, objectives))


def _tell_args(measurement: Measurement, objectives: tuple[str, ...] = LATENCY_ONLY) -> dict[str, Any]:
    """Arguments for `study.tell`: the paired ratio (`Measurement.objective`), or with other
    `objectives` each of their values (`tuner.search.objectives`), or a failed trial."""
    values = (measurement.objective if objectives == LATENCY_ONLY
              else objective_values(measurement, objectives))
    if values is not None:
        return {"state": optuna.trial.TrialState.COMPLETE, "values": values}
    if measurement.status is Status.PRUNED:
        return {"state": optuna.trial.TrialState.PRUNED}
    return {"state": optuna.trial.TrialState.FAIL}


def replay_args(measurement: Measurement, objectives: tuple[str, ...] = LATENCY_ONLY) -> dict[str, Any]:
    """Arguments for `optuna.trial.create_trial` (which spells `value` for one objective, not `values`)."""
    args = _tell_args(measurement, objectives)
    if "values" in args and objectives == LATENCY_ONLY:
        args["value"] = args.pop("values")
    if measurement.status is Status.PRUNED and objectives == LATENCY_ONLY:
        args["intermediate_values"] = measurement.steps
    return args
