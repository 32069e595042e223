"""Warm starts: stored best configs of the same workload elsewhere and of the nearest workloads
here are the first candidates after the seeds, in the documented order (tuner.search.priors).

Replay executor and SQLite: no compiles.
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from fixtures.sharing_data import best, seed, workload
from tuner.cli.search import warm_start_lines
from tuner.keys import platform_from_parts
from tuner.search import SearchOptions, Target
from tuner.search.driver import Driver, open_study
from tuner.search.priors import first_candidates
from tuner.search_spaces import load_space
from tuner.storage import Store, ensure_schema
from tuner.trial import MeasureSpec, Measurement, Status
from tuner.workers.replay import ReplayExecutor
from tuner.workload import call_counts, cosine

A, B, C, D = "max_autotune", "cpp_wrapper", "aggressive_fusion", "benchmark_fusion"


def gpu(name: str, *, torch: str = "2.13.0+cu128", device: str = "cuda"):
    return platform_from_parts(device, {"gpu_name": name, "capability": "9.0", "sm_count": "132"},
                               {"python": "3.11.9", "torch": torch, "triton": "3.5.0", "cuda": "12.8"})


HERE, H100, A100, L4, CPU = gpu("NVIDIA H200"), gpu("NVIDIA H100"), gpu("NVIDIA A100"), gpu("NVIDIA L4"), \
    gpu("AMD EPYC", device="cpu")
MLP = workload("mlp", "relu", "sigmoid")                 # the workload being tuned
TWIN = workload("mlp_twin", "relu", "sigmoid", "relu")   # similarity 0.95
WIDER = workload("mlp_wider", "relu", "sigmoid", "tanh")  # similarity 0.82
HALF = workload("relu_tanh", "relu", "tanh")             # similarity 0.5
CONV = workload("convnet", "conv", "pool")               # similarity 0: never near


@pytest.fixture
def target(tmp_path: Path) -> Target:
    path = tmp_path / "space.json"
    path.write_text(json.dumps({"name": "four", "knobs": [{"name": n, "kind": "bool"} for n in (A, B, C, D)]}))
    return Target(workload=MLP, platform=HERE, space=load_space("cuda", path=path))


@pytest.fixture
def store(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    ensure_schema(url)
    with Store.open(url) as opened:
        yield opened


def filled(store: Store) -> Store:
    """Best configs of MLP on other platforms and of other workloads on this one."""
    seed(store, MLP, A100, best(MLP, A100, ci_low=1.2, params={A: True}),
         best(MLP, A100, graph=1, ci_low=1.2, params={A: True}))          # the same config, twice
    seed(store, MLP, H100, best(MLP, H100, ci_low=1.3, params={B: True, C: True}))   # strongest
    seed(store, MLP, L4, best(MLP, L4, ci_low=1.25, params={A: False}),   # compiles as the defaults seed
         best(MLP, L4, graph=1, ci_low=1.1, params={"triton.max_tiles": 2}))      # not in this space
    seed(store, MLP, CPU, best(MLP, CPU, ci_low=1.9, params={D: True, C: True}))  # another device
    seed(store, TWIN, HERE, best(TWIN, HERE, ci_low=1.1, params={D: True}),
         best(TWIN, HERE, graph=1, ci_low=1.05, params={B: True}))         # weaker: its best is D
    seed(store, WIDER, HERE, best(WIDER, HERE, ci_low=1.1, params={A: True}))   # repeats a warm start
    seed(store, HALF, HERE, best(HALF, HERE, ci_low=1.1, params={A: True, D: True}))
    seed(store, CONV, HERE, best(CONV, HERE, ci_low=1.5, params={A: True, B: True, C: True}))
    seed(store, workload("tuned_default", "relu"), HERE,
         best(workload("tuned_default", "relu"), HERE, is_default=True, speedup=1.0, ci_low=1.0))
    return store


EXPECTED = [{}, {B: True, C: True}, {A: True}, {D: True}, {A: True, D: True}]


def test_similarity_is_the_cosine_of_call_target_counts() -> None:
    mine = call_counts(g.code for g in MLP.graphs)
    assert mine == Counter({"call_function relu": 1, "call_function sigmoid": 1})
    near = [round(cosine(mine, call_counts(g.code for g in w.graphs)), 2) for w in (TWIN, WIDER, HALF, CONV)]
    assert near == [0.95, 0.82, 0.5, 0.0]


def test_the_first_candidates_are_the_seeds_then_the_warm_starts_in_order(target: Target, store: Store) -> None:
    filled(store)
    job = SearchOptions(measure=MeasureSpec("recorded.py"), trials=len(EXPECTED))
    study = open_study(job, target, store, user="tester")
    executor = ReplayExecutor({target.space.candidate(target.space.complete(p)).key:
                               Measurement(Status.OK, latency_ms=1.0, reps=5) for p in EXPECTED})
    outcome = Driver(job, target, store=store, executor=executor).run(study)
    assert [r.candidate.as_dict() for r in executor.submitted] == EXPECTED
    assert [r.params for r in outcome.trials] == EXPECTED
    assert outcome.warm_starts == ((1, f"mlp on platform {H100.key[:12]}"), (2, f"mlp on platform {A100.key[:12]}"),
                                   (3, "nearest workload mlp_twin (similarity 0.95)"),
                                   (4, "nearest workload relu_tanh (similarity 0.50)"))
    lines = warm_start_lines(outcome)
    assert len(lines) == 4 and lines[2] == ("warm start: trial 3, the stored best of nearest workload mlp_twin "
                                            "(similarity 0.95): - vs default")


def test_no_warm_start_on_request_or_on_a_fresh_database(target: Target, store: Store) -> None:
    seeds = target.space.seeds()
    def params(**kw):
        return [first.params for first in first_candidates(store, MLP, HERE, target.space, seeds, **kw)]

    assert params() == seeds
    filled(store)
    assert params(warm=False) == seeds
    assert len(params()) == len(EXPECTED)
