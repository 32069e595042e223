"""The process stage's timing processes on a real local executor: each starts with its runtime knobs
and times as a user's process does (nothing pinned), while trial and confirmation processes pin the
allocator before anything runs (`workers/isolation.time_isolated`, `workers/trial_process.py`)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import MODELS
from tuner.runtime import allocators
from tuner.trial import MeasureSpec, ProcessRequest, Status, TrialRequest
from tuner.workers.local import LocalExecutor

PROBE = MODELS / "process_probe.py"


@pytest.fixture
def probed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    out = tmp_path / "probe.jsonl"
    monkeypatch.setenv("PROCESS_PROBE", str(out))
    executor = LocalExecutor()

    def lines() -> list[dict]:
        return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []

    yield executor, lines
    executor.close()


@pytest.mark.skipif(allocators.glibc() is None, reason="glibc's malloc only")
def test_a_timing_process_starts_with_its_runtime_knobs_and_pins_nothing(probed) -> None:
    executor, lines = probed
    spec = MeasureSpec(str(PROBE), timeout_s=120)
    plain = executor.run_process(ProcessRequest(spec=spec, params=(), label="plain"))
    assert plain.status is Status.OK and plain.latency_ms > 0 and plain.label == "plain", plain.error
    # its own model, then the fresh load its output is checked against (after the timing)
    assert lines()[0] == {"wait": None, "jemalloc": False, "retains": False}
    if not allocators.available("jemalloc"):
        pytest.skip("libjemalloc2 is not installed (scripts/test.sh installs it)")
    knobs = (("runtime.allocator", "jemalloc"), ("runtime.omp_wait_policy", "passive"))
    started = executor.run_process(ProcessRequest(spec=spec, params=(("max_fusion_size", 8),), runtime=knobs))
    assert started.status is Status.OK, started.error
    assert lines()[-1]["wait"] == "PASSIVE" and lines()[-1]["jemalloc"] is True


@pytest.mark.skipif(allocators.glibc() is None, reason="glibc's malloc only")
def test_a_trial_pins_the_allocator_before_its_model_loads(probed) -> None:
    executor, lines = probed
    executor.submit(TrialRequest(spec=MeasureSpec(str(PROBE), timeout_s=120, repeat=2, min_rounds=2), params=()))
    _, measurement = executor.next_result()
    assert measurement.ok, measurement.error
    assert lines() and all(line["retains"] for line in lines())


def test_a_runtime_knob_this_machine_cannot_run_is_a_failure_saying_so(probed, monkeypatch) -> None:
    executor, _ = probed
    monkeypatch.setattr(allocators, "library", lambda name: None)
    done = executor.run_process(ProcessRequest(spec=MeasureSpec(str(PROBE)), params=(),
                                               runtime=(("runtime.allocator", "tcmalloc"),), label="tc"))
    assert done.status is Status.RUNTIME_ERROR and "tcmalloc is not installed here" in done.error
