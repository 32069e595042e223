"""The adaptive compile cap inside the trial process (tuner.measure.compile_cap): a candidate's
compile past the cap is stopped and recorded as a TIMEOUT saying so; the baseline's never is."""
from __future__ import annotations

import time

import pytest

import tuner.measure.core as core
from helpers import MODELS
from tuner.measure import Rejected, Runner, run_trial
from tuner.measure.compile_cap import CompileStopped, armed, capped, stopped
from tuner.trial import CAP_PREFIX, CompileCap, MeasureSpec, Status, TrialRequest

QUICK = {"repeat": 2, "warmup": 1}
# pytest-timeout's default method holds the real-time timer, and the cap never takes a timer in use.
pytestmark = pytest.mark.timeout(600, method="thread")


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.01)


def test_a_capped_section_past_the_cap_raises_and_one_within_it_does_not() -> None:
    cap = CompileCap(seconds=0.2, p90_s=0.05, compiles=5)
    with armed(cap):
        with capped():
            _spin(0.05)
        with pytest.raises(CompileStopped) as info, capped():
            _spin(5.0)
    assert str(info.value) == cap.reason() and str(info.value).startswith(CAP_PREFIX)
    with capped():          # nothing armed: no cap
        _spin(0.3)


def test_a_stop_swallowed_inside_the_section_is_raised_on_its_way_out() -> None:
    """Inductor catches broadly in places (autotuning a choice): the stop must still stop it."""
    cap = CompileCap(seconds=0.1, p90_s=0.02, compiles=5)
    swallowed = []
    with pytest.raises(CompileStopped), armed(cap), capped():
        try:
            _spin(5.0)
        except Exception as exc:  # noqa: BLE001 - what a broad handler in the compile would do
            swallowed.append(exc)
    assert len(swallowed) == 1


def test_the_stop_is_found_through_the_wrapping_of_dynamo_and_inductor() -> None:
    cap = CompileCap(seconds=1.0, p90_s=0.2, compiles=5)
    try:
        try:
            raise CompileStopped(cap)
        except CompileStopped as inner:
            raise RuntimeError("backend compiler failed") from inner
    except RuntimeError as outer:
        try:
            raise ValueError("while handling it") from None
        except ValueError as later:
            later.__context__ = outer
            assert stopped(later) is not None and stopped(later).cap == cap
    assert stopped(RuntimeError("plain")) is None


def test_a_slow_candidate_compile_is_stopped_at_the_cap_while_the_baseline_compiles(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """slow_trace.py's every compile takes seconds at trace time (its custom op's fake kernel sleeps),
    the default compile included: the baseline, never capped, compiles for longer than the cap and
    passes; the candidate, capped at 0.3 s, is stopped inside Dynamo's tracing (which wraps what it
    raises) and recorded as a timeout with the cap's reason."""
    prepared = []
    real = core.prepare

    def spy(spec: MeasureSpec, params: tuple | None) -> object:
        prepared.append(real(spec, params))
        return prepared[-1]

    monkeypatch.setattr(core, "prepare", spy)
    cap = CompileCap(seconds=0.3, p90_s=0.1, compiles=6, floor_s=0.3)
    request = TrialRequest(spec=MeasureSpec(str(MODELS / "slow_trace.py"), **QUICK),
                           params=(("max_fusion_size", 8),), number=3, compile_cap=cap)
    measured = run_trial(request)
    assert measured.status is Status.TIMEOUT, measured.error
    assert measured.error.partition("\n")[0] == cap.reason()
    baseline, candidate = prepared
    assert isinstance(baseline, Runner) and baseline.compile_s > cap.seconds
    assert isinstance(candidate, Rejected) and candidate.status is Status.TIMEOUT
