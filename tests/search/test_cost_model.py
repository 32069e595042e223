"""The learned cost model (tuner.search.cost_model) and the driver's ranking with `--cost-model`.

A replay table with a known structure (freezing pays only with the C++ wrapper), real SQLite,
the real driver and Optuna; no compiles.
"""
from __future__ import annotations

import math
import random
import shutil
from pathlib import Path

import numpy as np
import optuna
import pytest

from fixtures.sharing_data import workload
from tuner.errors import UsageError
from tuner.keys import platform_from_parts
from tuner.search import SearchOptions, Target
from tuner.search.cost_model import PROPOSALS, CostModel, CostRanker
from tuner.search.driver import Driver, open_study
from tuner.search_spaces import Knob, SearchSpace
from tuner.storage import Store, TrialRecord, ensure_schema
from tuner.trial import Candidate, MeasureSpec, Measurement, Status
from tuner.workers.replay import ReplayExecutor

SPACE = SearchSpace(name="known", device="cpu", knobs=(
    Knob("freezing", "bool", False, "trace"),
    Knob("max_autotune", "bool", False, "autotune"),
    Knob("max_autotune_gemm_backends", "choice", "ATEN,TRITON,CPP", "autotune", choices=("ATEN,TRITON,CPP", "ATEN"),
         parent=("max_autotune", True)),
    Knob("cpp_wrapper", "bool", False, "wrapper"),
    Knob("epilogue_fusion", "bool", True, "fusion"),
    Knob("max_fusion_size", "int", 64, "fusion", low=16, high=128, step=16)))
HERE = platform_from_parts("cpu", {"cpu_model": "here"}, {"torch": "2.13.0"})
THERE = platform_from_parts("cpu", {"cpu_model": "there"}, {"torch": "2.13.0"})
MLP, TWIN = workload("mlp", "relu", "sigmoid"), workload("mlp_twin", "relu", "sigmoid", "relu")


def best_region(params: dict) -> bool:
    return bool(params.get("freezing")) and bool(params.get("cpp_wrapper"))


def measured(params: dict, rng: random.Random) -> Measurement:
    """The known structure: freezing with the C++ wrapper is 1.3x faster, either alone about
    nothing; max_autotune costs a little, ATEN more; a fusion-size curve; 1% jitter. The
    largest fusions with the C++ wrapper and no freezing crash."""
    p = SPACE.complete(params)
    log = -0.26 * best_region(p) + 0.01 * p["freezing"] + 0.02 * p["max_autotune"]
    log += 0.05 * (p.get("max_autotune_gemm_backends") == "ATEN") + 0.02 * (math.log2(p["max_fusion_size"]) - 5) ** 2
    if p["cpp_wrapper"] and not p["freezing"] and p["max_fusion_size"] == 128:
        return Measurement.failed(Status.CRASHED, "known: crashed")
    ratio = math.exp(log + rng.gauss(0.0, 0.01)) if params else 1.0
    return Measurement(Status.OK, latency_ms=0.5 * ratio, baseline_ms=0.5, speedup=1.0 / ratio, reps=20)


POINTS = SPACE.points(1000)
TABLE = {c.key: measured(c.as_dict(), random.Random(i)) for i, c in enumerate(POINTS)}


def trained(points: list[Candidate]) -> CostModel:
    model = CostModel(SPACE)
    for candidate in points:
        model.add(candidate.as_dict(), TABLE[candidate.key], 1.0)
    return model


def test_the_model_ranks_the_known_best_region_above_a_random_point() -> None:
    rng = random.Random(0)
    shuffled = rng.sample(POINTS, len(POINTS))
    model, held_out = trained(shuffled[:60]), shuffled[60:]
    scores = dict(zip((c.key for c in held_out), model.scores(c.as_dict() for c in held_out)))
    best = [c for c in held_out if best_region(c.as_dict())]
    rest = [c for c in held_out if not best_region(c.as_dict())]
    pairs = [(rng.choice(best), rng.choice(rest)) for _ in range(200)]
    right = sum(scores[b.key] < scores[r.key] for b, r in pairs)
    # Not all: the failure signal is linear in knob pairs, and the crash region is a three-way
    # term (wrapper, no freezing, largest fusions), so it leaks onto the best region's largest fusions.
    assert right / len(pairs) >= 0.85, f"the best region ranked first in {right} of {len(pairs)} pairs"
    top = min(held_out, key=lambda c: scores[c.key])
    assert best_region(top.as_dict())
    untrained = CostModel(SPACE)          # no example: every point scores alike, so the pairs show nothing
    assert len(set(untrained.scores(c.as_dict() for c in held_out[:20]).round(9))) == 1


def test_the_model_is_deterministic() -> None:
    order = random.Random(1).sample(POINTS, 80)
    first, second = trained(order), trained(order)
    probe = [c.as_dict() for c in POINTS]
    assert np.array_equal(first.scores(probe), second.scores(probe))


