"""The whole `tuner search`, for the CLI and for Python: `run_search`.

    from tuner.search import Execution, MeasureSpec, SearchOptions, run_search
    results = run_search(SearchOptions(MeasureSpec("model.py"), trials=20), execution=Execution("local"))

Nothing is written before the model file has loaded and run in eager mode, except the configs
of the `@tuner.autotune` kernels its eager run launches (`tuner.kernels.discovery`). Then the store
is opened (a new database gets the current schema; a read-only one is refused before any
trial), the executor is built, and each platform is searched, confirmed and stored in turn.
What it takes and gives besides `Execution` and `SearchResult` are `tuner.search.options`' values.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

from tuner.errors import ModelFileError, TunerError, UsageError
from tuner.kernels import KernelLaunch, discover_kernels
from tuner.platform import Platform
from tuner.runtime import choices_here
from tuner.search.budget import Budget, elimination_s, share
from tuner.search.confirmation_retries import confirm_through, failure_line
from tuner.search.driver import Driver, open_study
from tuner.search.objectives import LATENCY_ONLY, front_finalists
from tuner.search.options import SearchInterrupted, SearchOptions, SearchOutcome, Target
from tuner.search.process_stage import CLAIM_ROUNDS, settle, stage_cap
from tuner.search.verdict import Verdict, best_configs, conclude, pick_finalists
from tuner.settings import Settings
from tuner.storage import Store, StudyInfo, TrialRecord, handed_on
from tuner.trial import ConfirmFailed, ConfirmRequest, ConfirmResult
from tuner.workers import Executor, get_executor

__all__ = ["Execution", "SearchEvents", "SearchResult", "open_for_search", "pick_platforms", "prepare_target",
           "run_search", "tune"]


@dataclass(frozen=True)
class Execution:
    """Where the trials run: `executor` "ray" (a local cluster started for the search, or the
    one at `address`) or "local" (plain processes on this machine), `workers` trials in
    flight at once, and `platform`: a platform key some Ray node advertises, "all" of the
    cluster's, or None for this machine's. `get_executor` checks the names and counts.
    `warm_processes` (default): spare trial processes, forked from a zygote that has imported
    torch and Inductor, take the trials (`workers/spares.py`, `workers/zygote.py`); False
    (`--cold-processes`): each trial process starts cold."""

    executor: str = "ray"
    workers: int = 1
    address: str | None = None
    platform: str | None = None
    warm_processes: bool = True

    def __post_init__(self) -> None:
        if self.executor == "local" and (self.address or self.platform):
            raise UsageError("--address and --platform need Ray; drop --executor local")


@dataclass(frozen=True)
class SearchResult:
    """One platform's search: what was tuned, its trials, and the confirmed verdict."""

    target: Target
    outcome: SearchOutcome
    verdict: Verdict | None       # None when no trial ran correctly (nothing was stored)
    stored: bool                  # whether a best config replaced what the store held


class SearchEvents(Protocol):
    """What a caller of `run_search` hears while it runs (the CLI draws its progress line and
    tables from it). Implement it, or subclass it and override what you need: the methods
    here do nothing.

    Order: `kernels_tuned` and `prepared` once; then for each platform `starting`, `searching`,
    `trial_started` when a trial is handed to the executor and `trial_done` when it is recorded
    (trials in flight at once interleave), `confirming` for each step after the trials, and
    `finished` once its verdict is stored.
    """

    def kernels_tuned(self, launches: tuple[KernelLaunch, ...]) -> None:
        """The `@tuner.autotune` kernels the model's eager runs launched, one per key, with the
        config each got from the search's database or a search (empty: none). Comes first,
        before `prepared`; also, before the ModelFileError, when the model failed in eager mode."""

    def prepared(self, target: Target) -> None:
        """The model file loaded and ran in eager mode; its graphs and space are known."""

    def starting(self, target: Target, *, database: str) -> None:
        """The search for `target.platform` begins; `database` is the store's safe URL."""

    def searching(self, study: StudyInfo, *, done: int) -> None:
        """Its study is open; `done` of its trials are already stored (a resumed study)."""

    def trial_started(self, number: int, params: Mapping[str, Any]) -> None:
        """Trial `number` (its record's number) was submitted with `params`, its non-default knobs.
        A trial interrupted in flight, or stopped at its --budget deadline, gets no `trial_done`
        (it is in the outcome's `cancelled`)."""

    def trial_done(self, record: TrialRecord) -> None:
        """One trial was measured and recorded."""

    def confirming(self, line: str) -> None:
        """After the trials: one line per confirmation run and per step of the process stage (what it
        measures now), so a caller can say what the search is doing while no trial runs."""

    def finished(self, result: SearchResult) -> None:
        """The platform's search is over and its verdict stored."""


