"""Learned failures: the rule, the driver skipping what always failed, export, import and merge.

Replay executor and SQLite files (one test also on PostgreSQL): no compiles.
"""
from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from fixtures.sharing_data import platform, workload
from helpers import run_main
from tuner.errors import ExchangeError
from tuner.search import SearchOptions, Target
from tuner.search.driver import Driver, open_study
from tuner.search_spaces import load_space
from tuner.storage import Store, TrialRecord, ensure_schema, export_file, failure_rules, merge, refresh_rules, upgrade
from tuner.storage.exchange import checksum_of, import_file
from tuner.storage.failures import learn
from tuner.trial import Candidate, MeasureSpec, Measurement, Status
from tuner.workers.replay import ReplayExecutor

A, B, C, D = "max_autotune", "cpp_wrapper", "aggressive_fusion", "benchmark_fusion"
PLATFORM, WORKLOAD = platform("Test CPU"), workload("mlp", "relu")
BY = dict(user="alice", host="box", tuner_version="0.1.0")
OK, FAILED = Status.OK, Status.COMPILE_ERROR
# Every single and pair but (A, B), compiled in an earlier study: only (A, B) can be learned.
EARLIER_OK = [({n: True for n in names}, Status.OK) for size in (1, 2)
              for names in itertools.combinations((A, B, C, D), size) if names != (A, B)]


def knobs(*names: str) -> dict[str, bool]:
    return {name: True for name in names}


# ---------------------------------------------------------------- the rule


def test_a_pair_that_always_failed_is_learned_and_its_parts_are_not() -> None:
    found = learn([(knobs(A, B), FAILED), (knobs(A, B, C), FAILED), (knobs(A), OK), (knobs(B, C), OK)])
    assert [(k, n) for k, n in found.rules.values()] == [(knobs(A, B), 2)]


def test_a_single_is_learned_alone_and_explains_its_pairs() -> None:
    found = learn([(knobs(C, A), FAILED), (knobs(C, B), FAILED), (knobs(C, D), FAILED), (knobs(A, B), OK)])
    assert [(k, n) for k, n in found.rules.values()] == [(knobs(C), 3)]


@pytest.mark.parametrize("trials", [
    [(knobs(A, B), FAILED)],                                               # one failure is no rule
    [(knobs(A, B), FAILED), (knobs(A, B, C), FAILED), (knobs(A, B, D), OK)],   # it compiled once
    [(knobs(A, B), FAILED), (knobs(A, B, C), FAILED), (knobs(A, B, D), Status.RUNTIME_ERROR)],
    [(knobs(A, B), FAILED), (knobs(A, B, C), Status.TIMEOUT), (knobs(A), OK), (knobs(B), OK)],
], ids=["one failure", "compiled once", "ran, so compiled", "timeout is no evidence"])
def test_no_rule_without_two_failures_and_no_compile(trials) -> None:
    assert [k for k, _ in learn([(p, s) for p, s in trials] + [(knobs(A), OK), (knobs(B), OK)]).rules.values()] == []


def test_values_compare_exactly() -> None:
    found = learn([({"mode": "max-autotune", A: True}, FAILED), ({"mode": "max-autotune", A: True, B: True}, FAILED),
                   ({"mode": "max-autotune"}, OK), ({A: True}, OK), ({A: 1}, OK)])
    assert [k for k, _ in found.rules.values()] == [{"mode": "max-autotune", A: True}]


# ---------------------------------------------------------------- the driver


@pytest.fixture
def target(tmp_path: Path) -> Target:
    path = tmp_path / "space.json"
    path.write_text(json.dumps({"name": "four", "knobs": [{"name": n, "kind": "bool"} for n in (A, B, C, D)]}))
    return Target(workload=WORKLOAD, platform=PLATFORM, space=load_space("cuda", path=path))


def new_store(path: Path) -> Store:
    url = f"sqlite:///{path}"
    ensure_schema(url)
    return Store.open(url)


@pytest.fixture
def store(tmp_path: Path):
    with new_store(tmp_path / "tuner.db") as opened:
        yield opened


def every_candidate(target: Target) -> list[dict[str, bool]]:
    return [knobs(*names) for size in range(5) for names in itertools.combinations((A, B, C, D), size)]


def replay(target: Target, failing: dict[str, bool]) -> ReplayExecutor:
    """Every candidate recorded: those holding `failing` fail to compile, the rest run."""
    recorded = {}
    for params in every_candidate(target):
        key = target.space.candidate(target.space.complete(params)).key
        holds = all(params.get(k) == v for k, v in failing.items())
        recorded[key] = (Measurement.failed(FAILED, "InductorError: C++ compile error") if holds
                         else Measurement(OK, latency_ms=1.0 - 0.01 * len(params), reps=5))
    return ReplayExecutor(recorded)


def search(target: Target, store: Store, executor: ReplayExecutor, trials: int = 16):
    job = SearchOptions(measure=MeasureSpec("recorded.py"), trials=trials, sampler="random", warm_start=False)
    study = open_study(job, target, store, user="tester")
    return Driver(job, target, store=store, executor=executor).run(study)


def record(store: Store, target: Target, trials: list[tuple[dict[str, bool], Status]]) -> None:
    """An earlier study on the platform holding these results."""
    study = open_study(SearchOptions(measure=MeasureSpec("earlier.py"), trials=len(trials)), target,
                       store, user="earlier")
    for number, (params, status) in enumerate(trials):
        measurement = Measurement(status, latency_ms=1.0) if status is OK else Measurement.failed(status, "error")
        store.record_trial(study.id, TrialRecord(number=number, candidate_key=Candidate.from_dict(params).key,
                                                 params=params, measurement=measurement))


