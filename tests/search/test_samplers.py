"""Every sampler of `--sampler` behind one contract, on the driver over a replay table (no compiles).

The space mixes what real spaces have: bools, a choice, a stepped int and float, and two
children that exist only while their parent is on. The table records every distinct
candidate. As in real spaces, some knobs do nothing: the best latency belongs to the six
candidates that differ only in those, so "found the best" means reaching that latency.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers import run_main
from tuner.errors import UsageError
from tuner.platform import Platform
from tuner.search import SearchOptions, SearchOutcome, Target
from tuner.search.driver import Driver, open_study
from tuner.search.samplers import SAMPLERS, grid_values, make_sampler
from tuner.search_spaces import Knob, SearchSpace, load_space
from tuner.storage import Store, ensure_schema
from tuner.trial import MeasureSpec, Measurement, Status
from tuner.workers.replay import ReplayExecutor
from tuner.keys import GraphFingerprint, Workload

WORKLOAD = Workload(key="w" * 32, name="recorded", graphs=(GraphFingerprint("g" * 32, 0, 3, "[]", "graph"),))
PLATFORM = Platform(key="p" * 24, hardware_key="h" * 24, software_key="s" * 24, device="cuda",
                    hardware=(("gpu_name", "NVIDIA H200"),), software=(("torch", "2.13.0"),))
KNOBS = (
    Knob("a", "bool", False, "autotune"),
    Knob("b", "choice", 1, "tiling", choices=(1, 2, 4)),
    Knob("c", "int", 1, "fusion", low=1, high=3, step=2),
    Knob("f", "float", 0.0, "memory", low=0.0, high=1.0, step=0.5),        # does nothing
    Knob("d", "bool", False, "autotune", parent=("a", True)),                # does nothing
    Knob("e", "choice", "x", "autotune", choices=("x", "y", "z"), parent=("a", True)),
)
SPACE = SearchSpace(name="contract", device="cuda", knobs=KNOBS)
BEST_MS = 8.5


def latency(params: dict) -> float:
    """The recorded latency: a, only with e="y", and b=2 and c=3 help; f and d change nothing."""
    a = 0.0 if not params["a"] else (-1.5 if params["e"] == "y" else 0.4)
    return 10.0 + a + {1: 0.5, 2: 0.0, 4: 0.8}[params["b"]] + {1: 0.6, 3: 0.0}[params["c"]]


def every_params(space: SearchSpace) -> list[dict]:
    """Every full param dict of `space` (children only where their parent turns them on)."""
    grid = grid_values(space)
    found: list[dict] = [{}]
    for knob in space.knobs:
        found = [grown for params in found
                 for grown in ([{**params, knob.name: v} for v in grid[knob.name]]
                               if knob.parent is None or params.get(knob.parent[0]) == knob.parent[1] else [params])]
    return found


TABLE = {SPACE.candidate(p).key: Measurement(Status.OK, latency_ms=latency(p), reps=5) for p in every_params(SPACE)}


@pytest.fixture
def store(tmp_path: Path) -> Store:
    url = f"sqlite:///{tmp_path / 'samplers.db'}"
    ensure_schema(url)
    return Store.open(url)


def search(store: Store, sampler: str, trials: int, *, seed: int = 3, capacity: int = 1,
           space: SearchSpace = SPACE) -> tuple[SearchOutcome, ReplayExecutor]:
    executor = ReplayExecutor(TABLE, capacity=capacity)
    job = SearchOptions(measure=MeasureSpec("recorded.py"), trials=trials, sampler=sampler, seed=seed)
    target = Target(workload=WORKLOAD, platform=PLATFORM, space=space)
    study = open_study(job, target, store, user="tester")
    return Driver(job, target, store=store, executor=executor).run(study), executor


def test_the_table_is_every_candidate_and_its_best_is_shared() -> None:
    assert len(TABLE) == 18 + 18 * 2 * 3
    assert min(m.latency_ms for m in TABLE.values()) == BEST_MS
    assert sum(m.latency_ms == BEST_MS for m in TABLE.values()) == 6


@pytest.mark.parametrize("sampler", list(SAMPLERS))
def test_a_seed_fixes_the_proposals(sampler: str, tmp_path: Path) -> None:
    runs = []
    for i, (seed, trials) in enumerate(((3, 12), (3, 12), (4, 6))):      # GP models from trial 11 on
        url = f"sqlite:///{tmp_path / f'run{i}.db'}"
        ensure_schema(url)
        _, executor = search(Store.open(url), sampler, trials=trials, seed=seed)
        runs.append([request.candidate.key for request in executor.submitted])
    assert len(runs[0]) == 12 and runs[0] == runs[1] and runs[2] != runs[0][:6]


# TPE, CMA-ES and QMC found it within 30 trials for each of seeds 0-7; random and grid, which learn
# nothing, miss in a third of the table for about 1 seed in 8 (not seed 3). GP spends about a
# second on each proposal (fitting, then its acquisition): here it only shows it measures each
# candidate once with trials in flight; how fast it finds the best is bench/search_efficiency.py's.
@pytest.mark.parametrize("sampler", list(SAMPLERS))
def test_it_finds_the_best_in_a_third_of_the_table_measuring_each_candidate_once(sampler: str, store: Store) -> None:
    budget = 14 if sampler == "gp" else len(TABLE) // 3
    outcome, executor = search(store, sampler, trials=budget, capacity=2)
    keys = [request.candidate.key for request in executor.submitted]
    assert len(keys) == len(set(keys)) == budget and executor.most_in_flight == 2
    if sampler != "gp":
        assert min(r.measurement.latency_ms for r in outcome.trials) == BEST_MS


def test_grid_measures_every_candidate_then_reports_the_space_exhausted(store: Store) -> None:
    # Without b and c (recorded at their defaults): 3 + 3 * 6 candidates on a grid of 36 points.
    small = SearchSpace(name="small", device="cuda", knobs=tuple(k for k in KNOBS if k.name not in ("b", "c")))
    outcome, executor = search(store, "grid", trials=100, space=small)
    assert outcome.exhausted and len(outcome.trials) == len(every_params(small)) == 21 == len(executor.submitted)
    assert all(r.measurement.ok for r in outcome.trials)


def test_grid_refuses_a_float_without_a_step_before_writing_a_study(store: Store) -> None:
    continuous = SearchSpace(name="cont", device="cuda",
                             knobs=KNOBS[:3] + (Knob("f", "float", 0.0, "memory", low=0.0, high=1.0),))
    with pytest.raises(UsageError) as caught:
        search(store, "grid", trials=5, space=continuous)
    assert str(caught.value) == ("--sampler grid needs finite values, but knob 'f' is a continuous float range "
                                 "[0.0, 1.0] with no finite set of values; give it a \"step\" in the space file, "
                                 "or pick another --sampler")
    assert store.last_study(WORKLOAD.key, PLATFORM.key) is None


def test_grid_refuses_a_space_too_large_to_list() -> None:
    with pytest.raises(UsageError, match=r"^--sampler grid: space 'cuda' has .* combinations, more than 100000 .*"
                                         r"pass a smaller --space file .* or another --sampler$"):
        make_sampler("grid", 0, load_space("cuda"))


def test_the_cli_help_names_every_sampler() -> None:
    shown = run_main("search", "--help")
    assert shown.returncode == 0 and all(name in shown.stdout for name in SAMPLERS)
