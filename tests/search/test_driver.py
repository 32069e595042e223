"""The search driver over a replay executor: ask/tell, dedupe, capacity and resume, no compiles."""
from __future__ import annotations

from helpers.driving import replay, search, store, target  # noqa: F401  (store and target are fixtures)
from tuner.search import Target
from tuner.storage import Store
from tuner.trial import Status
from tuner.workers.replay import ReplayExecutor


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
