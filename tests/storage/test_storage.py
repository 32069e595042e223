"""Contract tests of tuner.storage.Store, run against real databases.

Tests taking `db_url` (tests/conftest.py) run once per backend: a SQLite file and a real
PostgreSQL server.
"""
from __future__ import annotations

import pickle
import sqlite3
import time
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from helpers.records import make_platform, make_study, make_workload, trial
from tuner.errors import ReadOnlyDatabase, StorageError
from tuner.storage import BestConfig, Store, TrialRecord, safe_url, upgrade
from tuner.trial import Measurement, Status

CANARY = "s3cr3t-canary"


@pytest.fixture
def store(db_url: str):
    upgrade(db_url)
    with Store.open(db_url) as opened:
        yield opened


def best(ci_low: float, speedup: float = 1.2, *, is_default: bool = False, **extra) -> BestConfig:
    params = {} if is_default else {"max_autotune": True, "ci": ci_low}
    return BestConfig(graph_key="g1", platform_key="plat-a", params=params,
                      is_default=is_default, speedup=speedup, ci_low=ci_low, ci_high=speedup + 0.1,
                      rounds=12, latency_ms=1.0, baseline_ms=speedup, workload_key="wl-a",
                      user="alice", host="box", tuner_version="0.1.0",
                      torch_version=extra.pop("torch_version", "2.13.0"), **extra)


def test_trials_round_trip(store: Store) -> None:
    study = make_study(store)
    ok = trial(0, "c0", max_autotune=True, block=[32, 64])
    failed = TrialRecord(number=1, candidate_key="c1", params={},
                         measurement=Measurement.failed(Status.COMPILE_ERROR, "boom"))
    assert store.record_trial(study.id, failed)
    assert store.record_trial(study.id, ok)
    got = store.trials(study.id)
    assert got == [ok, failed]
    assert got[0].finished_at.utcoffset() == timedelta(0)
    assert store.trials(study.id + 100) == []


def test_duplicate_trial_is_refused(store: Store) -> None:
    study = make_study(store)
    assert store.record_trial(study.id, trial(0, "c0"))
    assert not store.record_trial(study.id, trial(0, "c0"))          # a retried result
    assert not store.record_trial(study.id, trial(0, "other"))       # same number
    assert not store.record_trial(study.id, trial(5, "c0"))          # same candidate
    assert [t.number for t in store.trials(study.id)] == [0]
    other = make_study(store)                                        # another study may reuse both
    assert store.record_trial(other.id, trial(0, "c0"))


def test_naive_datetime_is_refused(store: Store) -> None:
    study = make_study(store)
    naive = TrialRecord(number=0, candidate_key="c0", params={},
                        measurement=Measurement(status=Status.OK), started_at=datetime.now())
    with pytest.raises(ValueError, match="naive datetime"):
        store.record_trial(study.id, naive)
    assert store.trials(study.id) == []


def test_last_study_and_trials_for_workload(store: Store) -> None:
    assert store.last_study("wl-a", "plat-a") is None
    first = make_study(store)
    second = make_study(store)
    make_study(store, platform=make_platform("plat-b"))
    assert store.last_study("wl-a", "plat-a") == second
    assert second.created_at.tzinfo is not None and second.tuner_version == "0.1.0"
    store.record_trial(first.id, trial(0, "c0"))
    store.record_trial(second.id, trial(0, "c0"))
    store.record_trial(second.id, trial(1, "c1"))
    rows = store.trials_for_workload("wl-a", "plat-a")
    assert [(s.id, t.number) for s, t in rows] == [(first.id, 0), (second.id, 0), (second.id, 1)]
    assert len(store.trials_for_workload("wl-a")) == 3
    assert store.trials_for_workload("unknown") == []


def test_ensure_is_idempotent_and_graph_keys_repeat(store: Store) -> None:
    store.ensure_workload(make_workload())
    store.ensure_workload(make_workload())
    store.ensure_workload(make_workload("wl-b", ("g2", "g3", "g2")))   # g2 shared and repeated
    store.ensure_platform(make_platform())
    store.ensure_platform(make_platform())
    assert store.workload("wl-a") == ("g1", "g2")
    assert store.workload("wl-b") == ("g2", "g3", "g2")
    assert store.workload("missing") is None
    assert store.platform_row("plat-a") == make_platform()
    assert store.platform_row("missing") is None


