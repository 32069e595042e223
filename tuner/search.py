"""The search driver: Optuna ask/tell over an Executor, every trial recorded.

The driver is the only writer during a search. Trial 0 is Inductor's defaults and the
built-in modes follow; identical candidates are measured once; `resume` replays the
stored trials of the last study into a fresh in-memory Optuna study.
"""
from __future__ import annotations

import datetime as dt
import logging
import socket
from dataclasses import dataclass
from typing import Any, Callable

import optuna

import tuner
from tuner.errors import SpaceError, UsageError
from tuner.platform import Platform
from tuner.search_spaces import SearchSpace
from tuner.storage import Store
from tuner.storage.records import StudyInfo, TrialRecord
from tuner.trial import Candidate, Measurement, TrialRequest
from tuner.workers.executor import Executor
from tuner.workload import Workload

log = logging.getLogger("tuner.search")
SAMPLERS = ("tpe", "random")
MAX_DUPLICATE_ASKS = 200    # consecutive proposals already measured: the space is exhausted


@dataclass(frozen=True)
class SearchJob:
    """What the user asked for (typed, not an option bag)."""

    model_path: str
    trials: int
    seed: int = 0
    sampler: str = "tpe"
    timeout_s: float = 300.0
    resume: bool = False
    repeat: int = 20
    threads: int | None = None
    rounds: int = 15              # paired rounds when confirming finalists
    test_faults: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True)
class Target:
    """The workload and platform being tuned, and the space to tune in."""

    workload: Workload
    platform: Platform
    space: SearchSpace


@dataclass(frozen=True)
class SearchOutcome:
    study: StudyInfo
    trials: tuple[TrialRecord, ...]
    exhausted: bool = False


def make_sampler(name: str, seed: int | None) -> optuna.samplers.BaseSampler:
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, constant_liar=True)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise UsageError(f"unknown sampler {name!r}; choose one of: {', '.join(SAMPLERS)}")


def open_study(job: SearchJob, target: Target, store: Store, *, user: str) -> StudyInfo:
    """A new study, or with `resume` the last one for this workload and platform."""
    store.ensure_platform(target.platform)
    store.ensure_workload(target.workload)
    if job.resume:
        study = store.last_study(target.workload.key, target.platform.key)
        if study is None:
            raise UsageError(f"no earlier search of {job.model_path} on this platform to resume; "
                             f"run without --resume")
        return study
    return store.create_study(workload_key=target.workload.key, platform_key=target.platform.key,
                              space_hash=target.space.hash, sampler=job.sampler, seed=job.seed,
                              trials_requested=job.trials, user=user, host=socket.gethostname(),
                              tuner_version=tuner.__version__)


class Driver:
    """One search: owns the Optuna study and the bookkeeping of what was measured."""

    def __init__(self, job: SearchJob, target: Target, *, store: Store, executor: Executor,
                 on_result: Callable[[TrialRecord], None] | None = None):
        self.job, self.target, self.store, self.executor = job, target, store, executor
        self.on_result = on_result or (lambda record: None)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.optuna = optuna.create_study(direction="minimize", sampler=make_sampler(job.sampler, job.seed))
        self.records: dict[str, TrialRecord] = {}         # candidate key -> recorded trial
        self.in_flight: dict[int, tuple[Any, Candidate]] = {}   # trial number -> (optuna trial, candidate)
        self.next_number = 0

    def replay(self, records: list[TrialRecord]) -> None:
        """Feed stored trials into the in-memory study (resume)."""
        space = self.target.space
        for rec in records:
            try:
                params = space.replay_params(rec.params)
            except SpaceError:      # measured under another --space: it still counts, Optuna skips it
                params = None
            if params is not None:
                self.optuna.add_trial(optuna.trial.create_trial(
                    params=params, distributions=space.distributions(params), **_replay_args(rec.measurement)))
            self.records[rec.candidate_key] = rec
            self.next_number = max(self.next_number, rec.number + 1)

    def run(self, study: StudyInfo) -> SearchOutcome:
        """Measure until the study holds `job.trials` trials (counting replayed ones)."""
        for params in self.target.space.seeds():
            if self.target.space.candidate(params).key not in self.records:
                self.optuna.enqueue_trial(params, skip_if_exists=True)
        exhausted = False
        while len(self.records) < self.job.trials:
            while self.executor.pending() < self.executor.capacity and self._wanted() > 0:
                if not self._submit_next():
                    exhausted = True
                    break
            if self.executor.pending() == 0:
                break
            request, measurement = self.executor.next_result()
            self._record(study, request, measurement)
        return SearchOutcome(study=study, trials=tuple(sorted(self.records.values(), key=lambda r: r.number)),
                             exhausted=exhausted)

    def _wanted(self) -> int:
        return self.job.trials - len(self.records) - self.executor.pending()

    def _submit_next(self) -> bool:
        """Ask Optuna until it proposes something new; False when the space seems exhausted."""
        in_flight_keys = {cand.key for _, cand in self.in_flight.values()}
        for _ in range(MAX_DUPLICATE_ASKS):
            trial = self.optuna.ask()
            candidate = self.target.space.candidate(self.target.space.suggest(trial))
            known = self.records.get(candidate.key)
            if known is not None:
                self.optuna.tell(trial, **_tell_args(known.measurement))
                continue
            if candidate.key in in_flight_keys:
                self.optuna.tell(trial, state=optuna.trial.TrialState.PRUNED)
                continue
            self._dispatch(trial, candidate)
            return True
        return False

    def _dispatch(self, trial: Any, candidate: Candidate) -> None:
        number = self.next_number
        self.next_number += 1
        self.in_flight[number] = (trial, candidate)
        self.executor.submit(TrialRequest(
            model_path=self.job.model_path, params=candidate.params, number=number, seed=self.job.seed,
            threads=self.job.threads, repeat=self.job.repeat, timeout_s=self.job.timeout_s,
            fault=dict(self.job.test_faults).get(number), platform_key=self.target.platform.key))

    def _record(self, study: StudyInfo, request: TrialRequest, measurement: Measurement) -> None:
        trial, candidate = self.in_flight.pop(request.number)
        now = dt.datetime.now(dt.timezone.utc)
        record = TrialRecord(number=request.number, candidate_key=candidate.key, params=candidate.as_dict(),
                             measurement=measurement, finished_at=now)
        if self.store.record_trial(study.id, record):
            self.records[candidate.key] = record
            self.on_result(record)
        self.optuna.tell(trial, **_tell_args(measurement))


def _tell_args(measurement: Measurement) -> dict[str, Any]:
    """Arguments for `study.tell`: the median latency, or a failed trial."""
    if measurement.ok and measurement.latency_ms is not None:
        return {"state": optuna.trial.TrialState.COMPLETE, "values": measurement.latency_ms}
    return {"state": optuna.trial.TrialState.FAIL}


def _replay_args(measurement: Measurement) -> dict[str, Any]:
    """Arguments for `optuna.trial.create_trial` (which spells `value`, not `values`)."""
    args = _tell_args(measurement)
    if "values" in args:
        args["value"] = args.pop("values")
    return args
