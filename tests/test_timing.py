"""The rounds protocol on plain Python callables: interleaving, pairing and when it stops."""
from __future__ import annotations

import itertools
import random
import time
from dataclasses import dataclass
from typing import Any, Callable

from tuner.trial import RoundPlan, interleaved_rounds, paired_speedup


@dataclass
class Busy:
    """Spins for `seconds` per call and logs its calls, so the order of variants is visible."""

    name: str
    seconds: float
    log: list[str]
    device: str = "cpu"

    def __post_init__(self) -> None:
        self.call: Callable[[], Any] = self._call
        self.sync: Callable[[], None] = lambda: None

    def _call(self) -> None:
        self.log.append(self.name)
        end = time.perf_counter() + self.seconds
        while time.perf_counter() < end:
            pass


def test_a_steady_pair_stops_early_with_a_narrow_interval() -> None:
    log: list[str] = []
    variants = {"default": Busy("d", 0.0004, log), "fast": Busy("f", 0.0002, log)}
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
    always_narrow = RoundPlan(min_rounds=5, max_rounds=40, target_width=10.0, budget_s=None)
    assert len(interleaved_rounds(variants, always_narrow, baseline="default", rng=random.Random(1))["other"]) == 5


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