class _Quiet(SearchEvents):
    """Hears nothing: the events of a caller that passed none."""


class _Compatible:
    """A caller's events that lack a method added since (`confirming`): those calls go nowhere."""

    def __init__(self, events: Any) -> None:
        self._events = events

    def confirming(self, line: str) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._events, name)


def run_search(options: SearchOptions, *, execution: Execution = Execution(), settings: Settings | None = None,
               events: SearchEvents | None = None) -> list[SearchResult]:
    """Search, confirm and store the best config of `options.measure.model_path`: one result per platform.

    `settings` gives the database, the user recorded as provenance and the Ray address used
    when `execution` names none (default: `Settings.from_env()`). Raises ModelFileError for
    a bad model file (nothing written), UsageError for impossible options, StorageError
    (ReadOnlyDatabase, SchemaOutdated, ...) before any trial runs, StorageError when a
    write fails mid-search (a full disk: the trials recorded before stay; resume with
    `resume=True` once it is fixed), and TunerError when a confirmation run fails (the
    trials stay stored). On KeyboardInterrupt while a platform is searched or confirmed it
    raises SearchInterrupted (a KeyboardInterrupt) carrying what finished; the trials it
    stopped are recorded as cancelled. The executor, with every trial process it started,
    and the store are closed however it ends. `options.budget_s` counts from this call; the time
    left is shared equally by the platforms still to search.
    """
    began = time.monotonic()
    settings = settings or Settings.from_env()
    events = events or _Quiet()
    if not hasattr(events, "confirming"):       # a caller's events written before `confirming` existed
        events = _Compatible(events)
    measure = options.measure
    target = _prepare_with_kernels(options, settings.db_url, events)
    events.prepared(target)
    # Absolute: trial processes run in their own scratch folders (and Ray nodes elsewhere).
    # kernel_db: the trials' @tuner.autotune kernels hit the configs stored while preparing; it
    # travels in task arguments and job files, so without its password (`handed_on`).
    with handed_on(settings.db_url) as kernel_db, open_for_search(settings.db_url) as store:
        options = replace(options, measure=replace(measure, kernel_db=kernel_db,
                                                   model_path=str(Path(measure.model_path).expanduser().resolve())))
        executor = get_executor(execution.executor, workers=execution.workers,
                                address=execution.address or settings.ray_address,
                                platform_key=target.platform.key, device=target.platform.device,
                                warm=execution.warm_processes)
        try:
            results = []
            platforms = pick_platforms(execution.platform, executor, target)
            for n, platform in enumerate(platforms):
                job = replace(options, budget_s=share(options.budget_s, began, len(platforms) - n))
                results.append(tune(job, replace(target, platform=platform), store=store,
                                    executor=executor, user=settings.user, events=events))
                events.finished(results[-1])
            return results
        finally:
            executor.close()


def _prepare_with_kernels(options: SearchOptions, db_url: str, events: SearchEvents) -> Target:
    """`prepare_target`, while the model's `@tuner.autotune` kernels use the search's database
    (a hit launches the stored config; a miss searches and stores it), then `kernels_tuned`."""
    measure = options.measure
    with discover_kernels(db_url) as log:
        try:
            target = prepare_target(measure.model_path, space_path=options.space, include_unsafe=options.unsafe,
                                    threads=measure.threads, seed=measure.seed, precision=options.precision,
                                    mode=measure.mode, shape=measure.shape)
        except ModelFileError:
            if log.launches():      # a kernel that could not be tuned fails the model's eager run
                events.kernels_tuned(log.launches())
            raise
    events.kernels_tuned(log.launches())
    return target


