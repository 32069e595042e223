"""One question, one answer: configs that cannot be told apart store the simplest; backward elimination
re-confirms each step; the stability figure (`tuner.search.equivalence`, `tuner.search.elimination`)."""
from __future__ import annotations

import random

from tuner.search.elimination import eliminate
from tuner.search.equivalence import choose_simplest, simplicity, stability
from tuner.trial import DEFAULT, EAGER, Candidate, ConfirmResult, Status, VariantResult


def result(ms: dict[str, float], *, rounds: int = 20, sigma: float = 0.005, seed: int = 0) -> ConfirmResult:
    """Per-round latencies around `ms`, with noise of `sigma`, paired by round."""
    rng = random.Random(seed)
    return ConfirmResult(variants=tuple(
        VariantResult(label, Status.OK, round_ms=tuple(m * (1 + rng.gauss(0, sigma)) for _ in range(rounds)))
        for label, m in ms.items()))


PARAMS = {EAGER: None, "mode max-autotune": {"mode": "max-autotune-no-cudagraphs"},
          "tuned #1": {"freezing": True, "max_fusion_size": 8, "cpp_wrapper": True}, "tuned #2": {"freezing": True}}


def test_the_simplest_of_the_configs_tied_with_the_best_is_chosen() -> None:
    tied = result({DEFAULT: 10.0, EAGER: 12.0, "tuned #1": 8.0, "tuned #2": 8.01, "mode max-autotune": 9.5})
    picked = choose_simplest(tied, [EAGER, "tuned #1", "tuned #2", "mode max-autotune"], PARAMS)
    assert picked.best in ("tuned #1", "tuned #2") and picked.chosen == "tuned #2"
    assert "could not be told apart" in picked.text() and "passed over: tuned #1" in picked.text()
    apart = result({DEFAULT: 10.0, EAGER: 12.0, "tuned #1": 7.0, "tuned #2": 8.0})
    assert choose_simplest(apart, [EAGER, "tuned #1", "tuned #2"], PARAMS).chosen == "tuned #1"
    none = result({DEFAULT: 10.0, EAGER: 12.0, "tuned #1": 10.02}, sigma=0.05)
    assert choose_simplest(none, [EAGER, "tuned #1"], PARAMS).chosen == DEFAULT


def test_the_order_of_simplicity() -> None:
    order = sorted(PARAMS, key=lambda label: simplicity(label, PARAMS[label]))
    assert order == [EAGER, "mode max-autotune", "tuned #2", "tuned #1"]
    assert simplicity(DEFAULT, {}) < simplicity(EAGER, None)


class Knobs:
    """Stand-in confirmation runs: a config's latency is 10 ms divided by each knob's factor, and
    `either` (a pair of redundant knobs) is worth `pair` when one of them or both are present."""

    def __init__(self, factors: dict[str, float], either: tuple[str, str] | None = None, pair: float = 1.0):
        self.factors, self.either, self.pair, self.runs = factors, either, pair, []

    def __call__(self, variants: list[tuple[str, Candidate | None]], stage: str) -> ConfirmResult:
        self.runs.append([label for label, _ in variants])
        ms = {}
        for label, cand in variants:
            value = 10.0
            params = cand.as_dict()
            for knob in params:
                value /= self.factors.get(knob, 1.0)
            if self.either and any(k in params for k in self.either):
                value /= self.pair
            ms[label] = value
        return result(ms, rounds=20, seed=len(self.runs))


def test_backward_elimination_drops_what_does_nothing_and_keeps_what_matters() -> None:
    run = Knobs({"freezing": 1.2})
    chosen = Candidate.from_dict({"freezing": True, "max_fusion_size": 8, "cpp_wrapper": True, "epilogue_fusion": False})
    done = eliminate(run, chosen)
    assert done.minimal == Candidate.from_dict({"freezing": True})
    assert set(done.dropped) == {"max_fusion_size", "cpp_wrapper", "epilogue_fusion"}
    assert done.effect("freezing").clears_noise and "no knob can be dropped" in done.stopped
    assert len(run.runs) == 2 and "before this step" in run.runs[1]     # the drop was re-confirmed


def test_knobs_dropped_together_that_mattered_together_are_undone_and_dropped_one_at_a_time() -> None:
    """Two redundant knobs: either alone gives the gain, so each alone is droppable, but not both."""
    run = Knobs({"freezing": 1.2}, either=("max_fusion_size", "cpp_wrapper"), pair=1.2)
    chosen = Candidate.from_dict({"freezing": True, "max_fusion_size": 8, "cpp_wrapper": True})
    done = eliminate(run, chosen)
    assert [step.undone for step in done.steps] == [False, True, False]
    kept = set(done.minimal.as_dict())
    assert "freezing" in kept and len(kept & {"max_fusion_size", "cpp_wrapper"}) == 1


def test_stability_is_the_share_of_resamples_where_the_stored_config_is_fastest_or_tied() -> None:
    clear = result({DEFAULT: 10.0, EAGER: 12.0, "tuned": 8.0}, rounds=10)
    assert stability(clear, "tuned") == 1.0
    assert stability(clear, DEFAULT) == 0.0
    close = result({DEFAULT: 10.0, "a": 8.0, "b": 8.05}, rounds=10, sigma=0.03)
    assert 0.0 < stability(close, "b") < 1.0
    assert stability(clear, "missing") is None
