"""The search driver: Optuna ask/tell over an Executor, every trial recorded.

The driver is the only writer during a search. Trial 0 is Inductor's defaults and the
built-in modes follow; identical candidates are measured once; `resume` replays the
stored trials of the last study into a fresh in-memory Optuna study. An interrupt (Ctrl-C,
or SIGTERM turned into KeyboardInterrupt) stops the trials in flight, records them as
cancelled (never a result: resume measures them again) and raises SearchInterrupted.
"""
from __future__ import annotations

import datetime as dt
import socket
from dataclasses import dataclass, replace
from typing import Any, Callable

import optuna

from tuner.errors import SpaceError, UsageError
from tuner.memory_limit import MIN_MB, format_mb
from tuner.platform import Platform
from tuner.search_spaces import SearchSpace
from tuner.storage import Store
from tuner.storage.records import StudyInfo, TrialRecord
from tuner.trial import Candidate, MeasureSpec, Measurement, Status, TrialRequest
from tuner.version import __version__
from tuner.workers.executor import Executor
from tuner.workload import Workload

# TPE with constant_liar, so trials in flight at once are not proposed twice.
SAMPLERS: dict[str, Callable[[int | None], optuna.samplers.BaseSampler]] = {
    "tpe": lambda seed: optuna.samplers.TPESampler(seed=seed, constant_liar=True),
    "random": lambda seed: optuna.samplers.RandomSampler(seed=seed),
}
MAX_DUPLICATE_ASKS = 200    # consecutive proposals already measured: the space is exhausted
CANCELLED_ERROR = ("cancelled: the search was interrupted (Ctrl-C or SIGTERM) while this trial ran; "
                   "`tuner search MODEL --resume` measures it again")


@dataclass(frozen=True)
class SearchOptions:
    """What the user asked of one search (typed, not an option bag).

    `measure` is how every trial and the confirmation measure the model file; the search
    fills in the platform being tuned. `space` is a JSON search-space file (None: the
    built-in space for the model's device); `unsafe` adds the knobs that change numerics.
    Made with values the search cannot run, it raises UsageError naming the flag.
    """

    measure: MeasureSpec
    trials: int
    sampler: str = "tpe"
    seed: int = 0
    resume: bool = False
    rounds: int = 20              # paired rounds when confirming: half choose, half report
    space: str | None = None
    unsafe: bool = False

    def __post_init__(self) -> None:
        if self.trials < 1:
            raise UsageError(f"--trials must be at least 1, got {self.trials}")
        if self.rounds < 4:
            raise UsageError(f"--rounds must be at least 4 (half choose, half report), got {self.rounds}")
        if self.measure.repeat < 2:
            raise UsageError(f"--repeat must be at least 2 paired rounds, got {self.measure.repeat}")
        if self.sampler not in SAMPLERS:
            raise UsageError(f"unknown sampler {self.sampler!r}; choose one of: {', '.join(SAMPLERS)}")
        if self.measure.threads is not None and self.measure.threads < 1:
            raise UsageError(f"--threads must be at least 1, got {self.measure.threads}")
        cap = self.measure.memory_limit_mb
        if cap is not None and cap < MIN_MB:
            raise UsageError(f"--memory-limit {format_mb(cap)} is below {format_mb(MIN_MB)}, too little for a trial "
                             f"process to load torch and compile; give at least {format_mb(MIN_MB)}, e.g. 4G")


@dataclass(frozen=True)
class Target:
    """The workload and platform being tuned, and the space to tune in."""

    workload: Workload
    platform: Platform
    space: SearchSpace


@dataclass(frozen=True)
class SearchOutcome:
    """A study's results (replayed ones included, cancelled ones never), by number; the trials
    this run cancelled; whether the space ran out of new candidates first."""

    study: StudyInfo
    trials: tuple[TrialRecord, ...]
    exhausted: bool = False
    cancelled: tuple[TrialRecord, ...] = ()


class SearchInterrupted(KeyboardInterrupt):
    """The search stopped on an interrupt (Ctrl-C, or SIGTERM in the CLI). The trials in
    flight were stopped and recorded as cancelled; `outcome` holds what finished. With
    `confirming`, every trial had finished and the confirmation was stopped. A KeyboardInterrupt,
    so callers that do not know it still stop."""

    def __init__(self, outcome: SearchOutcome, *, confirming: bool = False):
        super().__init__("the search was interrupted")
        self.outcome = outcome
        self.confirming = confirming


def make_sampler(name: str, seed: int | None) -> optuna.samplers.BaseSampler:
    """The Optuna sampler `name` (a key of SAMPLERS; SearchOptions has checked it)."""
    return SAMPLERS[name](seed)


