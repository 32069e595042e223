"""Pruning (tuner/trial/pruning.py): the round-by-round decision on hand-made histories, the rounds
protocol stopping on it, the replay executor honouring it (with and without noise) on a table
with a known answer, the driver's bookkeeping, and one real trial that is pruned."""
from __future__ import annotations

import io
import itertools
import json
import math
import random
import time
from pathlib import Path
from typing import Any, Callable

import optuna
import pytest

from helpers import MODELS, run_main
from tuner.cli.progress import Progress
from tuner.cli.results import trials_table
from tuner.errors import UsageError
from tuner.platform import Platform
from tuner.search import SearchOptions, Target
from tuner.search.driver import Driver, open_study
from tuner.search.verdict import pick_finalists
from tuner.search_spaces import load_space
from tuner.storage import Store, TrialRecord, ensure_schema
from tuner.trial import (Candidate, MeasureSpec, Measurement, PruneHistory, RoundPlan, RoundPruner, RoundValues, Status,
                         TrialRequest, interleaved_rounds, paired_speedup, replay_pruning)
from tuner.trial.pruning import PruneSpec, step_values
from tuner.workers.isolation import run_isolated
from tuner.workers.replay import ReplayExecutor
from tuner.keys import GraphFingerprint, Workload

# Six finished trials: four at ratio 1.0 for 12 rounds, and two (0.9, 1.1) that stopped after 6.
HISTORY = tuple((1.0,) * 12 for _ in range(4)) + ((0.9,) * 6, (1.1,) * 6)


# -- the decision -------------------------------------------------------------------------

def stops_at(spec: PruneSpec, values: list[float]) -> int | None:
    return replay_pruning(spec, values).stopped_at


def test_a_slow_trial_stops_at_the_warm_up_and_a_fast_one_never() -> None:
    spec = PruneSpec("median", HISTORY, min_rounds=6)
    assert stops_at(spec, [1.3] * 12) == 6              # never before min_rounds, however slow
    assert stops_at(spec, [0.95] * 12) is None
    # The best value so far is what counts: a trial that was fast once is not pruned for a bad round.
    assert stops_at(spec, [0.95] * 6 + [1.3] * 6) is None
    # Past round 6 only four finished trials reached the round: too few (min_trials 5) to judge.
    assert stops_at(spec, [1.0] * 6 + [1.5] * 6) is None


def test_the_percentile_pruner_stops_only_the_slowest() -> None:
    history = tuple(tuple([v] * 8) for v in (0.8, 0.9, 1.0, 1.1, 1.2, 1.3))
    slightly_slow = [1.12] * 8                          # above the median (1.05), below the 75th percentile
    assert stops_at(PruneSpec("median", history), slightly_slow) == 6
    assert stops_at(PruneSpec("percentile", history), slightly_slow) is None
    assert stops_at(PruneSpec("percentile", history), [1.3] * 8) == 6
    assert stops_at(PruneSpec("none", history), [9.0] * 8) is None


def test_nothing_is_pruned_with_too_short_a_history_nor_at_the_last_round() -> None:
    assert not PruneSpec("median", HISTORY[:4]).active
    assert stops_at(PruneSpec("median", HISTORY[:4]), [5.0] * 12) is None
    assert stops_at(PruneSpec("median", HISTORY), [5.0] * 6) is None     # round 6 is its last: it finished


def test_the_reason_is_one_line_naming_round_ratio_and_rule() -> None:
    pruner = replay_pruning(PruneSpec("median", HISTORY), [1.3] * 12)
    assert pruner.reason() == ("pruned after 6 rounds: ratio 1.300, above the median of the 6 finished trials "
                               "at that round")
    pruner = replay_pruning(PruneSpec("percentile", HISTORY), [1.3] * 12)
    assert pruner.reason() == ("pruned after 6 rounds: ratio 1.300, above the 75th percentile of the 6 finished "
                               "trials at that round")


