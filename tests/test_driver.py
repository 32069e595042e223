"""The search driver over a replay executor: ask/tell, dedupe, capacity and resume, no compiles."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuner.platform import Platform
from tuner.search import SearchOptions, Target
from tuner.search.driver import Driver, open_study
from tuner.search_spaces import load_space
from tuner.storage import Store, ensure_schema
from tuner.trial import MeasureSpec, Measurement, Status
from tuner.workers.replay import ReplayExecutor
from tuner.workload import GraphFingerprint, Workload

WORKLOAD = Workload(key="w" * 32, name="recorded", graphs=(GraphFingerprint("g" * 32, 0, 3, "[]", "graph"),))
PLATFORM = Platform(key="p" * 24, hardware_key="h" * 24, software_key="s" * 24, device="cuda",
                    hardware=(("gpu_name", "NVIDIA H200"),), software=(("torch", "2.13.0"),))
# Recorded on the GPU: every candidate of the two-knob space below (the fastest: max_autotune alone).
RECORDED = [({}, 1.00), ({"max_autotune": True}, 0.80), ({"cpp_wrapper": True}, 0.97),
            ({"max_autotune": True, "cpp_wrapper": True}, 0.83)]


@pytest.fixture
def target(tmp_path: Path) -> Target:
    path = tmp_path / "space.json"
    path.write_text(json.dumps({"name": "two", "knobs": [{"name": "max_autotune", "kind": "bool"},
                                                         {"name": "cpp_wrapper", "kind": "bool"}]}))
    return Target(workload=WORKLOAD, platform=PLATFORM, space=load_space("cuda", path=path))


@pytest.fixture
def store(tmp_path: Path) -> Store:
    url = f"sqlite:///{tmp_path / 'driver.db'}"
    ensure_schema(url)
    return Store.open(url)


def replay(target: Target, *, capacity: int = 1) -> ReplayExecutor:
    return ReplayExecutor({target.space.candidate(p).key: Measurement(Status.OK, latency_ms=ms, reps=5)
                           for p, ms in ((target.space.complete(p), ms) for p, ms in RECORDED)}, capacity=capacity)


def search(target: Target, store: Store, executor: ReplayExecutor, trials: int, *, resume: bool = False):
    job = SearchOptions(measure=MeasureSpec("recorded.py"), trials=trials, resume=resume)
    study = open_study(job, target, store, user="tester")
    driver = Driver(job, target, store=store, executor=executor)
    if resume:
        driver.replay(store.trials(study.id))
    return driver.run(study)


def test_each_candidate_is_measured_once_and_the_space_runs_out(target: Target, store: Store) -> None:
    executor = replay(target)
    outcome = search(target, store, executor, trials=10)
    assert outcome.exhausted and len(outcome.trials) == 4
    assert outcome.trials[0].params == {} and outcome.trials[0].number == 0       # trial 0: defaults
    assert len({r.candidate_key for r in outcome.trials}) == 4 == len(executor.submitted)
    best = min(outcome.trials, key=lambda r: r.measurement.latency_ms)
    assert best.params == {"max_autotune": True}


def test_capacity_is_respected_and_every_result_recorded(target: Target, store: Store) -> None:
    executor = replay(target, capacity=3)
    outcome = search(target, store, executor, trials=4)
    assert executor.most_in_flight == 3
    assert sorted(r.number for r in outcome.trials) == [0, 1, 2, 3]
    assert len(store.trials(outcome.study.id)) == 4


def test_resume_continues_numbering_without_repeating_a_candidate(target: Target, store: Store) -> None:
    first = search(target, store, replay(target), trials=2)
    executor = replay(target)
    second = search(target, store, executor, trials=4, resume=True)
    assert second.study.id == first.study.id
    assert [r.number for r in second.trials] == [0, 1, 2, 3]
    assert len(executor.submitted) == 2 and {r.number for r in executor.submitted} == {2, 3}
    assert len({r.candidate_key for r in second.trials}) == 4


def test_an_unrecorded_candidate_is_a_recorded_failure(target: Target, store: Store) -> None:
    executor = ReplayExecutor({}, capacity=2)
    outcome = search(target, store, executor, trials=3)
    assert [r.measurement.status for r in outcome.trials] == [Status.RUNTIME_ERROR] * 3
    assert "no recorded measurement" in outcome.trials[0].measurement.error
