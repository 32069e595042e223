"""The watchdog on the section under the node's compile lock (`tuner.measure.watchdog`): a call that
never returns ends its trial process with a recorded result, which frees the lock, where it was
held until the trial's --timeout; an ordinary slow compile is never taken for a hang.

Fast: the watchdog's bounds in this process, with Dynamo's own compilation callbacks marking the
compiling and a `finish` that records instead of ending the process (the bounds shortened).
Slow: a real trial process whose compiled call blocks in C (tests/models/wedged_mlp.py), with a
timed section of this process waiting for the node's lock.
"""
from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path

import pytest
import torch._dynamo
from torch._dynamo.callback import CallbackTrigger

from helpers import MODELS
from tuner.measure import watchdog
from tuner.measure.compile_cap import armed
from tuner.trial import CompileCap, MeasureSpec, Status, TrialRequest


@pytest.fixture
def short(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Bounds of a fraction of a second, and the messages the watchdog hands in."""
    monkeypatch.setattr(watchdog, "RUN_FLOOR_S", 0.3)
    monkeypatch.setattr(watchdog, "CAP_GRACE_S", 0.2)
    return []


def compiling(seconds: float) -> None:
    """A compile as Dynamo announces one, that takes `seconds`."""
    with torch._dynamo.callback_handler.install_callbacks(CallbackTrigger.DYNAMO, "0/0"):
        time.sleep(seconds)


def test_a_call_past_its_bound_is_handed_in_and_a_compile_without_a_cap_never_is(short: list[str]) -> None:
    with watchdog.finishing(short.append):
        with watchdog.watched("cpu", 0.0001, what="the compiled call of this config") as watch:
            compiling(1.0)                  # no cap yet: only --timeout bounds a compile
            assert short == []
            time.sleep(0.1)                 # running, within the bound
            compiling(1.0)                  # a recompile starts the clock again
            time.sleep(0.1)
            assert short == []
            watch.first_call_done()
            time.sleep(1.0)                 # running, past it
    assert short == ["the compiled call of this config did not return within 0.3 s (50x the eager call's 0.0001 s, "
                     "at least 0.3 s) while holding the node's compile lock; its trial process was ended, which "
                     "frees the lock"]


def test_a_dynamo_reset_that_drops_the_callbacks_never_makes_a_compile_look_like_a_hang(short: list[str]) -> None:
    """torch._dynamo.reset() clears every compilation callback: the compile after it went unseen and,
    longer than the run bound, would have been handed in as a call that did not return."""
    with watchdog.finishing(short.append):
        with watchdog.watched("cpu", 0.0001, what="the compiled call of this config"):
            torch._dynamo.reset()
            with torch._dynamo.callback_handler.install_callbacks(CallbackTrigger.DYNAMO, "0/0"):
                time.sleep(0.5)                 # unseen: the bound runs out, the callbacks come back
                time.sleep(1.0)                 # seen again, if only from here: compiling, unbounded
            assert short == []
            time.sleep(1.0)                     # then a call that does not return is still caught
    assert len(short) == 1 and "did not return within 0.3 s" in short[0]


def test_a_compile_past_the_armed_cap_is_handed_in(short: list[str]) -> None:
    with watchdog.finishing(short.append), armed(CompileCap(seconds=0.3, p90_s=0.1, compiles=5)):
        with watchdog.watched("cpu", 0.0001, what="the compiled call of this config"):
            compiling(0.3)                  # within the cap and its grace
            assert short == []
            compiling(1.0)
    assert len(short) == 1 and short[0].startswith("the compiled call of this config ran 0.5 s, past the adaptive "
                                                   "compile cap of 0.3 s, without returning to Python"), short


def test_on_a_gpu_the_first_calls_running_is_bounded_as_its_compile(short: list[str]) -> None:
    """Triton kernels autotune at their first launch, outside Dynamo's callbacks."""
    with watchdog.finishing(short.append):
        with watchdog.watched("cuda:0", 0.0001, what="the compiled call of this config") as watch:
            time.sleep(1.0)
            assert short == []
            watch.first_call_done()
            time.sleep(1.0)
    assert len(short) == 1 and "did not return within 0.3 s" in short[0]


def test_nothing_is_watched_without_a_process_to_end(short: list[str]) -> None:
    before = threading.active_count()
    with watchdog.watched("cpu", 0.0001, what="x") as watch:
        assert threading.active_count() == before
        time.sleep(0.5)
        watch.first_call_done()
    assert short == []


@pytest.mark.slow
def test_a_compiled_call_that_blocks_in_c_frees_the_compile_lock_long_before_the_timeout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """wedged_mlp.py's candidate blocks in C inside its compiled call, under the compile lock held
    shared; a timed section here wants the lock exclusive. The lock was held until the trial's
    --timeout (120 s here), and the trial recorded as that deadline's kill. Now the trial process
    ends RUN_FLOOR_S (10 s) after the call began, with its own TIMEOUT saying so, and the timed
    section gets the lock then."""
    from tuner.measure.node_lock import measure_lock
    from tuner.workers.isolation import run_isolated

    monkeypatch.setenv("TMPDIR", str(tmp_path))                 # the lock folder, here and in the trial
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    marker = tmp_path / "wedged"
    monkeypatch.setenv("WEDGED_MLP_MARKER", str(marker))
    request = TrialRequest(spec=MeasureSpec(str(MODELS / "wedged_mlp.py"), repeat=3, timeout_s=120),
                           params=(("max_fusion_size", 32),), number=1)
    result = []
    trial = threading.Thread(target=lambda: result.append(run_isolated(request, scratch=str(tmp_path))), daemon=True)
    trial.start()
    deadline = time.monotonic() + 110
    while not marker.exists() and trial.is_alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marker.exists(), result
    got_lock = threading.Event()

    def timed_section() -> None:
        with measure_lock():
            got_lock.set()

    threading.Thread(target=timed_section, daemon=True).start()
    assert got_lock.wait(60), "the compile lock stayed held"    # the watchdog's 10 s, with room for a busy machine
    trial.join(30)
    (measurement,) = result
    assert measurement.status is Status.TIMEOUT, measurement
    assert measurement.error.startswith("the compiled call of this config did not return within 10 s (50x the eager "
                                        "call's "), measurement.error