def test_round_values_are_computed_once_and_feed_the_pruner() -> None:
    values = RoundValues()
    assert values.all([10.0], [8.0]) == step_values([10.0], [8.0])
    assert values.all([10.0, 10.0], [8.0, 12.0]) == step_values([10.0, 10.0], [8.0, 12.0])
    assert not values.should_stop([10.0] * 3, [9.0] * 3)        # no pruner: never stops
    pruning = RoundValues(RoundPruner(PruneSpec("median", HISTORY)))
    stopped = next(k for k in range(1, 12) if pruning.should_stop([1.0] * k, [1.3] * k))
    assert stopped == 6 and pruning.all([1.0] * 6, [1.3] * 6) == (1.3,) * 6


def test_step_values_end_at_the_objective() -> None:
    baseline, candidate = [10.0, 10.0, 10.0, 10.0], [8.0, 12.0, 9.0, 11.0]
    values = step_values(baseline, candidate)
    assert len(values) == 4 and values[0] == pytest.approx(0.8)
    sp = paired_speedup(baseline, candidate)
    assert values[-1] == pytest.approx(Measurement(Status.OK, speedup=sp.median).objective)


def test_specs_and_requests_round_trip_through_json_and_names_are_checked() -> None:
    spec = PruneSpec("percentile", HISTORY, min_rounds=4, min_trials=3, percentile=60.0)
    assert PruneSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec
    request = TrialRequest(MeasureSpec("m.py"), (("max_autotune", True),), number=4, pruning=spec)
    assert TrialRequest.from_json(json.loads(json.dumps(request.to_json()))) == request
    assert "pruning" not in TrialRequest(MeasureSpec("m.py"), ()).to_json()       # older JSON unchanged
    pruned = Measurement(Status.PRUNED, latency_ms=2.0, speedup=0.8, reps=6, intermediate=(1.3, 1.25))
    assert Measurement.from_json(json.loads(json.dumps(pruned.to_json()))) == pruned
    assert "intermediate" not in Measurement(Status.OK, latency_ms=1.0).to_json()
    with pytest.raises(UsageError, match="unknown pruner 'hyperband'; choose one of: median, percentile, none"):
        PruneSpec("hyperband")
    with pytest.raises(UsageError, match="unknown pruner 'x'; choose one of: median, percentile, none"):
        SearchOptions(measure=MeasureSpec("m.py"), trials=3, pruner="x")


def test_the_cli_refuses_an_unknown_pruner_before_any_work(tmp_path: Path) -> None:
    db = tmp_path / "never.db"
    done = run_main("search", str(tmp_path / "missing.py"), "--pruner", "asha", "--db", f"sqlite:///{db}")
    assert done.returncode == 2
    assert "error: unknown pruner 'asha'; choose one of: median, percentile, none" in done.stderr
    assert not db.exists()


def test_progress_and_the_trials_table_show_pruned_apart_from_failed() -> None:
    pruned = Measurement(Status.PRUNED, latency_ms=1.3, baseline_ms=1.0, speedup=0.77, speedup_low=0.7,
                         speedup_high=0.8, reps=6, error="pruned after 6 rounds: ratio 1.300 vs median 1.000 of 6 "
                                                         "finished trials")
    records = [TrialRecord(number=0, candidate_key="a", params={}, measurement=Measurement(Status.OK, latency_ms=1.0)),
               TrialRecord(number=1, candidate_key="b", params={"max_autotune": True}, measurement=pruned),
               TrialRecord(number=2, candidate_key="c", params={"cpp_wrapper": True},
                           measurement=Measurement.failed(Status.COMPILE_ERROR, "boom"))]
    stream = io.StringIO()
    progress = Progress(3, stream=stream)
    for record in records:
        progress.update(record)
    lines = stream.getvalue().splitlines()
    assert "1/3 trials, 0 failed," in lines[0] and "2/3 trials, 0 failed, 1 pruned," in lines[1]
    assert "3/3 trials, 1 failed, 1 pruned," in lines[2] and lines[1].endswith("trial 1: pruned (max_autotune=True)")
    row = trials_table(records).splitlines()[2]
    assert row.split()[:3] == ["1", "pruned", "1.300"] and row.endswith(f"max_autotune=True | {pruned.error}")