def test_create_study_needs_stored_keys(store: Store) -> None:
    with pytest.raises(StorageError, match="ensure_workload"):
        store.create_study(workload_key="nope", platform_key="nope", space_hash="s",
                           sampler="tpe", seed=None, trials_requested=1, user="u", host="h",
                           tuner_version="0")


def test_save_best_keeps_the_better(store: Store) -> None:
    study = make_study(store)
    assert store.save_best(best(1.10, study_id=study.id))           # fills a missing row
    assert not store.save_best(best(1.05, speedup=1.5))             # lower ci_low: refused
    assert store.best_config("g1", "plat-a").ci_low == 1.10
    assert not store.save_best(best(1.0, speedup=1.0, is_default=True))   # defaults lose
    assert store.save_best(best(1.10, speedup=1.3))                 # tie on ci_low, faster
    assert store.save_best(best(1.20))                              # better: replaces
    kept = store.best_config("g1", "plat-a")
    assert (kept.ci_low, kept.params["ci"], kept.study_id) == (1.20, 1.20, None)
    assert kept.created_at is not None and kept.created_at.tzinfo is not None
    assert store.best_config("g1", "plat-b") is None
    assert store.best_config("g9", "plat-a") is None


def test_default_best_refreshes_default_best(store: Store) -> None:
    make_study(store)
    assert store.save_best(best(0.97, speedup=1.0, is_default=True, triton_version="a"))
    assert store.save_best(best(0.95, speedup=1.0, is_default=True, triton_version="b"))
    assert store.best_config("g1", "plat-a").triton_version == "b"
    assert store.save_best(best(1.02))                              # a real win replaces it


def test_best_lookups_across_platforms_and_workloads(store: Store) -> None:
    make_study(store, workload=make_workload(graph_keys=("g1", "g2", "g1")))
    store.ensure_platform(make_platform("plat-b"))
    store.save_best(best(1.1))
    store.save_best(BestConfig(**{**best(1.3).__dict__, "platform_key": "plat-b"}))
    store.save_best(BestConfig(**{**best(1.2).__dict__, "graph_key": "g2"}))
    pairs = store.best_configs_for_graph("g1")
    assert [(b.platform_key, p.key, p.hardware_key) for b, p in pairs] == [
        ("plat-a", "plat-a", "hw-a"), ("plat-b", "plat-b", "hw-a")]
    assert dict(pairs[1][1].software)["torch"] == "2.13.0+cpu"
    assert [b.graph_key for b in store.workload_best("wl-a", "plat-a")] == ["g1", "g2"]
    assert [b.graph_key for b in store.workload_best("wl-a", "plat-b")] == ["g1"]
    assert store.workload_best("missing", "plat-a") == []
    assert store.best_configs_for_graph("missing") == []


def test_save_best_needs_stored_platform(store: Store) -> None:
    with pytest.raises(StorageError, match="ensure_platform"):
        store.save_best(best(1.1))


def test_readonly_store_refuses_writes(db_url: str) -> None:
    upgrade(db_url)
    with Store.open(db_url) as writable:
        make_study(writable)
        writable.save_best(best(1.1))
    with Store.open(db_url, readonly=True) as readonly:
        assert readonly.best_config("g1", "plat-a").ci_low == 1.1
        with pytest.raises(ReadOnlyDatabase, match="read-only"):
            readonly.ensure_platform(make_platform("plat-z"))
        assert "readonly" in repr(readonly)


def test_password_never_shown() -> None:
    pytest.importorskip("psycopg2")
    url = f"postgresql://tuner:{CANARY}@127.0.0.1:9/tuner"   # port 9: nothing listens
    started = time.monotonic()
    with pytest.raises(StorageError) as caught:
        Store.open(url, connect_timeout_s=1)
    assert time.monotonic() - started < 10
    message = str(caught.value)
    assert CANARY not in message and "\n" not in message
    assert "postgresql://tuner:***@127.0.0.1:9/tuner" in message
    assert safe_url(url) == "postgresql://tuner:***@127.0.0.1:9/tuner"
    assert CANARY not in safe_url("postgresql://tuner:" + CANARY + "@host:bad-port/db")


def test_repr_and_pickle(store: Store, db_url: str) -> None:
    assert repr(store) == f"Store({safe_url(db_url)!r})"
    with pytest.raises(TypeError, match="Store.open"):
        pickle.dumps(store)