def open_study(job: SearchOptions, target: Target, store: Store, *, user: str) -> StudyInfo:
    """A new study, or with `resume` the last one for this workload and platform."""
    store.ensure_platform(target.platform)
    store.ensure_workload(target.workload)
    if job.resume:
        study = store.last_study(target.workload.key, target.platform.key)
        if study is None:
            raise UsageError(f"no earlier search of {job.measure.model_path} on this platform to resume; "
                             f"run without --resume")
        return study
    return store.create_study(workload_key=target.workload.key, platform_key=target.platform.key,
                              space_hash=target.space.hash, sampler=job.sampler, seed=job.seed,
                              trials_requested=job.trials, user=user, host=socket.gethostname(),
                              tuner_version=__version__)


class Driver:
    """One search: owns the Optuna study and the bookkeeping of what was measured."""

    def __init__(self, job: SearchOptions, target: Target, *, store: Store, executor: Executor,
                 on_result: Callable[[TrialRecord], None] | None = None):
        self.job, self.target, self.store, self.executor = job, target, store, executor
        self.spec = replace(job.measure, platform_key=target.platform.key)
        self.on_result = on_result or (lambda record: None)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.optuna = optuna.create_study(direction="minimize", sampler=make_sampler(job.sampler, job.seed))
        self.records: dict[str, TrialRecord] = {}         # candidate key -> recorded trial
        self.in_flight: dict[int, tuple[Any, Candidate]] = {}   # trial number -> (optuna trial, candidate)
        self.next_number = 0

    def replay(self, records: list[TrialRecord]) -> None:
        """Feed stored trials into the in-memory study (resume). A cancelled trial is no
        result: only its number is taken, and its candidate may be proposed again."""
        space = self.target.space
        for rec in records:
            self.next_number = max(self.next_number, rec.number + 1)
            if rec.measurement.status is Status.CANCELLED:
                continue
            try:
                params = space.replay_params(rec.params)
            except SpaceError:      # measured under another --space: it still counts, Optuna skips it
                params = None
            if params is not None:
                self.optuna.add_trial(optuna.trial.create_trial(
                    params=params, distributions=space.distributions(params), **_replay_args(rec.measurement)))
            self.records[rec.candidate_key] = rec

    def run(self, study: StudyInfo) -> SearchOutcome:
        """Measure until the study holds `job.trials` results (counting replayed ones).

        On KeyboardInterrupt, stops the trials in flight (`Executor.cancel`), records each
        as cancelled and raises SearchInterrupted with what finished.
        """
        for params in self.target.space.seeds():
            if self.target.space.candidate(params).key not in self.records:
                self.optuna.enqueue_trial(params, skip_if_exists=True)
        exhausted = False
        try:
            while len(self.records) < self.job.trials:
                while self.executor.pending() < self.executor.capacity and self._wanted() > 0:
                    if not self._submit_next():
                        exhausted = True
                        break
                if self.executor.pending() == 0:
                    break
                request, measurement = self.executor.next_result()
                self._record(study, request, measurement)
        except KeyboardInterrupt:
            self.executor.cancel()
            raise SearchInterrupted(self._outcome(study, cancelled=self._record_cancelled(study)))
        return self._outcome(study, exhausted=exhausted)

    def _outcome(self, study: StudyInfo, *, exhausted: bool = False,
                 cancelled: tuple[TrialRecord, ...] = ()) -> SearchOutcome:
        trials = tuple(sorted(self.records.values(), key=lambda r: r.number))
        return SearchOutcome(study=study, trials=trials, exhausted=exhausted, cancelled=cancelled)

    def _record_cancelled(self, study: StudyInfo) -> tuple[TrialRecord, ...]:
        """Record every trial in flight as cancelled (their processes are stopped already)."""
        now = dt.datetime.now(dt.timezone.utc)
        cancelled = []
        for number, (_, candidate) in sorted(self.in_flight.items()):
            record = TrialRecord(number=number, candidate_key=candidate.key, params=candidate.as_dict(),
                                 measurement=Measurement.failed(Status.CANCELLED, CANCELLED_ERROR),
                                 finished_at=now)
            if self.store.record_trial(study.id, record):
                cancelled.append(record)
        self.in_flight.clear()
        return tuple(cancelled)

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
        self.executor.submit(TrialRequest(spec=self.spec, params=candidate.params, number=number))

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
    """Arguments for `study.tell`: the paired ratio (`Measurement.objective`), or a failed trial."""
    if measurement.objective is not None:
        return {"state": optuna.trial.TrialState.COMPLETE, "values": measurement.objective}
    return {"state": optuna.trial.TrialState.FAIL}


def _replay_args(measurement: Measurement) -> dict[str, Any]:
    """Arguments for `optuna.trial.create_trial` (which spells `value`, not `values`)."""
    args = _tell_args(measurement)
    if "values" in args:
        args["value"] = args.pop("values")
    return args