# -- the rounds protocol stops on it --------------------------------------------------------

class Spin:
    """A real callable that spins for `seconds` per call."""

    device = "cpu"

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.call: Callable[[], Any] = self._call
        self.sync: Callable[[], None] = lambda: None

    def _call(self) -> None:
        end = time.perf_counter() + self.seconds
        while time.perf_counter() < end:
            pass


def test_interleaved_rounds_stop_when_should_stop_says_and_never_after_the_last() -> None:
    plan = RoundPlan(min_rounds=2, max_rounds=5, samples_per_round=1, target_width=None, budget_s=None, warmup=1)
    variants = {"default": Spin(0.0002), "candidate": Spin(0.0004)}
    asked: list[int] = []

    def stop_at_three(rounds: Any) -> bool:
        asked.append(len(rounds["candidate"]))
        return len(rounds["candidate"]) == 3

    rounds = interleaved_rounds(variants, plan, baseline="default", rng=random.Random(0), should_stop=stop_at_three)
    assert len(rounds["default"]) == len(rounds["candidate"]) == 3 and asked == [1, 2, 3]
    asked.clear()
    rounds = interleaved_rounds(variants, plan, baseline="default", rng=random.Random(0),
                                should_stop=lambda r: asked.append(len(r["candidate"])) or False)
    assert len(rounds["candidate"]) == 5 and asked == [1, 2, 3, 4]


# -- a replay table with a known answer -----------------------------------------------------

WORKLOAD = Workload(key="w" * 32, name="recorded", graphs=(GraphFingerprint("g" * 32, 0, 3, "[]", "graph"),))
PLATFORM = Platform(key="p" * 24, hardware_key="h" * 24, software_key="s" * 24, device="cuda",
                    hardware=(("gpu_name", "NVIDIA H200"),), software=(("torch", "2.13.0"),))
# Knob -> (the value with an effect, the factor it applies to the ratio candidate/default). The
# known best is max_autotune with combo_kernels (0.765); the next is 11% slower.
EFFECTS = {"max_autotune": (True, 0.85), "combo_kernels": (True, 0.90), "aggressive_fusion": (True, 1.04),
           "benchmark_fusion": (True, 1.35), "epilogue_fusion": (False, 1.30)}


@pytest.fixture
def target(tmp_path: Path) -> Target:
    path = tmp_path / "space.json"
    path.write_text(json.dumps({"name": "five", "knobs": [{"name": k, "kind": "bool"} for k in EFFECTS]}))
    return Target(workload=WORKLOAD, platform=PLATFORM, space=load_space("cuda", path=path))


