"""The Executor contract, run over every executor: local (spawned processes) and Ray.

Contract: every submitted request comes back from `next_result` exactly once, with a
Measurement; a crash is CRASHED, a hang past the deadline TIMEOUT, an exception
RUNTIME_ERROR, a good trial OK with a latency; no more than `capacity` trials run at once;
trials and the confirmation measure with the thread count of the platform they are stored for.
The faults are real (tests/models/faulty_mlp.py): they fire while Dynamo traces, before
Inductor compiles, so only the OK trials pay for a compile.
"""
from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest

from helpers.faults import faulty_model
from helpers import MODELS
from tuner.trial import EAGER, ConfirmRequest, ConfirmResult, MeasureSpec, Status, TrialRequest
from tuner.workers import Executor

TINY = str(MODELS / "tiny_mlp.py")
EXECUTORS = [pytest.param("local", id="local"), pytest.param("ray", id="ray", marks=pytest.mark.ray)]


@pytest.fixture(scope="module", params=EXECUTORS)
def executor(request: pytest.FixtureRequest) -> Iterator[Executor]:
    """A two-worker executor; the Ray one starts (and shuts down) its own local cluster."""
    if request.param == "local":
        from tuner.workers.local import LocalExecutor

        built: Executor = LocalExecutor(workers=2)
        yield built
        built.close()
        return
    from helpers.ray_cluster import auth_env
    from tuner.workers.ray_pool import RayExecutor

    ray_tmp = tempfile.mkdtemp(prefix="tuner-ray-", dir="/tmp")   # short: Ray's socket paths have a limit
    with pytest.MonkeyPatch.context() as env:
        for name, value in auth_env().items():   # never touch ~/.ray/auth_token
            env.setenv(name, value)
        env.setenv("RAY_TMPDIR", ray_tmp)         # the session's logs go away with the test
        env.delenv("RAY_ADDRESS", raising=False)
        built = RayExecutor(workers=2)
        try:
            yield built
        finally:
            built.close()
            shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of faulty_mlp.py copies, one per fault (faults.faulty_model)."""
    return tmp_path_factory.mktemp("faulty-models")


def trial(number: int, model: str = TINY, *, timeout_s: float = 120.0) -> TrialRequest:
    return TrialRequest(spec=MeasureSpec(model, warmup=1, repeat=3, timeout_s=timeout_s), params=(), number=number)


def drain(executor: Executor) -> dict[int, list]:
    """Every result still pending, by trial number (a list, so a duplicate would show)."""
    results: dict[int, list] = {}
    while executor.pending():
        request, measurement = executor.next_result()
        results.setdefault(request.number, []).append(measurement)
    return results


def test_each_request_comes_back_once_with_its_status(executor: Executor, models: Path) -> None:
    expected = {0: Status.OK, 1: Status.TIMEOUT, 2: Status.CRASHED, 3: Status.CRASHED, 4: Status.RUNTIME_ERROR}
    # The hang runs beside the real compile; the quick faults follow in the other slot.
    requests = [trial(0, timeout_s=300), trial(1, faulty_model(models, "hang"), timeout_s=6),
                trial(2, faulty_model(models, "abort")), trial(3, faulty_model(models, "exit")),
                trial(4, faulty_model(models, "raise"))]
    for request in requests:
        executor.submit(request)
    assert executor.pending() == len(requests)

    results = drain(executor)

    assert {n: [m.status for m in ms] for n, ms in results.items()} == {n: [s] for n, s in expected.items()}
    ok = results[0][0]
    assert ok.latency_ms and ok.latency_ms > 0 and ok.reps == 3 and ok.worker
    assert results[1][0].error.startswith("timeout")
    assert "SIGABRT" in results[2][0].error and "status 3" in results[3][0].error
    assert "injected fault" in results[4][0].error
    assert executor.pending() == 0
    with pytest.raises(LookupError):
        executor.next_result()


def test_no_more_than_capacity_trials_run_at_once(executor: Executor, models: Path) -> None:
    # Each hanging trial lasts its full deadline, so 2 * capacity of them take two rounds.
    deadline_s, count = 3.0, 2 * executor.capacity
    started = time.monotonic()
    hang = faulty_model(models, "hang")
    for number in range(count):
        executor.submit(trial(100 + number, hang, timeout_s=deadline_s))
    assert executor.pending() == count
    results = drain(executor)
    elapsed = time.monotonic() - started
    assert sorted(results) == list(range(100, 100 + count))
    assert all(len(ms) == 1 and ms[0].status is Status.TIMEOUT for ms in results.values())
    assert elapsed >= 2 * deadline_s, f"{count} trials of {deadline_s} s ended in {elapsed:.1f} s"


def test_trials_and_the_confirmation_measure_with_the_platforms_threads(executor: Executor) -> None:
    """With `threads` unset, the platform key records torch's default thread count in this (the
    driver's) process; a Ray task has OMP_NUM_THREADS=1, which its trial process must not inherit."""
    from tuner.platform import current_platform

    platform = current_platform("cpu")
    threads = int(dict(platform.hardware)["threads"])
    spec = MeasureSpec(TINY, warmup=1, repeat=3, timeout_s=300, platform_key=platform.key)
    executor.submit(TrialRequest(spec=spec, params=(), number=200))
    confirmed = executor.run_confirmation(ConfirmRequest(spec=spec, variants=((EAGER, None),), rounds=2,
                                                         samples_per_round=1))
    _, measured = executor.next_result()
    assert measured.ok and measured.threads == threads, measured
    assert isinstance(confirmed, ConfirmResult) and confirmed.get(EAGER).status is Status.OK, confirmed
    assert confirmed.threads == threads


def test_platforms_is_none_where_everything_runs_here(executor: Executor) -> None:
    """The local executor places nothing by platform; Ray's own cluster advertises this machine's."""
    from tuner.platform import current_platform

    present = executor.platforms()
    if type(executor).__name__ == "LocalExecutor":
        assert present is None
    else:
        assert present == {current_platform("cpu").key: 1}
