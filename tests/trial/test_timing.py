"""The rounds protocol on plain Python callables: interleaving, pairing and when it stops."""
from __future__ import annotations

import itertools
import json
import random
import time
from dataclasses import dataclass, replace
from typing import Any, Callable

import pytest

from tuner.trial import ConfirmRequest, MeasureSpec, RoundPlan, interleaved_rounds, paired_speedup
from tuner.trial.timing import LONG_SAMPLE_S, MIN_SAMPLE_S, calls_per_sample


@dataclass
class Busy:
    """Spins for `seconds` per call and logs its calls, so the order of variants is visible."""

    name: str
    seconds: float
    log: list[str]
    device: str = "cpu"
    clock: "VirtualClock | None" = None     # set: a call advances it instead of spinning

    def __post_init__(self) -> None:
        self.call: Callable[[], Any] = self._call
        self.sync: Callable[[], None] = lambda: None

    def _call(self) -> None:
        self.log.append(self.name)
        if self.clock is not None:
            self.clock.now += self.seconds
            return
        end = time.perf_counter() + self.seconds
        while time.perf_counter() < end:
            pass


@dataclass
class VirtualClock:
    """The timing module's clock where a test's figures must not depend on this machine's load:
    time passes only by the variants' own calls (2 cores shared with other workers preempt a
    spinning call for whole time slices, the slower variant more often)."""

    now: float = 0.0

    def perf_counter(self) -> float:
        return self.now


def test_a_steady_pair_stops_early_with_a_narrow_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    log: list[str] = []
    clock = VirtualClock()
    monkeypatch.setattr("tuner.trial.timing.time", clock)
    variants = {"default": Busy("d", 0.0004, log, clock=clock), "fast": Busy("f", 0.0002, log, clock=clock)}
    plan = RoundPlan(min_rounds=6, max_rounds=50, samples_per_round=3, target_width=0.5, budget_s=None)
    rounds = interleaved_rounds(variants, plan, baseline="default", rng=random.Random(0))
    assert len(rounds["default"]) == len(rounds["fast"]) < 50
    sp = paired_speedup(rounds["default"], rounds["fast"])
    assert sp.width <= 0.5 and 1.3 < sp.median < 3.0


def test_rounds_never_stop_before_the_minimum_nor_pass_the_maximum() -> None:
    log: list[str] = []
    variants = {"default": Busy("d", 0.0001, log), "other": Busy("o", 0.0001, log)}
    never_narrow = RoundPlan(min_rounds=3, max_rounds=7, target_width=0.0, budget_s=None)
    assert len(interleaved_rounds(variants, never_narrow, baseline="default", rng=random.Random(1))["other"]) == 7
    always_narrow = RoundPlan(min_rounds=6, max_rounds=40, target_width=10.0, budget_s=None)
    assert len(interleaved_rounds(variants, always_narrow, baseline="default", rng=random.Random(1))["other"]) == 6
    # Below 6 rounds an interval is unbounded (tuner.trial.stats.median_interval), so no width target is met.
    too_few = RoundPlan(min_rounds=4, max_rounds=40, target_width=10.0, budget_s=None)
    assert len(interleaved_rounds(variants, too_few, baseline="default", rng=random.Random(1))["other"]) == 6


def test_the_time_budget_ends_the_rounds() -> None:
    log: list[str] = []
    variants = {"default": Busy("d", 0.003, log), "other": Busy("o", 0.003, log)}
    plan = RoundPlan(min_rounds=2, max_rounds=1000, samples_per_round=1, target_width=0.0, budget_s=0.2)
    start = time.perf_counter()
    rounds = interleaved_rounds(variants, plan, baseline="default", rng=random.Random(2))
    assert 2 <= len(rounds["other"]) < 1000 and time.perf_counter() - start < 5.0


