"""The verdict after a search, on the replay executor: recorded confirmation rounds with a
known answer go through `tuner.search.verdict.conclude` exactly as a real confirmation would.

Rounds are made like a noisy machine's: every variant of round i shares that round's drift
(up to ±25%), and each has its own jitter of about 1%, so only paired ratios are reliable.
"""
from __future__ import annotations

import math
from dataclasses import replace
import random
import statistics
from typing import Callable

import pytest

from tuner.keys import GraphFingerprint, Workload, platform_from_parts
from tuner.search.verdict import SEQUENTIAL_FACTOR, Finalist, best_configs, conclude, pick_finalists
from tuner.storage import StudyInfo, TrialRecord
from tuner.trial import (DEFAULT, EAGER, MIN_CONFIRM_ROUNDS, Candidate, MeasureSpec, Measurement, Status, halves,
                         speedup)
from tuner.workers.replay import EAGER_KEY, ReplayExecutor

SPEC = MeasureSpec("model.py")
ROUNDS = 20
A = {"max_fusion_size": 8}
B = {"epilogue_fusion": False}
ABC = {"max_fusion_size": 8, "epilogue_fusion": False, "aggressive_fusion": True}


def recorded(true_ms: dict[str | None, float], *, jitter: float = 0.01, seed: int = 0,
             count: int = SEQUENTIAL_FACTOR * ROUNDS) -> dict[str, tuple[float, ...]]:
    """`count` per-round latencies for each variant (None: eager; a dict: a config's params): by
    default as many as a confirmation's last look takes, so the replay never repeats a round."""
    rng = random.Random(seed)
    drift = [1.0 + rng.uniform(-0.25, 0.25) for _ in range(count)]
    out = {}
    for params, ms in true_ms.items():
        key = EAGER_KEY if params is None else Candidate.from_dict(dict(params)).key
        out[key] = tuple(ms * d * (1.0 + rng.gauss(0.0, jitter)) for d in drift)
    return out


def table(entries: list[tuple[dict | None, float]], **kw) -> dict[str, tuple[float, ...]]:
    return recorded({None if p is None else tuple(sorted(p.items())): ms for p, ms in entries}, **kw)


def finalists(*params: dict) -> tuple[Finalist, ...]:
    return tuple(Finalist(f"tuned #{i + 1}", Candidate.from_dict(p)) for i, p in enumerate(params))


def run(rounds: dict[str, tuple[float, ...]], final: tuple[Finalist, ...]):
    executor = ReplayExecutor({}, rounds=rounds)
    verdict = conclude(executor.run_confirmation, SPEC, final, rounds=ROUNDS)
    return verdict, executor


def per_process(*tables: dict[str, tuple[float, ...]]) -> tuple[Callable, list[ReplayExecutor]]:
    """A confirmation `run` whose n-th run replays `tables[n]`: each run is a process of its own,
    whose rounds (and luck) are not the others'."""
    executors = [ReplayExecutor({}, rounds=t) for t in tables]
    runs = iter(executors)
    return (lambda request: next(runs).run_confirmation(request)), executors


def lucky(rounds: dict[str, tuple[float, ...]], params: dict, parity: int, by: float = 0.7) -> None:
    """Make `params`' rounds of one parity (0: even, 1: odd) faster by `by`, as luck would."""
    key = Candidate.from_dict(params).key
    rounds[key] = tuple(ms * (by if i % 2 == parity else 1.0) for i, ms in enumerate(rounds[key]))


def test_a_difference_within_the_noise_keeps_the_defaults() -> None:
    rounds = table([(None, 2.0), ({}, 1.0), (A, 0.995), (B, 1.004)], jitter=0.03)
    verdict, _ = run(rounds, finalists(A, B))
    assert verdict.chosen == DEFAULT and verdict.stored is None and not verdict.eager


def test_a_true_difference_picks_the_faster_config() -> None:
    rounds = table([(None, 2.0), ({}, 1.0), (A, 0.80), (B, 0.90)])
    verdict, executor = run(rounds, finalists(A, B))
    assert verdict.stored.candidate == Candidate.from_dict(A)
    assert verdict.claim.clears_noise and verdict.claim.median == pytest.approx(1.25, rel=0.03)
    assert verdict.claim.rounds == ROUNDS // 2                       # the held-out half only
    assert len(executor.confirmations) == 2                          # one knob: selection, then the claim run