def prepare_target(model_path: str, *, space_path: str | None = None, include_unsafe: bool = False,
                   threads: int | None = None, seed: int = 0, precision: tuple[str, ...] = (),
                   mode: str = "inference", shape: tuple[tuple[str, int], ...] = ()) -> Target:
    """Load and check the model file, capture its graphs, and pick the space for its device.

    With `threads`, sets torch's thread count in this process (it is part of a CPU platform).
    `precision` (`--precision` modes) adds the precision knob to the space (`load_space`).
    `mode` "train" checks an eager training step instead (`tuner.workload.check_training`),
    captures the graphs of a training step and drops the knobs unsafe for training (freezing).
    `shape` (one `--shapes` bucket) sizes the inputs (`get_inputs(**dict(shape))`) and names the
    workload `stem[batch=8]`. Raises ModelFileError (one line, names the fix) for every kind of bad model file.
    """
    import torch

    from tuner.platform import current_platform
    from tuner.search_spaces import load_space
    from tuner.workload import (TRAIN, capture_workload, check_training, eager_reference, load_model_file,
                                loss_call, workload_name)

    if threads:
        torch.set_num_threads(threads)
    loaded = load_model_file(model_path, seed=seed, shape=shape)
    training = mode == TRAIN
    if training:    # the model is only called through get_loss, which may take inputs it does not
        check_training(loaded)
    else:
        eager_reference(loaded)
    name = workload_name(model_path, shape)   # one workload per bucket
    workload = capture_workload(loaded, name=name, grad=training,
                                call=loss_call(loaded) if training else None)
    platform = current_platform(loaded.device, threads=threads or torch.get_num_threads())
    space = load_space(loaded.device, training=training, path=space_path, include_unsafe=include_unsafe,
                       precision=precision)
    return Target(workload=workload, platform=platform, space=space)


def open_for_search(url: str) -> Store:
    """The store a search writes: a new database gets the current schema first; an existing
    one must be at it (SchemaOutdated otherwise, never migrated implicitly) and writable
    (ReadOnlyDatabase otherwise), so a read-only role stops here, before any trial."""
    from tuner.storage import ensure_schema

    ensure_schema(url)
    store = Store.open(url)
    try:
        store.check_writable()
    except BaseException:
        store.close()
        raise
    return store


def pick_platforms(wanted: str | None, executor: Executor, target: Target) -> list[Platform]:
    """The platforms to tune for: this machine's (`wanted` None), the key `wanted` names, or "all".

    Raises UsageError when the executor runs everything on this machine, when no node
    advertises a wanted key, or when a platform's device is not the model's.
    """
    if not wanted:
        return [target.platform]
    present = executor.platforms()
    if present is None:
        raise UsageError("--platform needs Ray: add --executor ray (or --address ADDRESS)")
    from tuner.workers import describe_platform

    keys = sorted(present) if wanted == "all" else [wanted]
    missing = [k for k in keys if k not in present and k != target.platform.key]
    if missing or not keys:
        raise UsageError(f"no Ray node advertises platform {', '.join(missing) or wanted}; "
                         f"platforms present: {', '.join(sorted(present)) or 'none'}")
    platforms = [target.platform if k == target.platform.key else describe_platform(k) for k in keys]
    for platform in platforms:
        if platform.device != target.platform.device:
            raise UsageError(f"platform {platform.key} is a {platform.device} platform but the model runs on "
                             f"{target.platform.device}; pick a {target.platform.device} platform or change DEVICE")
    return platforms


