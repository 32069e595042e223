"""The search driver over a replay executor on a recorded two-knob space: the `target` and
`store` fixtures (import them into a test module to use them), `replay` and `search`."""
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