def test_sqlite_wal_busy_timeout_and_foreign_keys(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    upgrade(url)
    with Store.open(url, connect_timeout_s=1.5) as store, store.session_scope() as session:
        pragma = lambda name: session.connection().exec_driver_sql(f"PRAGMA {name}").scalar()
        assert (pragma("busy_timeout"), pragma("foreign_keys")) == (1500, 1)
    with Store.open(url) as store, store.session_scope() as session:
        assert session.connection().exec_driver_sql("PRAGMA busy_timeout").scalar() == 600_000
    raw = sqlite3.connect(tmp_path / "tuner.db")
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    raw.close()


def test_sqlite_writer_waits_for_the_lock_then_reports_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    upgrade(url)
    holder = sqlite3.connect(tmp_path / "tuner.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")                     # another writer holds the lock
    try:
        with Store.open(url, connect_timeout_s=0.3) as store:
            assert store.platform_row("plat-a") is None        # WAL: reads go on
            started = time.monotonic()
            with pytest.raises(StorageError, match="locked"):
                store.ensure_platform(make_platform())
            assert time.monotonic() - started >= 0.25
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_unstorable_params_are_the_callers_bug(store: Store) -> None:
    study = make_study(store)
    with pytest.raises(TypeError, match="JSON serializable"):
        store.record_trial(study.id, trial(0, "c0", dtype=object()))
    assert store.trials(study.id) == []


def test_every_save_attempt_is_in_history(store: Store) -> None:
    make_study(store)
    attempts = [best(1.10), best(1.05, speedup=1.5), best(1.20), best(1.15)]
    assert [store.save_best(b) for b in attempts] == [True, False, True, False]
    history = store.best_history("g1", "plat-a")
    assert [(h.best.ci_low, h.kept) for h in history] == [(1.10, True), (1.05, False),
                                                          (1.20, True), (1.15, False)]
    assert all(h.recorded_at.tzinfo is not None and len(h.measurement_key) == 64 for h in history)
    assert history[2].best == store.best_config("g1", "plat-a")
    again = BestConfig(**{**history[1].best.__dict__})             # the same measurement again
    assert not store.save_best(again)
    assert len(store.best_history("g1", "plat-a")) == 4
    assert store.best_history("g1", "plat-b") == []


def test_installed_versions_are_never_replaced_by_other_versions(store: Store) -> None:
    make_study(store)                                  # plat-a's software says torch 2.13.0+cpu
    current = best(1.10, torch_version="2.13.0+cpu", triton_version="")
    other = best(1.50, speedup=1.6, torch_version="2.12.0+cpu", triton_version="")
    assert store.save_best(current)
    assert not store.save_best(other)                 # better numbers, other versions: refused
    assert store.best_config("g1", "plat-a").torch_version == "2.13.0+cpu"
    assert [h.kept for h in store.best_history("g1", "plat-a")] == [True, False]
    newer = best(1.01, torch_version="2.14.0+cpu", triton_version="")
    assert store.save_best(newer, installed=("2.14.0+cpu", ""))    # matches what is installed
    assert not store.save_best(best(1.90), installed=("2.14.0+cpu", ""))
    assert store.save_best(best(1.02, torch_version="2.14.0+cpu", triton_version=""),
                           installed=("2.14.0+cpu", ""))         # same versions: evidence
    assert store.best_config("g1", "plat-a").ci_low == 1.02


def test_study_records_its_platform_versions(store: Store) -> None:
    study = make_study(store)
    assert (study.torch_version, study.triton_version) == ("2.13.0+cpu", "")
    assert store.last_study("wl-a", "plat-a") == study


def test_check_writable(db_url: str) -> None:
    upgrade(db_url)
    with Store.open(db_url) as store:
        store.check_writable()
    with Store.open(db_url, readonly=True) as readonly:
        with pytest.raises(ReadOnlyDatabase, match="read-only"):
            readonly.check_writable()


def test_snapshot_and_listing(store: Store) -> None:
    make_study(store, workload=make_workload("wl-a", ("g1", "g2")))
    make_study(store, workload=make_workload("wl-b", ("g3",)), platform=make_platform("plat-b"))
    store.save_best(best(1.1))
    store.save_best(BestConfig(**{**best(1.3).__dict__, "graph_key": "g3", "platform_key": "plat-b"}))
    assert [p.key for p in store.platforms()] == ["plat-a", "plat-b"]
    assert store.workload_names() == {"wl-a": "tiny", "wl-b": "tiny"}
    everything = store.snapshot()
    assert [(b.graph_key, b.platform_key) for b in everything.bests] == [("g1", "plat-a"),
                                                                         ("g3", "plat-b")]
    assert [w.key for w in everything.workloads] == ["wl-a", "wl-b"]
    assert everything.workloads[0].graphs[1].code == "graph g2"
    only_b = store.snapshot(workload_keys=["wl-b"])
    assert [b.graph_key for b in only_b.bests] == ["g3"] and [p.key for p in only_b.platforms] == ["plat-b"]
    assert store.snapshot(platform_keys=["nope"]).bests == ()


# ---------------------------------------------------------------- paired trials and verdicts

def test_paired_trial_fields_round_trip(store: Store) -> None:
    study = make_study(store)
    paired = replace(trial(0, "c0", max_autotune=True), measurement=Measurement(
        status=Status.OK, latency_ms=0.9, spread_ms=0.01, compile_s=3.0, peak_mem_mb=120.0,
        reps=30, worker="box/2", threads=2, baseline_ms=1.0, speedup=1.109375,
        speedup_low=1.046875, speedup_high=1.15625, start_s=0.015625, load_s=0.5, baseline_compile_s=0.25,
        measure_s=2.5, compile_cached=False))                  # the phases and cache flag of 0008
    unpaired = trial(1, "c1")                                   # as trials were before 0004
    assert store.record_trial(study.id, paired) and store.record_trial(study.id, unpaired)
    assert store.trials(study.id) == [paired, unpaired]
    assert [t.measurement for _, t in store.trials_for_workload("wl-a")] == [
        paired.measurement, unpaired.measurement]
    assert unpaired.measurement.threads is None and unpaired.measurement.speedup is None


def verdicts() -> tuple[BestConfig, BestConfig]:
    """An eager verdict for g1 and a freezing winner with its config without freezing for g2."""
    eager = replace(best(1.3, speedup=1.4), params={}, eager=True, search_speedup=1.5)
    freezing = replace(best(1.2), graph_key="g2", params={"freezing": True, "max_autotune": True},
                       unfrozen_params={"max_autotune": True}, unfrozen_speedup=1.05,
                       search_speedup=1.25)
    return eager, freezing


def test_verdict_fields_round_trip(store: Store) -> None:
    make_study(store)
    eager, freezing = verdicts()
    defaults_won = replace(freezing, graph_key="g3", unfrozen_params={}, unfrozen_speedup=None)
    for b in (eager, freezing, defaults_won):
        assert store.save_best(b)
        got = store.best_config(b.graph_key, "plat-a")
        assert replace(got, created_at=None) == b
        [entry] = store.best_history(b.graph_key, "plat-a")
        assert entry.best == got
    assert [b.graph_key for b in store.workload_best("wl-a", "plat-a")] == ["g1", "g2"]
    assert store.workload_best("wl-a", "plat-a")[0].eager
    assert {b.graph_key: b.unfrozen_params for b in store.snapshot().bests} == {
        "g1": None, "g2": {"max_autotune": True}, "g3": {}}
    with store.session_scope() as session:                  # None is SQL NULL, not JSON 'null'
        empty = session.connection().exec_driver_sql(
            "SELECT graph_key FROM best_configs WHERE unfrozen_params IS NULL").scalars().all()
    assert empty == ["g1"]


def test_an_eager_verdict_competes_on_its_evidence(store: Store) -> None:
    make_study(store)
    eager, _ = verdicts()
    assert store.save_best(best(1.10))
    assert store.save_best(eager)                                  # ci_low 1.3 beats 1.10
    assert not store.save_best(best(1.0, speedup=1.0, is_default=True))   # no refresh of eager
    assert not store.save_best(replace(eager, ci_low=1.25, created_at=None, search_speedup=None))
    assert store.best_config("g1", "plat-a").eager
    assert store.save_best(best(1.35))                             # a stronger config wins
    kept = store.best_config("g1", "plat-a")
    assert (kept.eager, kept.search_speedup) == (False, None)
    assert [h.best.eager for h in store.best_history("g1", "plat-a")] == [
        False, True, False, True, False]