def test_too_few_rounds_give_an_unbounded_interval_and_keep_the_defaults() -> None:
    """5 rounds per half at the only look (a run that cannot go on): even their range covers the
    median with only 94%, so no claim is made."""
    rounds = table([(None, 2.0), ({}, 1.0), (A, 0.80)], count=10)
    executor = ReplayExecutor({}, rounds=rounds)
    verdict = conclude(lambda request: executor.run_confirmation(replace(request, max_rounds=None)), SPEC,
                       finalists(A), rounds=10)
    assert verdict.stored is None and verdict.chosen == DEFAULT
    sp = verdict.held_out(finalists(A)[0].label)
    assert sp.median == pytest.approx(1.25, rel=0.03) and (sp.low, sp.high) == (-math.inf, math.inf)
    assert MIN_CONFIRM_ROUNDS == 12 and ROUNDS >= MIN_CONFIRM_ROUNDS


def test_the_claim_comes_from_rounds_that_played_no_part_in_the_choice() -> None:
    """Lucky even rounds choose A in the selection run; the claim run, a process of its own, has
    luck of its own, and there A gains nothing."""
    chose = table([(None, 2.0), ({}, 1.0), (A, 1.0)])
    lucky(chose, A, parity=0)
    run_in, _ = per_process(chose, table([(None, 2.0), ({}, 1.0), (A, 1.0)], seed=1))
    verdict = conclude(run_in, SPEC, finalists(A), rounds=ROUNDS)
    assert verdict.stored is None and verdict.chosen == DEFAULT
    assert any("did not clear the noise" in note and "claim run" in note for note in verdict.notes)


def test_a_gain_only_in_the_reported_half_is_not_stored() -> None:
    """The gate is the claim run's even rounds, the figure its odd ones. A config that gains only in
    the odd rounds is not stored; gated and reported on the odd rounds, it was, at an inflated 1.43x."""
    claim = table([(None, 2.0), ({}, 1.0), (A, 1.0)], seed=1)
    lucky(claim, A, parity=1)
    run_in, _ = per_process(table([(None, 2.0), ({}, 1.0), (A, 0.8)]), claim)
    verdict = conclude(run_in, SPEC, finalists(A), rounds=ROUNDS)
    assert verdict.stored is None and verdict.chosen == DEFAULT and verdict.claim is None


def test_the_stored_figure_comes_from_rounds_the_gate_did_not_see() -> None:
    """A config that clears the gate on lucky even rounds is stored with the odd rounds' figure,
    not the 1.43x that let it through."""
    claim = table([(None, 2.0), ({}, 1.0), (A, 1.0)], seed=1)
    lucky(claim, A, parity=0)
    run_in, _ = per_process(table([(None, 2.0), ({}, 1.0), (A, 0.8)]), claim)
    verdict = conclude(run_in, SPEC, finalists(A), rounds=ROUNDS)
    assert verdict.stored.candidate == Candidate.from_dict(A)
    assert verdict.claim.median == pytest.approx(1.0, abs=0.03) and verdict.claim.rounds == ROUNDS // 2


def test_a_marginal_configs_stored_figure_is_not_biased_by_the_gate() -> None:
    """300 claim runs of a config 1% faster than the default (1% jitter a round): 219 pass the gate (the
    sequential test goes on to 80 rounds while undecided). Their stored figures average what every
    run's reported half averages, stored or not (1.0101 against 1.0102); gated on the half it
    reported, 20 fixed rounds' stored figures averaged 1.0131."""
    stored, every = [], []
    for seed in range(300):
        run_in, _ = per_process(table([(None, 2.0), ({}, 1.0), (A, 0.8)], seed=10_000 + seed),
                                table([(None, 2.0), ({}, 1.0), (A, 1 / 1.01)], seed=seed))
        verdict = conclude(run_in, SPEC, finalists(A), rounds=ROUNDS)
        every.append(speedup(halves(verdict.claim_run)[1].get(DEFAULT), halves(verdict.claim_run)[1].get("tuned #1")))
        if verdict.stored is not None:
            stored.append(verdict.claim.median)
    assert 30 <= len(stored) <= 270
    assert statistics.mean(stored) == pytest.approx(statistics.mean(sp.median for sp in every), abs=0.001)


def test_each_run_has_a_stage_of_its_own() -> None:
    """The selection, ablation and claim runs are seeded by their stage: each compiles and times
    its variants in an order of its own, not one that differs only because its variant list does."""
    ab = {**A, **B}
    verdict, executor = run(table([(None, 2.0), ({}, 1.0), (ab, 0.70), (A, 0.85), (B, 0.85)]), finalists(ab))
    assert verdict.stored is not None
    assert [r.stage for r in executor.confirmations] == ["selection", "ablation-1", "claim"]
    orders = {r.stage: r.rng("compile").random() for r in executor.confirmations}
    assert len(set(orders.values())) == 3
    _, eager = run(table([(None, 0.5), ({}, 1.0), (A, 0.9)]), finalists(A))
    assert [r.stage for r in eager.confirmations] == ["selection", "claim"]


