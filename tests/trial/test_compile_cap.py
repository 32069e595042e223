"""The adaptive compile cap's rule (tuner.trial.compile_cap) and its trip in a TrialRequest."""
from __future__ import annotations

import json

import pytest

from tuner.trial import CAP_PREFIX, CompileCap, MeasureSpec, TrialRequest, adaptive_cap
from tuner.trial.compile_cap import FACTOR, FLOOR_S, MIN_COMPILES


def test_no_cap_until_enough_compiles_were_seen() -> None:
    assert adaptive_cap([]) is None
    assert adaptive_cap([20.0] * (MIN_COMPILES - 1)) is None
    assert adaptive_cap([20.0] * MIN_COMPILES) is not None


def test_the_cap_is_the_p90_times_the_factor_and_never_below_the_floor() -> None:
    times = [float(t) for t in range(1, 21)]         # p90 (nearest rank) of 1..20 s is 18 s
    cap = adaptive_cap(times)
    assert cap == CompileCap(seconds=18.0 * FACTOR, p90_s=18.0, compiles=20)
    quick = adaptive_cap([2.0, 2.5, 3.0, 2.2, 2.8, 1.9])
    assert quick.seconds == FLOOR_S and quick.p90_s == 3.0
    assert adaptive_cap([2.0] * 10, factor=2.0, floor_s=1.0).seconds == 4.0
    # an outlier among ten does not move the p90 far: one pathological compile cannot raise the cap much
    assert adaptive_cap([10.0] * 9 + [600.0]).p90_s == 10.0
    assert adaptive_cap([10.0, float("nan"), float("inf")] + [10.0] * 4).compiles == 5


def test_the_reason_says_the_cap_and_where_it_came_from() -> None:
    reason = CompileCap(seconds=41.0, p90_s=13.7, compiles=12).reason()
    assert reason.startswith(f"{CAP_PREFIX} of 41 s (p90 of 12 compiles 13.7 s x 3)")
    floored = CompileCap(seconds=30.0, p90_s=2.0, compiles=5).reason()
    assert "(p90 of 5 compiles 2.0 s x 3, at least 30 s)" in floored


@pytest.mark.parametrize("cap", [None, CompileCap(seconds=41.0, p90_s=13.7, compiles=12)])
def test_a_trial_request_carries_its_cap_through_json(cap: CompileCap | None) -> None:
    request = TrialRequest(spec=MeasureSpec("m.py"), params=(("max_autotune", True),), number=7, compile_cap=cap)
    data = json.loads(json.dumps(request.to_json()))
    assert ("compile_cap" in data) == (cap is not None)
    assert TrialRequest.from_json(data) == request