def test_knobs_another_space_sets_are_dropped_and_a_failure_is_its_own_signal() -> None:
    model = CostModel(SPACE)
    assert np.array_equal(model.encoder.encode({"freezing": True, "triton.max_tiles": 2}),
                          model.encoder.encode({"freezing": True}))
    crash = Measurement.failed(Status.CRASHED, "known: crashed")
    for index in range(10):
        model.add({"cpp_wrapper": True, "max_fusion_size": 128}, crash, 1.0)
        model.add({"max_fusion_size": 16 * (1 + index % 7)}, Measurement(Status.OK, latency_ms=0.5, baseline_ms=0.5,
                                                                          speedup=1.0, reps=20), 1.0)
    assert model.labelled == 10                  # the crashes taught no latency
    fails, fine = model.scores([{"cpp_wrapper": True, "max_fusion_size": 128}, {"max_fusion_size": 32}])
    assert fails > fine + 0.2


@pytest.fixture
def prior(tmp_path: Path) -> Path:
    """A database holding every point of the table, measured on another platform for a similar workload."""
    url = f"sqlite:///{tmp_path / 'prior.db'}"
    ensure_schema(url)
    target = Target(workload=TWIN, platform=THERE, space=SPACE)
    with Store.open(url) as store:
        study = open_study(SearchOptions(measure=MeasureSpec("twin.py"), trials=len(POINTS)), target, store, user="t")
        for number, candidate in enumerate(POINTS):
            store.record_trial(study.id, TrialRecord(number=number, candidate_key=candidate.key,
                                                     params=candidate.as_dict(), measurement=TABLE[candidate.key]))
    return tmp_path / "prior.db"


def test_the_ranker_learns_from_the_stored_trials_of_other_platforms_and_workloads(prior: Path) -> None:
    ranker = CostRanker(MLP, HERE, SPACE)
    assert not ranker.ready
    with Store.open(f"sqlite:///{prior}") as store:
        ranker.load(store)
    assert ranker.ready
    rng = random.Random(2)
    rest = [c for c in POINTS if not best_region(c.as_dict())]
    for _ in range(20):
        offered = rng.sample(rest, PROPOSALS - 1)
        winner = rng.choice([c for c in POINTS if best_region(c.as_dict())])
        at = rng.randrange(PROPOSALS)
        offered.insert(at, winner)
        assert ranker.best(offered) == at


def search(db: Path, *, seed: int, cost: bool, trials: int = 24):
    job = SearchOptions(measure=MeasureSpec("mlp.py"), trials=trials, sampler="tpe", seed=seed, warm_start=False,
                        cost_model=cost)
    target = Target(workload=MLP, platform=HERE, space=SPACE)
    executor = ReplayExecutor(TABLE, noise=0.02, seed=seed)
    with Store.open(f"sqlite:///{db}") as store:
        driver = Driver(job, target, store=store, executor=executor)
        outcome = driver.run(open_study(job, target, store, user="t"))
    return driver, executor, outcome


def test_the_driver_measures_the_ranked_proposal_once_and_stays_reproducible(prior: Path, tmp_path: Path) -> None:
    runs = [search(Path(shutil.copy(prior, tmp_path / f"run{i}.db")), seed=5, cost=True) for i in range(2)]
    (driver, executor, outcome), (_, again, _) = runs
    keys = [r.candidate.key for r in executor.submitted]
    assert keys == [r.candidate.key for r in again.submitted]           # same seed, same searches
    assert len(keys) == len(set(keys)) == 24                           # identical candidates measured once
    states = [t.state for t in driver.optuna.trials]
    assert states.count(optuna.trial.TrialState.FAIL) >= 10 * (PROPOSALS - 1)   # the proposals not measured
    told = {SPACE.candidate(t.params).key for t in driver.optuna.trials if t.state.is_finished()
            and t.state is not optuna.trial.TrialState.FAIL}
    assert told <= set(keys)                                           # no value for a candidate never measured
    ranked = [r.params for r in outcome.trials[len(SPACE.seeds()):]]
    assert sum(map(best_region, ranked[:5])) >= 4, ranked[:5]
    _, plain, _ = search(Path(shutil.copy(prior, tmp_path / "plain.db")), seed=5, cost=False)
    assert [r.candidate.key for r in plain.submitted] != keys


def test_the_cost_model_refuses_a_grid_and_several_objectives() -> None:
    with pytest.raises(UsageError, match="--cost-model ranks a sampler's proposals"):
        SearchOptions(measure=MeasureSpec("mlp.py"), trials=4, sampler="grid", cost_model=True)
    with pytest.raises(UsageError, match="--cost-model predicts latency only"):
        SearchOptions(measure=MeasureSpec("mlp.py"), trials=4, objectives=("latency", "memory"), cost_model=True)