def test_the_claim_comes_from_a_process_that_did_not_choose() -> None:
    """A config faster only in the process that chose it (a lucky autotune pick, a memory layout)
    is not stored: the claim run, a confirmation of its own, does not see it."""
    chose = ReplayExecutor({}, rounds=table([(None, 2.0), ({}, 1.0), (A, 0.80)]))
    fresh = ReplayExecutor({}, rounds=table([(None, 2.0), ({}, 1.0), (A, 1.0)], seed=1))
    runs = iter([chose, fresh])
    verdict = conclude(lambda r: next(runs).run_confirmation(r), SPEC, finalists(A), rounds=ROUNDS)
    assert verdict.held_out(finalists(A)[0].label).clears_noise      # the choosing process saw 1.25x
    assert len(chose.confirmations) == len(fresh.confirmations) == 1
    assert verdict.stored is None and verdict.chosen == DEFAULT
    assert any("did not clear the noise" in note and "claim run" in note for note in verdict.notes)


def test_ablation_keeps_exactly_the_knobs_that_matter() -> None:
    only_a = {"max_fusion_size": 8}
    rounds = table([(None, 2.0), ({}, 1.0), (ABC, 0.80), (only_a, 0.80),
                    ({"epilogue_fusion": False, "aggressive_fusion": True}, 1.0),       # without max_fusion_size
                    ({"max_fusion_size": 8, "aggressive_fusion": True}, 0.80),          # without epilogue_fusion
                    ({"max_fusion_size": 8, "epilogue_fusion": False}, 0.80)])          # without aggressive_fusion
    verdict, executor = run(rounds, finalists(ABC))
    assert verdict.ablation.minimal == Candidate.from_dict(only_a)
    assert set(verdict.ablation.dropped) == {"epilogue_fusion", "aggressive_fusion"}
    assert verdict.stored.candidate == Candidate.from_dict(only_a)
    # selection, the elimination's steps (the last re-confirming the drops before it), the claim run
    stages = [r.stage for r in executor.confirmations]
    assert stages[0] == "selection" and stages[-1] == "claim" and len(stages) >= 4
    assert stages[1:-1] == [f"ablation-{n}" for n in range(1, len(stages) - 1)]
    assert verdict.claim.clears_noise


def test_ablation_keeps_two_knobs_that_both_matter() -> None:
    ab = {**A, **B}
    rounds = table([(None, 2.0), ({}, 1.0), (ab, 0.70), (A, 0.85), (B, 0.85)])
    verdict, executor = run(rounds, finalists(ab))
    assert verdict.ablation.minimal == Candidate.from_dict(ab) and verdict.ablation.dropped == ()
    assert verdict.stored.candidate == Candidate.from_dict(ab)
    assert len(executor.confirmations) == 3                          # nothing dropped: still a claim run of its own


def test_eager_wins_when_it_is_faster_beyond_the_noise() -> None:
    rounds = table([(None, 0.5), ({}, 1.0), (A, 0.9)])
    verdict, _ = run(rounds, finalists(A))
    assert verdict.eager and verdict.stored is None
    study = StudyInfo(1, "w", "p", "s", "tpe", 0, 5, None, "u", "h")
    workload = Workload(key="w" * 32, name="m", graphs=(GraphFingerprint(key="g" * 32, index=0, num_nodes=3,
                                                                         input_meta="", code=""),))
    platform = platform_from_parts("cpu", {"cpu": "x"}, {"torch": "2.13"})
    best, = best_configs(verdict, workload=workload, platform=platform, study=study, user="u")
    assert best.eager and not best.is_default and best.params == {} and best.speedup > 1.5


def test_a_freezing_winner_gets_a_config_without_freezing_beside_it() -> None:
    frozen = {"freezing": True, **A}
    rounds = table([(None, 2.0), ({}, 1.0), (frozen, 0.7), (A, 0.9), (B, 0.95)])
    verdict, executor = run(rounds, finalists(frozen, B))
    assert verdict.stored.candidate == Candidate.from_dict(frozen)
    assert verdict.unfrozen.candidate == Candidate.from_dict(A)      # the winner without freezing beat B
    assert verdict.unfrozen_claim.clears_noise
    labels = [label for label, _ in executor.confirmations[-1].variants]
    assert EAGER in labels and DEFAULT in labels


