"""The search driver: Optuna ask/tell over an Executor, every trial recorded.

The driver is the only writer during a search. Trial 0 is Inductor's defaults and the
built-in modes follow, then the warm starts (`tuner.search.priors`: stored best configs of this
workload elsewhere and of the nearest workloads here); a proposal holding a learned failure
is told failed, never measured; with `--cost-model` the proposal measured is the one a model
learned from the stored trials ranks first among several (`tuner.search.cost_model`); identical
candidates are measured once (after EXPLORE_AFTER
repeats in a row, a converged sampler's next proposals come from a random sampler, so the budget
goes to new candidates; MAX_DUPLICATE_ASKS in a row end the search as exhausted); `resume` replays the
stored trials of the last study into a fresh in-memory Optuna study. With a `Budget`, no trial
starts once a trial and the expected confirmation would not fit in the time left, and each trial
but the defaults' runs with a deadline that ends where the confirmation's time begins; one stopped
there is recorded as cancelled, never told to the sampler or the learned failures as its config's
failure (`tuner.search.budget`). Each trial carries the adaptive compile cap computed from the compile
times recorded so far (`tuner.trial.compile_cap`). An interrupt (Ctrl-C,
or SIGTERM turned into KeyboardInterrupt) stops the trials in flight, records them as
cancelled (never a result: resume measures them again) and raises SearchInterrupted.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import socket
from dataclasses import replace
from typing import Any, Callable, Iterator

import optuna

from tuner.errors import SpaceError, UsageError
from tuner.search.budget import Budget, Pace, cancelled_error, confirmation_s
from tuner.search.cost_model import PROPOSALS, CostRanker
from tuner.search.objectives import LATENCY_ONLY, front_finalists
from tuner.search.options import SearchInterrupted, SearchOptions, SearchOutcome, Target
from tuner.search.priors import LearnedFailures, first_candidates
from tuner.search.result_steps import (FeedCostModel, FeedPruning, LearnFailures, ResultStep, StoreRecord, TellOptuna,
                                       TrialResult, replay_args, tell)
from tuner.search.samplers import check_sampler, make_sampler
from tuner.search.verdict import pick_finalists
from tuner.storage import Store, StudyInfo, TrialRecord
from tuner.trial import Candidate, CompileCap, Measurement, PruneHistory, Status, TrialRequest, adaptive_cap
from tuner.version import __version__
from tuner.workers import Executor

MAX_DUPLICATE_ASKS = 200    # consecutive proposals already measured: the space is exhausted
# A sampler that has converged keeps proposing what was measured; after this many repeats in a
# row the next proposals are random, so the budget goes to new candidates, not to an early stop.
EXPLORE_AFTER = 10
CANCELLED_ERROR = ("cancelled: the search was interrupted (Ctrl-C or SIGTERM) while this trial ran; "
                   "`tuner search MODEL --resume` measures it again")


def open_study(job: SearchOptions, target: Target, store: Store, *, user: str) -> StudyInfo:
    """A new study, or with `resume` the last one for this workload and platform.
    UsageError, before anything is written, when `job.sampler` cannot search `target.space`."""
    check_sampler(job.sampler, target.space)
    store.ensure_platform(target.platform)
    store.ensure_workload(target.workload)
    if job.resume:
        study = store.last_study(target.workload.key, target.platform.key)
        if study is None:
            raise UsageError(f"no earlier search of {job.measure.model_path} on this platform to resume; "
                             f"run without --resume")
        if (study.objectives, study.prefer) != (job.objectives, job.preferred):
            raise UsageError(f"the study being resumed searched --objective {','.join(study.objectives)} "
                             f"--prefer {study.prefer}; resume with those, or run without --resume")
        return study
    return store.create_study(workload_key=target.workload.key, platform_key=target.platform.key,
                              space_hash=target.space.hash, sampler=job.sampler, seed=job.seed,
                              trials_requested=job.trials or 0, user=user, host=socket.gethostname(),
                              tuner_version=__version__, objectives=job.objectives, prefer=job.preferred)


class Driver:
    """One search: owns the Optuna study and the bookkeeping of what was measured. `on_start`
    hears each trial as it is submitted (number, knobs), `on_result` each as it is recorded.

    `spec` is the one MeasureSpec of the search on `target.platform`: every trial gets it, and
    the confirmation measures with it (`tune`). Each result goes through `steps`, in order.
    """

    def __init__(self, job: SearchOptions, target: Target, *, store: Store, executor: Executor,
                 on_result: Callable[[TrialRecord], None] | None = None,
                 on_start: Callable[[int, dict[str, Any]], None] | None = None):
        self.job, self.target, self.store, self.executor = job, target, store, executor
        self.spec = replace(job.measure, platform_key=target.platform.key)
        self.on_result = on_result or (lambda record: None)
        self.on_start = on_start or (lambda number, params: None)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        sampler = make_sampler(job.sampler, job.seed, target.space)
        self.objectives = job.objectives
        self.optuna = optuna.create_study(directions=["minimize"] * len(job.objectives), sampler=sampler)
        self.records: dict[str, TrialRecord] = {}         # candidate key -> recorded trial
        self.in_flight: dict[int, tuple[Any, Candidate]] = {}   # trial number -> (optuna trial, candidate)
        self.deadlines: dict[int, tuple[float, float]] = {}     # trial number -> (budget deadline, confirm_s then)
        self.cancelled: list[TrialRecord] = []            # stopped at the budget's deadline, or by an interrupt
        self.cut: list[int] = []                          # the trial numbers stopped at the budget's deadline
        self.next_number = 0
        self.budget: Budget | None = None                 # set by `run`
        self.pace = Pace()
        self._runtime_choices = runtime_counts(target.platform.device) if job.runtime_knobs else (0, 0)
        self.compile_cap: CompileCap | None = None        # the last cap handed to a trial
        self.failures = LearnedFailures(store, target.platform.key)
        self.seeds = target.space.seeds()
        self.warm_why: dict[str, str] = {}                # candidate key -> where its warm start came from
        self.ranker = CostRanker(target.workload, target.platform, target.space) if job.cost_model else None
        pruner = job.pruner if job.objectives == LATENCY_ONLY else "none"   # tuner.search.objectives: no pruning
        self.pruning = PruneHistory(pruner, min_rounds=self.spec.plan().min_rounds,
                                    exempt={target.space.candidate(p).key for p in self.seeds})
        # What each result does, in this order (tuner.search.result_steps).
        self.steps: tuple[ResultStep, ...] = (
            StoreRecord(store, self.records, self.on_result),
            FeedPruning(self.pruning),
            *((FeedCostModel(self.ranker),) if self.ranker is not None else ()),
            TellOptuna(self.optuna, self.objectives),
            LearnFailures(self.failures),
        )

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
                    params=params, distributions=space.distributions(params),
                    **replay_args(rec.measurement, self.objectives)))
            self.records[rec.candidate_key] = rec

    def run(self, study: StudyInfo, *, budget: Budget | None = None) -> SearchOutcome:
        """Measure until the study holds `job.trials` results (counting replayed ones; None: no
        count) or, with `budget`, until another trial would not fit in it (`tuner.search.budget`).

        On KeyboardInterrupt, stops the trials in flight (`Executor.cancel`), records each
        as cancelled and raises SearchInterrupted with what finished. A trial its budget deadline
        stopped (`_dispatch`) is recorded as cancelled too, and is in the outcome's `cancelled`.
        """
        if budget is not None:
            self.budget, self.pace = budget, Pace(clock=budget.clock)
        self.failures.refresh()
        if self.ranker is not None:
            self.ranker.load(self.store)
        target = self.target
        for first in first_candidates(self.store, target.workload, target.platform, target.space, self.seeds,
                                      warm=self.job.warm_start):
            key = target.space.candidate(first.params).key
            if first.why:
                self.warm_why[key] = first.why
            if key not in self.records:
                self.optuna.enqueue_trial(first.params, skip_if_exists=True)
        exhausted = False
        try:
            while self.job.trials is None or len(self.records) < self.job.trials:
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
            self._record_cancelled(study)
            raise SearchInterrupted(self._outcome(study))
        return self._outcome(study, exhausted=exhausted)

    def _outcome(self, study: StudyInfo, *, exhausted: bool = False) -> SearchOutcome:
        trials = tuple(sorted(self.records.values(), key=lambda r: r.number))
        warm = tuple((r.number, self.warm_why[r.candidate_key]) for r in trials if r.candidate_key in self.warm_why)
        cancelled = tuple(sorted(self.cancelled, key=lambda r: r.number))
        return SearchOutcome(study=study, trials=trials, exhausted=exhausted, cancelled=cancelled,
                             skipped=self.failures.skipped, warm_starts=warm,
                             budget=None if self.budget is None else self.budget.stop, cut=tuple(self.cut),
                             compile_cap=self.compile_cap)

    def _record_cancelled(self, study: StudyInfo) -> None:
        """Record every trial in flight as cancelled (their processes are stopped already)."""
        for number, (_, candidate) in sorted(self.in_flight.items()):
            self._cancel(study, number, candidate, CANCELLED_ERROR)
        self.in_flight.clear()

    def _cancel(self, study: StudyInfo, number: int, candidate: Candidate, error: str) -> None:
        """Record trial `number` as cancelled with `error`: no result, so a resumed study measures it again."""
        record = TrialRecord(number=number, candidate_key=candidate.key, params=candidate.as_dict(),
                             measurement=Measurement.failed(Status.CANCELLED, error),
                             finished_at=dt.datetime.now(dt.timezone.utc))
        if self.store.record_trial(study.id, record):
            self.cancelled.append(record)

    def _wanted(self) -> int:
        """How many more trials to submit now (0: none, the count or the budget is reached)."""
        counted = (self.executor.capacity if self.job.trials is None
                   else self.job.trials - len(self.records)) - self.executor.pending()
        if counted > 0 and self.budget is not None and not self.budget.allows(
                self.pace, confirm_s=self._confirm_s(), recorded=len(self.records)):
            return 0
        return counted

    def after_s(self) -> float:
        """What the search still needs after the selection run and the elimination: a claim run of
        three variants and the process stage (`confirmation_s` without finalists, less its run of two)."""
        median = self.pace.median_s()
        if median is None:
            return 0.0
        choices, knobs = self._runtime_choices
        return confirmation_s([], median, runtime_choices=choices, runtime_knobs=knobs) - median + median * 7 / 6

    def _confirm_s(self) -> float:
        """The confirmation's expected seconds after the trials recorded so far (`confirmation_s`)."""
        median = self.pace.median_s()
        if median is None:
            return 0.0
        trials = tuple(sorted(self.records.values(), key=lambda r: r.number))
        finalists = (pick_finalists(trials) if self.objectives == LATENCY_ONLY
                     else front_finalists(trials, self.objectives, self.job.preferred))
        choices, knobs = self._runtime_choices
        return confirmation_s(finalists, median, runtime_choices=choices, runtime_knobs=knobs)

    def _submit_next(self) -> bool:
        """Ask Optuna until it proposes something new; False when the space seems exhausted.
        With a cost model ready and no first candidate waiting, gather up to PROPOSALS new ones
        and measure the one it ranks best; the rest are told FAIL unmeasured (tuner.search.cost_model)."""
        in_flight_keys = {cand.key for _, cand in self.in_flight.values()}
        pool: list[tuple[Any, Candidate]] = []
        wanted = PROPOSALS if self._ranking() else 1
        repeats = 0
        while repeats < MAX_DUPLICATE_ASKS and len(pool) < wanted and not (pool and repeats >= EXPLORE_AFTER):
            with self._sampler(explore=repeats >= EXPLORE_AFTER):
                trial = self.optuna.ask()
                candidate = self.target.space.candidate(self.target.space.suggest(trial))
            repeats += 1
            known = self.records.get(candidate.key)
            if known is not None:
                tell(self.optuna, trial, known.measurement, self.objectives)
                continue
            if candidate.key in in_flight_keys or any(c.key == candidate.key for _, c in pool):
                self.optuna.tell(trial, state=optuna.trial.TrialState.PRUNED)
                continue
            if self.failures.skip(candidate):        # holds a learned failure: not measured
                self.optuna.tell(trial, state=optuna.trial.TrialState.FAIL)
                continue
            repeats -= 1
            pool.append((trial, candidate))
        if not pool:
            return False
        chosen = 0 if len(pool) == 1 else self.ranker.best([c for _, c in pool])  # type: ignore[union-attr]
        for index, (trial, _) in enumerate(pool):
            if index != chosen:
                self.optuna.tell(trial, state=optuna.trial.TrialState.FAIL)
        self._dispatch(*pool[chosen])
        return True

    def _ranking(self) -> bool:
        """Whether the next proposal is ranked: a cost model with enough examples, and no seed or
        warm start still waiting (those are measured in order, unranked)."""
        return (self.ranker is not None and self.ranker.ready
                and not self.optuna.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)))

    @contextlib.contextmanager
    def _sampler(self, *, explore: bool) -> Iterator[None]:
        """Within it, trials are asked and suggested by the search's sampler or, with `explore`,
        by a random one (seeded from the search's seed and the trial count, so a search stays
        reproducible)."""
        if not explore:
            yield
            return
        sampler, seed = self.optuna.sampler, self.job.seed
        # Same count as len(study.trials), without deep-copying every trial on each ask.
        explorer_seed = None if seed is None else seed * 100_003 + len(self.optuna.get_trials(deepcopy=False))
        self.optuna.sampler = optuna.samplers.RandomSampler(seed=explorer_seed)
        try:
            yield
        finally:
            self.optuna.sampler = sampler

    def _dispatch(self, trial: Any, candidate: Candidate) -> None:
        number = self.next_number
        self.next_number += 1
        self.in_flight[number] = (trial, candidate)
        # The adaptive compile cap (tuner.trial.compile_cap) from the compiles of the correct trials so far.
        self.compile_cap = adaptive_cap(r.measurement.compile_s for r in self.records.values()
                                        if r.measurement.status in (Status.OK, Status.PRUNED)
                                        and r.measurement.compile_s is not None)
        self.pace.submitted(number)
        spec = self.spec
        if self.budget is not None and not candidate.is_default:    # the defaults' trial always runs to its end
            confirm_s = self._confirm_s()
            deadline = self.budget.trial_deadline(confirm_s=confirm_s)
            if deadline < spec.timeout_s:
                spec = replace(spec, timeout_s=deadline)
                self.deadlines[number] = (deadline, confirm_s)
        self.executor.submit(TrialRequest(spec=spec, params=candidate.params, number=number,
                                          pruning=self.pruning.spec_for(candidate.key),
                                          compile_cap=self.compile_cap))
        self.on_start(number, candidate.as_dict())

    def _record(self, study: StudyInfo, request: TrialRequest, measurement: Measurement) -> None:
        """Run every one of `steps` (`tuner.search.result_steps`), in order, on the trial's result;
        a trial that timed out at its budget deadline is recorded as cancelled instead (no step
        hears it: it says nothing about its config), and the sampler is told it failed."""
        trial, candidate = self.in_flight.pop(request.number)
        deadline, confirm_s = self.deadlines.pop(request.number, (None, 0.0))
        ran_s = self.pace.finished(request.number)
        # Killed at the deadline (a timeout of its own, such as the compile cap's, comes back before it).
        if deadline is not None and measurement.status is Status.TIMEOUT and ran_s is not None and ran_s >= deadline:
            self.pace.took.pop()        # cut short: not what a trial takes here
            self.optuna.tell(trial, state=optuna.trial.TrialState.FAIL)
            self.cut.append(request.number)
            self._cancel(study, request.number, candidate,
                         cancelled_error(self.budget.seconds, ran_s, confirm_s))  # type: ignore[union-attr]
            return
        record = TrialRecord(number=request.number, candidate_key=candidate.key, params=candidate.as_dict(),
                             measurement=measurement, finished_at=dt.datetime.now(dt.timezone.utc))
        result = TrialResult(study=study, trial=trial, candidate=candidate, record=record)
        for step in self.steps:
            step(result)


def runtime_counts(device: str) -> tuple[int, int]:
    """(settings, knobs) of the runtime knobs the process stage can try here (`tuner.runtime.choices_here`)."""
    from tuner.runtime import choices_here

    settings, _ = choices_here(device)
    return len(settings), len({knob for knob, _ in settings})
