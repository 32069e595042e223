"""A trial measures its candidate alone: the default compile it is paired with is compiled and
first called before the candidate exists (so nothing the candidate's compile sets up once per
process can slow it), the peak memory is the candidate's own, not the process's, and the
compile clock starts once the compile lock is held, not while waiting at it.
(The timing consequence on a model where freezing pays, trial within 5% of the confirmation,
is bench/trial_vs_confirmation.py: too noisy for a shared 2-core machine.)"""
from __future__ import annotations

import threading
import time

import pytest
import torch

import tuner.measure.core as core
from helpers import MODELS
from tuner.measure import Runner, measure_lock, prepare, run_trial
from tuner.measure.device import call_peak_mb
from tuner.trial import MeasureSpec, Status, TrialRequest

QUICK = {"repeat": 2, "warmup": 1}


def test_the_baseline_is_compiled_and_first_called_before_the_candidate(monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[tuple[str, object]] = []
    real = core.prepare

    def spy(spec: MeasureSpec, params: tuple | None) -> object:
        events.append(("start", params))
        result = real(spec, params)
        events.append(("ready", params))
        return result

    monkeypatch.setattr(core, "prepare", spy)
    candidate = (("max_fusion_size", 8),)
    measured = run_trial(TrialRequest(spec=MeasureSpec(str(MODELS / "tiny_mlp.py"), **QUICK), params=candidate, number=1))
    assert measured.status is Status.OK, measured.error
    assert events == [("start", ()), ("ready", ()), ("start", candidate), ("ready", candidate)]
    # The candidate's own working memory: kilobytes for this MLP, not the process's few hundred MiB.
    assert measured.peak_mem_mb is not None and 0 <= measured.peak_mem_mb < 64, measured.peak_mem_mb


def test_the_cpu_peak_is_what_one_call_adds_whatever_the_process_held_before() -> None:
    big = torch.ones(100 * 2**20 // 4)       # 100 MiB touched and freed: the process's high-water mark rises
    del big
    assert call_peak_mb(lambda: None, "cpu") < 16

    def allocates() -> None:
        scratch = torch.ones(48 * 2**20 // 4)
        del scratch

    assert 40 <= call_peak_mb(allocates, "cpu") < 80


def test_the_compile_clock_starts_inside_the_compile_lock() -> None:
    """A measurement holds the node for 3 s while this compile waits; the wait is not compile time."""
    held = threading.Event()

    def measure() -> None:
        with measure_lock():
            held.set()
            time.sleep(3.0)

    holder = threading.Thread(target=measure)
    holder.start()
    held.wait()
    start = time.perf_counter()
    runner = prepare(MeasureSpec(str(MODELS / "tiny_mlp.py")), ())
    total = time.perf_counter() - start
    holder.join()
    assert isinstance(runner, Runner), getattr(runner, "message", runner)
    assert total >= 3.0 and runner.compile_s <= total - 2.5, (runner.compile_s, total)
