"""Measurement pieces that need no compile: output checks, statistics, the confirmation decision."""
from __future__ import annotations

import json

import pytest
import torch

from tuner.confirm import DEFAULT, EAGER, ConfirmRequest, ConfirmResult, VariantResult, median_interval, speedup
from tuner.measure import compare_outputs, median_and_iqr
from tuner.trial import Candidate, Measurement, Status, TrialRequest
from tuner.verdict import Finalist, decide


def test_compare_outputs_by_dtype() -> None:
    ref = [torch.ones(4)]
    assert compare_outputs(ref, [torch.ones(4) + 1e-6]) is None
    assert "exceeds" in compare_outputs(ref, [torch.ones(4) + 1e-2])
    bf = [torch.ones(4, dtype=torch.bfloat16)]
    assert compare_outputs(bf, [bf[0] * 1.01]) is None                       # within bf16 tolerance
    assert "NaN" in compare_outputs(ref, [torch.tensor([1.0, float("nan"), 1.0, 1.0])])
    assert "Inf" in compare_outputs(ref, [torch.tensor([1.0, float("inf"), 1.0, 1.0])])
    assert "tensors" in compare_outputs(ref, [])
    assert compare_outputs([torch.arange(3)], [torch.arange(3) + 1]) is not None


def test_median_and_iqr() -> None:
    median, iqr = median_and_iqr([1.0, 2.0, 3.0, 4.0, 100.0])
    assert median == 3.0 and 0 < iqr < 100


def test_median_interval_covers_the_median_and_narrows_with_rounds() -> None:
    few = [0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5]
    lo, hi = median_interval(few)
    assert lo <= 1.2 <= hi
    many = [1.0 + 0.01 * (i % 10) for i in range(60)]
    lo2, hi2 = median_interval(many)
    assert hi2 - lo2 < hi - lo


def _variant(label: str, ms: list[float]) -> VariantResult:
    return VariantResult(label, Status.OK, compile_s=1.0, round_ms=tuple(ms))


def test_decide_keeps_defaults_when_the_gain_is_within_noise() -> None:
    noisy = ConfirmResult((_variant(EAGER, [2.0] * 8), _variant(DEFAULT, [1.0, 1.2, 0.9, 1.1, 1.0, 1.3, 0.8, 1.0]),
                           _variant("tuned #1", [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])))
    finalists = (Finalist("tuned #1", Candidate.from_dict({"max_fusion_size": 8})),)
    assert decide(noisy, finalists).winner is None


def test_decide_picks_a_gain_that_clears_the_noise() -> None:
    clear = ConfirmResult((_variant(DEFAULT, [1.0, 1.1, 0.95, 1.05, 1.0, 1.02, 0.98, 1.0]),
                           _variant("tuned #1", [0.8, 0.88, 0.76, 0.84, 0.8, 0.82, 0.78, 0.8])))
    finalists = (Finalist("tuned #1", Candidate.from_dict({"max_fusion_size": 8})),)
    verdict = decide(clear, finalists)
    assert verdict.winner == finalists[0]
    sp = verdict.speedup_of("tuned #1")
    assert sp.low > 1.0 and sp.median == pytest.approx(1.25)


def test_values_round_trip_through_json() -> None:
    request = TrialRequest(model_path="m.py", params=(("max_fusion_size", 8),), number=3, fault="hang")
    assert TrialRequest.from_json(json.loads(json.dumps(request.to_json()))) == request
    m = Measurement(status=Status.OK, latency_ms=1.5, spread_ms=0.1, compile_s=3.0, reps=20)
    assert Measurement.from_json(json.loads(json.dumps(m.to_json()))) == m
    conf = ConfirmRequest(model_path="m.py", variants=((EAGER, None), (DEFAULT, ()), ("x", (("a", 1),))))
    assert ConfirmRequest.from_json(json.loads(json.dumps(conf.to_json()))) == conf
    result = ConfirmResult((_variant(DEFAULT, [1.0, 2.0]),))
    assert ConfirmResult.from_json(json.loads(json.dumps(result.to_json()))) == result
    assert speedup(_variant(DEFAULT, [2.0] * 4), _variant("x", [1.0] * 4)).median == 2.0