def test_the_order_of_variants_is_shuffled_per_round() -> None:
    log: list[str] = []
    variants = {"default": Busy("d", 0.0, log), "a": Busy("a", 0.0, log), "b": Busy("b", 0.0, log)}
    plan = RoundPlan(min_rounds=12, max_rounds=12, samples_per_round=1, target_width=None, budget_s=None, warmup=1)
    interleaved_rounds(variants, plan, baseline="default", rng=random.Random(3))
    timed = "".join(log[3:])                     # after one warm-up call each
    collapsed = "".join(c for i, c in enumerate(timed) if i == 0 or timed[i - 1] != c)
    fixed_orders = {"".join(p) * 12 for p in itertools.permutations("dab")}
    assert set(collapsed) == {"d", "a", "b"} and collapsed not in fixed_orders


def test_every_variant_of_a_run_takes_as_many_calls_per_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sample's fixed cost must not be spread over different counts: the faster variant takes
    no more calls per sample than the slower one (each calibrating alone, it took three times as many)."""
    log: list[str] = []
    clock = VirtualClock()
    monkeypatch.setattr("tuner.trial.timing.time", clock)
    variants = {"default": Busy("d", 0.0003, log, clock=clock), "fast": Busy("f", 0.0001, log, clock=clock)}
    plan = RoundPlan(min_rounds=3, max_rounds=3, samples_per_round=2, target_width=None, budget_s=None, warmup=2)
    interleaved_rounds(variants, plan, baseline="default", rng=random.Random(3))
    assert log.count("d") == log.count("f") >= 2 + 3 * 2 * 2        # warm-up, then 2 samples of >= 2 calls a round


def test_calls_per_sample_one_count_unless_the_samples_are_long() -> None:
    assert calls_per_sample({"default": 0.0003, "fast": 0.0001}, MIN_SAMPLE_S) == {"default": 20, "fast": 20}
    # One count (40) would make the slow variant's samples 120 ms: each takes its own for samples of >= 10 ms.
    per_call = {"default": 0.00005, "slow": 0.003}
    assert LONG_SAMPLE_S == 0.010 and calls_per_sample(per_call, MIN_SAMPLE_S) == {"default": 200, "slow": 4}
    assert calls_per_sample(per_call, MIN_SAMPLE_S, same=True) == {"default": 40, "slow": 40}   # training steps
    assert calls_per_sample({"a": 0.05, "b": 0.02}, MIN_SAMPLE_S) == {"a": 1, "b": 1}


def test_in_train_mode_every_variant_takes_as_many_steps_per_sample_even_when_long() -> None:
    """A training step changes the weights: a faster variant must not take more of them, even where
    an inference run would give each variant its own count for long samples."""
    log: list[str] = []
    variants = {"default": Busy("d", 0.003, log), "fast": Busy("f", 0.0001, log)}
    plan = MeasureSpec("m.py", mode="train", warmup=2).plan()
    plan = RoundPlan(min_rounds=2, max_rounds=2, samples_per_round=1, target_width=None, budget_s=None,
                     warmup=plan.warmup, same_calls=plan.same_calls)
    interleaved_rounds(variants, plan, baseline="default", rng=random.Random(3))
    assert log.count("d") == log.count("f") >= 2 + 2 * 2
    log.clear()
    inference = replace(plan, same_calls=MeasureSpec("m.py").plan().same_calls)
    interleaved_rounds(variants, inference, baseline="default", rng=random.Random(3))
    assert log.count("f") > log.count("d")          # inference: 10 ms samples each, not 30+ ms ones for "d"


def test_a_confirmation_honours_the_spec_warmup_and_train_rule() -> None:
    spec = MeasureSpec("m.py", warmup=9, mode="train")
    request = ConfirmRequest(spec=spec, variants=(("default", ()),), rounds=14, stage="claim")
    plan = request.plan()
    assert (plan.warmup, plan.same_calls, plan.min_rounds, plan.max_rounds) == (9, True, 14, 14)
    assert plan.budget_s is None and plan.target_width is None
    longer = replace(request, max_rounds=40, target_width=0.02).plan()
    assert (longer.min_rounds, longer.max_rounds, longer.target_width) == (14, 40, 0.02)
    wider = replace(request, max_rounds=40)
    assert ConfirmRequest.from_json(json.loads(json.dumps(wider.to_json()))) == wider
    assert [request.rng("compile").random() for _ in range(2)] == [request.rng("compile").random() for _ in range(2)]
    assert request.rng("compile").random() != replace(request, stage="selection").rng("compile").random()