def submitted_holding(executor: ReplayExecutor, pair: dict[str, bool]) -> int:
    return sum(all(r.candidate.as_dict().get(k) == v for k, v in pair.items()) for r in executor.submitted)


def test_a_pair_learned_mid_search_is_not_proposed_again(target: Target, store: Store) -> None:
    record(store, target, EARLIER_OK)
    executor = replay(target, failing=knobs(A, B))
    outcome = search(target, store, executor)
    assert submitted_holding(executor, knobs(A, B)) == 2        # the two failures that taught it
    assert outcome.exhausted and outcome.skipped >= 1
    assert len(executor.submitted) == 16 - 2                    # the other two holding it: skipped
    (rule,) = failure_rules(store, PLATFORM.key)
    assert (dict(rule.knobs), rule.failures, rule.source) == (knobs(A, B), 2, "search")


def test_a_rule_is_dropped_once_a_trial_holding_it_compiles(target: Target, store: Store) -> None:
    record(store, target, [(knobs(A), OK), (knobs(B), OK), (knobs(A, B), FAILED), (knobs(A, B, C), FAILED)])
    assert [dict(r.knobs) for r in refresh_rules(store, PLATFORM.key)] == [knobs(A, B)]
    record(store, target, [(knobs(A, B, D), OK)])
    assert refresh_rules(store, PLATFORM.key) == ()


# ---------------------------------------------------------------- export, import and merge


def learned_source(target: Target, path: Path, failures: int = 2) -> Store:
    store = new_store(path)
    record(store, target, EARLIER_OK +
           [(knobs(A, B, *extra), FAILED) for extra in [(), (C,), (D,), (C, D)][:failures]])
    refresh_rules(store, PLATFORM.key)
    return store


def test_rules_survive_export_and_import_and_stop_re_proposals(target: Target, tmp_path: Path,
                                                                db_url: str) -> None:
    with learned_source(target, tmp_path / "source.db") as source:
        report = export_file(source, tmp_path / "rules.json", **BY)
    document = json.loads((tmp_path / "rules.json").read_text())
    assert (report.rules, report.records, document["version"]) == (1, 0, 6)
    assert document["failure_rules"][0]["knobs"] == knobs(A, B)
    upgrade(db_url)
    with Store.open(db_url) as fresh:
        applied = import_file(fresh, tmp_path / "rules.json")
        assert (applied.rules, applied.rules_stored, applied.platforms_added) == (1, 1, 1)
        assert import_file(fresh, tmp_path / "rules.json").rules_stored == 0     # idempotent
        (rule,) = failure_rules(fresh)
        assert (dict(rule.knobs), rule.failures, rule.source, rule.origin) == (knobs(A, B), 2, "import", "rules.json")
        listed = run_main("db", "ls", "--db", db_url)
        assert listed.returncode == 0 and "learned failure rules" in listed.stdout
        row = [re.split(r"\s{2,}", line) for line in listed.stdout.splitlines() if "max_autotune" in line]
        assert row == [["Test CPU " + PLATFORM.key[:8], "cpp_wrapper=True + max_autotune=True", "2",
                        "import (rules.json)"]]
        executor = replay(target, failing=knobs(A, B))
        outcome = search(target, fresh, executor)
    assert submitted_holding(executor, knobs(A, B)) == 0 and outcome.skipped >= 1
    assert len(executor.submitted) == 16 - 4


def test_merge_unions_rules_and_keeps_the_larger_evidence(target: Target, tmp_path: Path) -> None:
    with learned_source(target, tmp_path / "weak.db", failures=2) as weak, \
            learned_source(target, tmp_path / "strong.db", failures=4) as strong, \
            new_store(tmp_path / "team.db") as team:
        assert merge(team, weak.safe_url, **BY).rules_stored == 1
        assert merge(team, strong.safe_url, **BY).rules_stored == 1
        assert merge(team, weak.safe_url, **BY).rules_stored == 0
        (rule,) = failure_rules(team)
        assert (rule.failures, rule.source) == (4, "merge")


def _doctored(path: Path, change) -> Path:
    document = json.loads(path.read_text())
    change(document["failure_rules"][0])
    document["checksum"] = checksum_of(document)
    path.write_text(json.dumps(document))
    return path


@pytest.mark.parametrize("change, message", [
    (lambda r: r.update(knobs={A: True, "os.system": "rm -rf /"}), "unknown knob 'os.system'"),
    (lambda r: r.update(knobs={}), "one or two knobs"),
    (lambda r: r["knobs"].update({C: True}), "one or two knobs"),
    (lambda r: r.update(failures=1), "at least 2 failures"),
    (lambda r: r.update(platform_key="f" * 24), "not in the file's platforms"),
    (lambda r: r.update(__reduce__="os.system"), "unknown key(s) '__reduce__'"),
], ids=["unknown knob", "no knob", "three knobs", "one failure", "unknown platform", "extra key"])
def test_a_bad_rule_refuses_the_whole_file(target: Target, tmp_path: Path, change, message: str) -> None:
    with learned_source(target, tmp_path / "source.db") as source:
        export_file(source, tmp_path / "rules.json", **BY)
    bad = _doctored(tmp_path / "rules.json", change)
    with new_store(tmp_path / "fresh.db") as fresh:
        with pytest.raises(ExchangeError, match="nothing was imported") as caught:
            import_file(fresh, bad)
        assert message in str(caught.value)
        assert failure_rules(fresh) == () and fresh.platforms() == []
