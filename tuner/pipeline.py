"""The whole `tuner search`: validate the model file, search, confirm, store the verdict.

Nothing is written before the model file has loaded and run in eager mode.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tuner.confirm import ConfirmResult
from tuner.errors import TunerError
from tuner.search import Driver, SearchJob, SearchOutcome, Target, open_study
from tuner.storage import Store
from tuner.storage.records import TrialRecord
from tuner.verdict import Verdict, best_configs, confirmation_request, decide, pick_finalists
from tuner.workers.executor import Executor


@dataclass(frozen=True)
class TuneResult:
    outcome: SearchOutcome
    verdict: Verdict | None       # None when no trial ran correctly
    stored: bool


def prepare_target(model_path: str, *, space_path: str | None = None, include_unsafe: bool = False,
                   threads: int | None = None, seed: int = 0) -> Target:
    """Load and check the model file, capture its graphs, and pick the space for its device.

    Raises ModelFileError (one line, names the fix) for every kind of bad model file.
    """
    import torch

    from tuner.modelfile import eager_reference, load_model_file
    from tuner.platform import current_platform
    from tuner.search_spaces import load_space
    from tuner.workload import capture_workload

    if threads:
        torch.set_num_threads(threads)
    loaded = load_model_file(model_path, seed=seed)
    eager_reference(loaded)
    workload = capture_workload(loaded, name=Path(model_path).stem)
    platform = current_platform(loaded.device, threads=threads or torch.get_num_threads())
    space = load_space(loaded.device, training=False, path=space_path, include_unsafe=include_unsafe)
    return Target(workload=workload, platform=platform, space=space)


def tune(job: SearchJob, target: Target, *, store: Store, executor: Executor, user: str,
         on_result: Callable[[TrialRecord], None] | None = None) -> TuneResult:
    """Search, then confirm the finalists against the default compile and store the verdict."""
    study = open_study(job, target, store, user=user)
    driver = Driver(job, target, store=store, executor=executor, on_result=on_result)
    if job.resume:
        driver.replay(store.trials(study.id))
    outcome = driver.run(study)
    finalists = pick_finalists(outcome.trials)
    if not any(r.measurement.ok for r in outcome.trials):
        return TuneResult(outcome=outcome, verdict=None, stored=False)
    request = confirmation_request(job.model_path, finalists, rounds=job.rounds, seed=job.seed,
                                   threads=job.threads, timeout_s=max(job.timeout_s * (len(finalists) + 1), 600),
                                   platform_key=target.platform.key)
    data, failure = executor.run_confirmation(request)
    if data is None:
        lines = failure.strip().splitlines()
        cause = lines[0] + (f" ({lines[-1].strip()})" if len(lines) > 1 else "")
        raise TunerError(f"confirmation run failed: {cause}; the trials are stored; "
                         f"rerun with --resume to try again")
    verdict = decide(ConfirmResult.from_json(data), finalists)
    stored = False
    for best in best_configs(verdict, workload=target.workload, platform=target.platform, study=study, user=user):
        stored = store.save_best(best) or stored
    return TuneResult(outcome=outcome, verdict=verdict, stored=stored)