def tune(job: SearchOptions, target: Target, *, store: Store, executor: Executor, user: str,
         events: SearchEvents) -> SearchResult:
    """Search for `target.platform`, confirm the finalists against the default compile, run the
    process stage (`tuner.search.process_stage`: runtime knobs, then the claim in fresh processes;
    not with `job.runtime_knobs` off) and store the verdict (finalists from the Pareto front of
    `job.objectives`, ranked by `job.preferred`, when the search minimised more than latency:
    tuner.search.objectives). A resumed
    study is looked up once, and its trials read once. With `job.budget_s`, the trials stop where
    the rest would not fit in it, confirmation included, and those in flight are stopped (recorded
    as cancelled) where the time left is what the confirmation needs (`tuner.search.budget`),
    counted from this call."""
    budget = None if job.budget_s is None else Budget(job.budget_s)
    events.starting(target, database=store.safe_url)
    study = open_study(job, target, store, user=user)
    replayed = store.trials(study.id) if job.resume else []
    driver = Driver(job, target, store=store, executor=executor, on_result=events.trial_done,
                    on_start=events.trial_started)
    driver.replay(replayed)
    events.searching(study, done=len(driver.records))
    trials_began = time.monotonic()
    outcome = driver.run(study, budget=budget)
    trials_s = time.monotonic() - trials_began
    # Several objectives (or one other than latency): the finalists come from the Pareto front.
    finalists = (pick_finalists(outcome.trials) if job.objectives == LATENCY_ONLY
                 else front_finalists(outcome.trials, job.objectives, job.preferred))
    if not any(r.measurement.ok for r in outcome.trials):
        return SearchResult(target=target, outcome=outcome, verdict=None, stored=False)
    # The trials' spec, its deadline stretched to cover a whole confirmation run (several variants, not one).
    spec = replace(driver.spec, timeout_s=max(driver.spec.timeout_s * (len(finalists) + 3), 600))
    try:
        verdict = conclude(lambda request: _confirm(executor, request, events), spec, finalists, rounds=job.rounds,
                           in_order=job.preferred != "latency", eliminate_knobs=_time_for(budget, driver))
        if job.runtime_knobs:
            trial_s = driver.pace.median_s()
            cap = stage_cap(trials_s, None if budget is None or trial_s is None else budget.left() - CLAIM_ROUNDS * trial_s)
            choices, left_out = choices_here(target.platform.device)
            verdict = verdict.with_process(settle(
                executor.run_process, driver.spec, verdict.compile_params, choices, seed=driver.spec.seed,
                notes=[f"runtime knob {note}" for note in left_out], time_cap_s=cap,
                progress=lambda line: events.confirming(f"process stage: {line}")))
    except KeyboardInterrupt:
        raise SearchInterrupted(outcome, confirming=True)
    stored = False
    for best in best_configs(verdict, workload=target.workload, platform=target.platform, study=study, user=user):
        # --unsafe put knobs that change numerics in the space: lookup applies the row only on opt-in
        stored = store.save_best(replace(best, unsafe=job.unsafe)) or stored
    return SearchResult(target=target, outcome=outcome, verdict=verdict, stored=stored)


def _time_for(budget: Budget | None, driver: Driver) -> Callable[[int], bool]:
    """Whether the backward elimination of a config of so many knobs fits in what is left of `budget`,
    after the claim run and the process stage it leaves room for (always, without a budget)."""
    def fits(knobs: int) -> bool:
        trial_s = driver.pace.median_s()
        return budget is None or trial_s is None or budget.left() >= elimination_s(knobs, trial_s) + driver.after_s()

    return fits


def _confirm(executor: Executor, request: ConfirmRequest, events: SearchEvents | None = None) -> ConfirmResult:
    """One confirmation on `executor`, measured again without a finalist that crashed it
    (`confirm_through`); TunerError (naming --resume) when it failed for another reason."""
    if events is not None:
        events.confirming(f"confirming: the {request.stage} run, {len(request.variants)} variants in one process "
                          f"({request.rounds} rounds, up to {request.max_rounds or request.rounds} while undecided)")
    confirmed = confirm_through(executor.run_confirmation, request)
    if isinstance(confirmed, ConfirmFailed):
        raise TunerError(f"confirmation run failed: {failure_line(confirmed.error)}; the trials are stored; "
                         f"rerun with --resume to try again")
    return confirmed