def test_finalists_rank_by_the_paired_ratio_not_the_latency() -> None:
    def rec(n: int, params: dict, ms: float, sp: float) -> TrialRecord:
        return TrialRecord(n, Candidate.from_dict(params).key, params,
                           Measurement(Status.OK, latency_ms=ms, speedup=sp, speedup_low=sp, speedup_high=sp, reps=8))
    records = (rec(0, {}, 1.0, 1.0), rec(1, A, 0.5, 1.02), rec(2, B, 0.9, 1.2))   # A ran in a fast process
    picked = pick_finalists(records, top=1)
    assert [f.candidate for f in picked] == [Candidate.from_dict(B)]
    assert picked[0].search.median == 1.2


def test_beside_a_freezing_winner_eager_can_be_what_the_plain_backend_runs() -> None:
    frozen = {"freezing": True, **A}
    rounds = table([(None, 0.8), ({}, 1.0), (frozen, 0.5), (A, 0.98)])       # eager beats A and the default
    verdict, _ = run(rounds, finalists(frozen))
    assert verdict.stored.candidate == Candidate.from_dict(frozen) and verdict.unfrozen_eager
    study = StudyInfo(1, "w", "p", "s", "tpe", 0, 5, None, "u", "h")
    workload = Workload(key="w" * 32, name="m", graphs=(GraphFingerprint(key="g" * 32, index=0, num_nodes=3,
                                                                         input_meta="", code=""),))
    best, = best_configs(verdict, workload=workload, platform=platform_from_parts("cpu", {"cpu": "x"}, {}),
                         study=study, user="u")
    assert best.unfrozen_eager and best.unfrozen_params == {} and best.unfrozen_speedup > 1.1


def test_the_choice_without_freezing_is_reported_from_rounds_that_did_not_choose_it() -> None:
    """The config for the plain backend is chosen, among those that clear the noise, on the claim
    run's even rounds, and its figure comes from the odd ones: lucky even rounds choose A, and
    its figure is the odd rounds' 1.0x, not 1.43x. Lucky odd rounds alone choose nothing."""
    frozen = {"freezing": True, **A}
    rounds = table([(None, 2.0), ({}, 1.0), (frozen, 0.6), (A, 1.0)])
    lucky(rounds, A, parity=0)
    verdict, _ = run(rounds, finalists(frozen))
    assert verdict.stored.candidate == Candidate.from_dict(frozen) and verdict.claim.clears_noise
    assert verdict.unfrozen.candidate == Candidate.from_dict(A)
    assert verdict.unfrozen_claim.median == pytest.approx(1.0, abs=0.03)
    rounds = table([(None, 2.0), ({}, 1.0), (frozen, 0.6), (A, 1.0)])
    lucky(rounds, A, parity=1)
    verdict, _ = run(rounds, finalists(frozen))
    assert verdict.unfrozen.label == DEFAULT and verdict.unfrozen.candidate == Candidate()
    assert verdict.unfrozen_claim is None and not verdict.unfrozen_eager


def test_the_summary_says_why_the_defaults_stayed_beside_intervals_above_one() -> None:
    from tuner.cli.summary import verdict_lines

    rounds = table([(None, 2.0), ({}, 1.0), (A, 1.0)])
    key = Candidate.from_dict(A).key
    rounds[key] = tuple(ms * (0.7 if i % 2 else 1.0) for i, ms in enumerate(rounds[key]))   # lucky odd rounds
    verdict, _ = run(rounds, finalists(A))
    assert verdict.stored is None and verdict.held_out("tuned #1").clears_noise
    line = verdict_lines(verdict)[0]
    assert "nothing cleared the noise" not in line and "the other half of the rounds, which chooses" in line, line
    plain, _ = run(table([(None, 2.0), ({}, 1.0), (A, 0.995)], jitter=0.03), finalists(A))
    assert "nothing cleared the noise" in verdict_lines(plain)[0]


def test_a_tie_that_does_not_hold_up_in_the_claim_run_stores_the_faster_config() -> None:
    """The selection cannot tell A (one knob) from AB (two, faster by a hair there) and chooses A, the
    simpler; AB joins the claim run, a process of its own, where it is faster beyond the noise."""
    ab = {**A, **B}
    tied = table([(None, 2.0), ({}, 1.0), (A, 0.80), (ab, 0.795)], jitter=0.02)
    apart = table([(None, 2.0), ({}, 1.0), (A, 0.80), (ab, 0.70)], seed=3)
    run_in, executors = per_process(tied, apart)
    verdict = conclude(run_in, SPEC, finalists(A, ab), rounds=ROUNDS)
    assert verdict.picked.chosen == "tuned #1" and verdict.picked.best == "tuned #2"
    assert verdict.stored.candidate == Candidate.from_dict(ab)
    assert any("the tie did not hold up" in n for n in verdict.notes)
    assert {label for label, _ in executors[1].confirmations[0].variants} >= {"tuned #1", "tuned #2"}
