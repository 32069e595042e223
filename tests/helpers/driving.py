"""The search driver over a replay executor on a recorded two-knob space: the `target` and
`store` fixtures (import them into a test module to use them), `replay` and `search`; for the
budget, a `FakeClock` and a `TimedReplay` whose trials take time on it, and the `wide_target`
fixture (a space that does not run out)."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from tuner.platform import Platform
from tuner.search import SearchOptions, Target
from tuner.search.driver import Driver, open_study
from tuner.search_spaces import load_space
from tuner.storage import Store, ensure_schema
from tuner.trial import MeasureSpec, Measurement, Status
from tuner.workers.replay import ReplayExecutor
from tuner.keys import GraphFingerprint, Workload

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



class FakeClock:
    """A monotonic clock that moves only when told (`advance`): the budget's time in tests."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class TimedReplay(ReplayExecutor):
    """A replay executor whose trials take `trial_s` seconds of `clock`, one after another: handing
    back a result moves the clock by that much (or by `took[number]` for trial `number`). With
    `every`, every candidate's answer is that measurement (the defaults' without a compile time, as
    the real trial of the defaults reports none: its one runner is the baseline)."""

    def __init__(self, *args, clock: FakeClock, trial_s: float, took: dict[int, float] | None = None,
                 every: Measurement | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.clock, self.trial_s, self.took, self.every = clock, trial_s, took or {}, every

    def next_result(self):
        request, measurement = super().next_result()
        self.clock.advance(self.took.get(request.number, self.trial_s))
        if self.every is None:
            return request, measurement
        return request, self.every if request.params else replace(self.every, compile_s=None)


def timed_replay(target: Target, *, clock: FakeClock, trial_s: float,
                 took: dict[int, float] | None = None) -> TimedReplay:
    """`replay`'s recordings, handed back on `clock`."""
    return TimedReplay({target.space.candidate(p).key: Measurement(Status.OK, latency_ms=ms, reps=5, speedup=1.0 / ms)
                        for p, ms in ((target.space.complete(p), ms) for p, ms in RECORDED)},
                       clock=clock, trial_s=trial_s, took=took)


@pytest.fixture
def wide_target(tmp_path: Path) -> Target:
    """A space of 113 candidates (max_fusion_size 16..128), for searches that must not run out."""
    path = tmp_path / "wide.json"
    path.write_text(json.dumps({"name": "wide", "knobs": [{"name": "max_fusion_size", "kind": "int",
                                                           "low": 16, "high": 128}]}))
    return Target(workload=WORKLOAD, platform=PLATFORM, space=load_space("cuda", path=path))