def table(target: Target, rounds: int = 12) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Every candidate's recorded trial (per-round noise of 4%, step values included) in the
    {"params", "measurement"} row format, and each candidate key's true ratio."""
    rows, truth = [], {}
    for i, on in enumerate(itertools.product([False, True], repeat=len(EFFECTS))):
        params = {knob: value if flag else not value for (knob, (value, _)), flag in zip(EFFECTS.items(), on)}
        ratio = math.prod(factor for (_, factor), flag in zip(EFFECTS.values(), on) if flag)
        rng = random.Random(i)
        candidate, baseline = [10 * ratio * math.exp(rng.gauss(0, 0.04)) for _ in range(rounds)], [10.0] * rounds
        sp = paired_speedup(baseline, candidate)
        measured = Measurement(Status.OK, latency_ms=sorted(candidate)[rounds // 2], baseline_ms=10.0,
                               speedup=sp.median, speedup_low=sp.low, speedup_high=sp.high, reps=rounds,
                               intermediate=step_values(baseline, candidate))
        chosen = target.space.candidate(target.space.complete(params))      # its non-default knobs
        rows.append({"params": chosen.as_dict(), "measurement": measured.to_json()})
        truth[chosen.key] = ratio
    return rows, truth


def search(target: Target, store: Store, executor: ReplayExecutor, *, trials: int, seed: int, pruner: str,
           resume: bool = False):
    job = SearchOptions(measure=MeasureSpec("recorded.py"), trials=trials, seed=seed, pruner=pruner, resume=resume)
    study = open_study(job, target, store, user="tester")
    driver = Driver(job, target, store=store, executor=executor)
    if resume:
        driver.replay(store.trials(study.id))
    return driver, driver.run(study)


@pytest.mark.parametrize(("pruner", "seed", "noise"), [("median", 0, 0.0), ("median", 1, 0.03), ("median", 2, 0.03),
                                                      ("percentile", 3, 0.03)])
def test_pruning_never_prunes_the_winner_and_prunes_clearly_slow_trials(target: Target, tmp_path: Path, pruner: str,
                                                                       seed: int, noise: float) -> None:
    """Over the whole space (32 trials of 32 candidates, so whatever the sampler proposes first,
    every candidate is measured): the known best is never pruned and stays the search's best."""
    rows, truth = table(target)
    path = tmp_path / "table.json"
    path.write_text(json.dumps({"format": 1, "model": "recorded.py", "space": {}, "rows": rows}))
    best_key = min(truth, key=truth.get)
    url = f"sqlite:///{tmp_path / 'pruned.db'}"
    ensure_schema(url)
    _, outcome = search(target, Store.open(url), ReplayExecutor.from_file(path, noise=noise, seed=seed),
                        trials=32, seed=seed, pruner=pruner)
    by_key = {r.candidate_key: r for r in outcome.trials}
    assert by_key[best_key].measurement.status is Status.OK
    ok = [r for r in outcome.trials if r.measurement.ok]
    assert min(ok, key=lambda r: r.measurement.objective).candidate_key == best_key
    assert pick_finalists(outcome.trials)[0].candidate.key == best_key
    pruned = [r for r in outcome.trials if r.measurement.status is Status.PRUNED]
    assert all(truth[r.candidate_key] > 1.0 for r in pruned)            # only trials slower than the defaults
    assert sum(1 for r in pruned if truth[r.candidate_key] >= 1.25) >= 3
    for r in pruned:
        m = r.measurement
        assert m.reps == len(m.intermediate) < 12 and m.error.startswith(f"pruned after {m.reps} rounds: ratio ")
    assert all(not r.params or r.candidate_key not in {f.candidate.key for f in pick_finalists(outcome.trials)}
               for r in pruned)


def test_without_a_pruner_every_trial_runs_to_its_end(target: Target, tmp_path: Path) -> None:
    rows, _ = table(target)
    url = f"sqlite:///{tmp_path / 'none.db'}"
    ensure_schema(url)
    executor = ReplayExecutor({Candidate.from_dict(r["params"]).key:
                               Measurement.from_json(r["measurement"]) for r in rows})
    _, outcome = search(target, Store.open(url), executor, trials=24, seed=0, pruner="none")
    assert all(r.measurement.status is Status.OK and r.measurement.reps == 12 for r in outcome.trials)
    assert all(request.pruning is None for request in executor.submitted)


def test_noise_is_seeded_per_submission(target: Target) -> None:
    rows, _ = table(target)
    recorded = {Candidate.from_dict(r["params"]).key: Measurement.from_json(r["measurement"])
                for r in rows}
    candidate = Candidate.from_dict(rows[-1]["params"])
    request = TrialRequest(MeasureSpec("recorded.py"), candidate.params)

    def answers(seed: int) -> list[float]:
        executor = ReplayExecutor(recorded, noise=0.05, seed=seed)
        for _ in range(3):
            executor.submit(request)
        return [executor.next_result()[1].objective for _ in range(3)]

    assert answers(7) == answers(7) and len(set(answers(7))) == 3 and answers(7) != answers(8)
    quiet = ReplayExecutor(recorded)
    quiet.submit(request)
    assert quiet.next_result()[1] == recorded[candidate.key]


def test_the_driver_records_pruned_trials_tells_optuna_and_resumes_them(target: Target, tmp_path: Path) -> None:
    rows, _ = table(target)
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(rows))                                  # the plain list format
    url = f"sqlite:///{tmp_path / 'resume.db'}"
    ensure_schema(url)
    store = Store.open(url)
    driver, first = search(target, store, ReplayExecutor.from_file(path), trials=16, seed=0, pruner="median")
    pruned = {r.number for r in first.trials if r.measurement.status is Status.PRUNED}
    assert pruned and {r.number for r in store.trials(first.study.id)
                       if r.measurement.status is Status.PRUNED} == pruned
    pruned_steps = {r.candidate_key: r.measurement.intermediate for r in first.trials
                    if r.measurement.status is Status.PRUNED}
    told = [t for t in driver.optuna.get_trials(deepcopy=False)
            if target.space.candidate(t.params).key in pruned_steps]
    assert len(told) >= len(pruned)
    for trial in told:                                  # TPE sees each pruned trial at its last round
        steps = pruned_steps[target.space.candidate(trial.params).key]
        assert trial.state is optuna.trial.TrialState.PRUNED and trial.last_step == len(steps)
        assert trial.value == pytest.approx(steps[-1])
    exempt = {target.space.candidate(p).key for p in target.space.seeds()}
    requests = ReplayExecutor.from_file(path)
    resumed, second = search(target, store, requests, trials=20, seed=0, pruner="median", resume=True)
    replayed = [t for t in resumed.optuna.get_trials(deepcopy=False) if t.state is optuna.trial.TrialState.PRUNED
                and t.intermediate_values]
    assert len(replayed) >= len(pruned)                 # stored pruned trials replay as pruned, at their last round
    assert len(second.trials) == 20 and all(req.pruning is not None for req in requests.submitted
                                            if req.candidate.key not in exempt)


def test_the_defaults_and_the_built_in_modes_are_never_pruned() -> None:
    history = PruneHistory("median", min_rounds=6, exempt={"defaults-key"})
    for values in HISTORY:
        history.add(values)
    history.add(())
    assert history.spec_for("defaults-key") is None
    spec = history.spec_for("other")
    assert spec is not None and spec.history == HISTORY and spec.active
    assert PruneHistory("none", min_rounds=6).spec_for("other") is None


# -- one real trial --------------------------------------------------------------------------

def test_a_real_trial_is_pruned_after_its_warm_up_rounds() -> None:
    """A history of finished trials 100x faster than anything makes every value prunable: the
    trial process stops at min_rounds and returns its partial pairing as PRUNED."""
    spec = MeasureSpec(str(MODELS / "tiny_mlp.py"), threads=1, repeat=10, min_rounds=3, target_width=None,
                       budget_s=None, timeout_s=300)
    pruning = PruneSpec("median", tuple((0.01,) * 10 for _ in range(5)), min_rounds=spec.plan().min_rounds)
    measured = run_isolated(TrialRequest(spec, (("max_fusion_size", 8),), number=1, pruning=pruning))
    assert measured.status is Status.PRUNED, measured.error
    assert measured.reps == 3 and len(measured.intermediate) == 3
    assert measured.speedup is not None and measured.baseline_ms and measured.latency_ms
    assert measured.intermediate[-1] == pytest.approx(1 / measured.speedup)
    assert measured.error.startswith("pruned after 3 rounds: ratio ") and "\n" not in measured.error
