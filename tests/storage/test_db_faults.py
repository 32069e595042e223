"""Database faults the other suites do not try: a PostgreSQL server that stalls a lookup,
and a disk that fills up under a search.

Every test ends by checking that nothing was lost: the rows written before the fault are
unchanged, the database passes its integrity check (`tuner.storage.check_database`), and
work continues (a lookup hits, a write succeeds).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

from helpers import MODELS, cli_env
from helpers.dbstate import dump, sqlite_integrity
from helpers.stalls import GRAPH, Holder, seed
from helpers.stored import store_configs, tiny_workload

TIMEOUT_S = 2.0


# ------------------------------------------------------------ a lookup on a stalled server


SLOW_VIEW = [   # best_configs becomes a view whose every read sleeps: a query that never returns
    "ALTER TABLE best_configs RENAME TO best_configs_kept",
    "CREATE FUNCTION stall() RETURNS boolean LANGUAGE plpgsql AS "
    "$$ BEGIN PERFORM pg_sleep(60); RETURN true; END $$",
    "CREATE VIEW best_configs AS SELECT * FROM best_configs_kept WHERE stall()",
    "COMMIT",
]
UNDO_SLOW_VIEW = ["DROP VIEW best_configs", "DROP FUNCTION stall()",
                  "ALTER TABLE best_configs_kept RENAME TO best_configs"]
STALLS = {
    "lock-on-best-configs": ["BEGIN", "LOCK TABLE best_configs IN ACCESS EXCLUSIVE MODE"],
    "lock-on-platforms": ["BEGIN", "LOCK TABLE platforms IN ACCESS EXCLUSIVE MODE"],
    "lock-on-version-table": ["BEGIN", "LOCK TABLE tuner_alembic_version IN ACCESS EXCLUSIVE MODE"],
    "query-never-returns": SLOW_VIEW,
}


def assert_intact(url: str, before: dict) -> None:
    from tuner.storage import check_database

    assert dump(url) == before
    report = check_database(url)
    assert report.ok, report.lines()


@pytest.mark.postgres
@pytest.mark.parametrize("stall", list(STALLS))
def test_a_stalled_postgres_lookup_ends_within_its_budget(postgres_url: str, stall: str) -> None:
    from tuner.lookup import Lookup, LookupWarning
    from tuner.lookup.decision import Tier
    from tuner.settings import Settings

    platform = seed(postgres_url)
    before = dump(postgres_url)
    holder = Holder(postgres_url, STALLS[stall])
    try:
        lookup = Lookup(Settings(db_url=postgres_url, lookup_timeout_s=TIMEOUT_S))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            start = time.perf_counter()
            decision = lookup.decide(GRAPH, platform)
            waited = time.perf_counter() - start
            again = lookup.decide("b" * 32, platform)            # the database is closed now
            waited_again = time.perf_counter() - start - waited
    finally:
        holder.release()
    assert decision.tier is Tier.UNAVAILABLE and decision.config.is_default
    assert TIMEOUT_S * 0.8 <= waited < TIMEOUT_S + 1.0, waited
    assert again.tier is Tier.UNAVAILABLE and waited_again < 0.1
    messages = [str(w.message) for w in caught if issubclass(w.category, LookupWarning)]
    assert len(messages) == 1, messages
    assert "did not answer in time" in messages[0] and "timeout" in messages[0], messages[0]
    assert "\n" not in messages[0]
    if stall == "query-never-returns":
        Holder(postgres_url, UNDO_SLOW_VIEW + ["COMMIT"]).release()
    assert_intact(postgres_url, before)
    fresh = Lookup(Settings(db_url=postgres_url, lookup_timeout_s=TIMEOUT_S))
    assert fresh.decide(GRAPH, platform).tier is Tier.EXACT     # work continues


@pytest.mark.postgres
def test_only_sessions_with_a_budget_are_bounded(postgres_url: str) -> None:
    from sqlalchemy import text

    from tuner.storage.engine import make_engine

    def settings(**kwargs) -> tuple[str, str, str]:
        engine = make_engine(postgres_url, **kwargs)
        try:
            with engine.connect() as connection:
                return tuple(connection.execute(text(f"SHOW {name}")).scalar() for name in (
                    "statement_timeout", "lock_timeout", "transaction_read_only"))
        finally:
            engine.dispose()

    assert settings() == ("0", "0", "off")                  # a search waits for row locks
    assert settings(timeout_s=2.0) == ("2s", "2s", "off")    # tuner.autotune's writes
    assert settings(readonly=True) == ("0", "0", "on")       # tuner db ls, export: no budget
    assert settings(readonly=True, timeout_s=1.5) == ("1500ms", "1500ms", "on")


PROGRAM = textwrap.dedent('''
    import json, sys, time, torch
    import tuner.storage                     # warm up: the database part is timed, not imports
    from tuner.lookup import Lookup
    sys.path.insert(0, {models!r})
    import tiny_mlp

    spent = []
    decide = Lookup.decide
    def timed(self, *args, **kwargs):        # the database part of the backend's lookup
        start = time.perf_counter()
        try:
            return decide(self, *args, **kwargs)
        finally:
            spent.append(time.perf_counter() - start)
    Lookup.decide = timed

    def compile_and_run(backend):
        torch._dynamo.reset()
        start = time.perf_counter()
        out = torch.compile(model, backend=backend)(x)
        return out, time.perf_counter() - start

    torch.manual_seed(7)
    model, x = tiny_mlp.get_model(), torch.randn(8, 32)
    with torch.no_grad():
        compile_and_run("inductor")                          # warm up: imports, the C++ toolchain
        tuned, tuned_s = compile_and_run("tuner")
        default, default_s = compile_and_run("inductor")
    print("REPORT " + json.dumps(dict(equal=torch.equal(tuned, default), tuned_s=tuned_s,
                                      default_s=default_s, lookup_s=spent)))
''')


@pytest.mark.postgres
@pytest.mark.slow
def test_backend_tuner_compiles_past_a_locked_table(postgres_url: str, tmp_path: Path) -> None:
    from tuner.platform import current_platform

    store_configs(postgres_url, tiny_workload(), current_platform("cpu"), {"max_fusion_size": 8})
    before = dump(postgres_url)
    program = tmp_path / "program.py"
    program.write_text(PROGRAM.format(models=str(MODELS)))
    env = cli_env(TUNER_DB=postgres_url, TUNER_LOOKUP_TIMEOUT=str(TIMEOUT_S),
                  TORCHINDUCTOR_FORCE_DISABLE_CACHES="1")      # both compiles are real compiles
    holder = Holder(postgres_url, STALLS["lock-on-best-configs"])
    try:
        out = subprocess.run([sys.executable, str(program)], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=300)
    finally:
        holder.release()
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(next(line for line in out.stdout.splitlines()
                             if line.startswith("REPORT ")).removeprefix("REPORT "))
    assert report["equal"] is True                             # bit-identical to inductor
    assert out.stderr.count("LookupWarning") == 1, out.stderr[-3000:]
    assert "did not answer in time" in out.stderr
    lookup_s, = report["lookup_s"]                             # one graph, one lookup
    assert TIMEOUT_S * 0.8 <= lookup_s < TIMEOUT_S + 1.0, report
    # the rest of the tuned compile is a plain compile: no second wait (loose, for busy machines)
    assert report["tuned_s"] - lookup_s < 2 * report["default_s"] + 2.0, report
    assert_intact(postgres_url, before)


# ------------------------------------------------------------ a disk that fills up


@pytest.fixture
def page_limit() -> Iterator[dict[str, int]]:
    """Every SQLite connection opened meanwhile gets `PRAGMA max_page_count = limit["pages"]`
    (when set): the same SQLITE_FULL as a full disk, on any file system."""
    limit: dict[str, int] = {}

    def cap(dbapi_connection, _record) -> None:
        if limit.get("pages") and type(dbapi_connection).__module__.startswith("sqlite3"):
            dbapi_connection.execute(f"PRAGMA max_page_count = {limit['pages']}")

    event.listen(Engine, "connect", cap)
    try:
        yield limit
    finally:
        event.remove(Engine, "connect", cap)


def big_trial(number: int):
    """A trial with a 3 KB error text, so the database grows by a page at each one."""
    from helpers.records import trial

    record = trial(number, f"cand-{number}")
    text = os.urandom(1500).hex()                              # PostgreSQL cannot compress it
    return replace(record, measurement=replace(record.measurement, error=text))


def fill(url: str) -> tuple[list, Exception, dict]:
    """Record trials until a write fails; return what was written, the error, and a dump."""
    from helpers.records import make_study

    from tuner.errors import StorageError
    from tuner.storage import Store

    written = []
    with Store.open(url) as store:
        study = make_study(store)
        with pytest.raises(StorageError) as caught:
            for number in range(5000):
                record = big_trial(number)
                assert store.record_trial(study.id, record)
                written.append(record)
        assert store.trials(study.id) == written                 # read back, on the full disk
    return written, caught.value, dump(url)


def assert_full_and_intact(url: str, path: Path, error: Exception, written: list, after: dict):
    from tuner.storage import check_database

    message = str(error)
    assert type(error).__name__ == "StorageError" and "\n" not in message
    assert "no space left" in message.lower(), message
    assert "free space" in message and "tuner search MODEL --resume" in message, message
    assert len(written) >= 3
    assert sqlite_integrity(path) == ["ok"]
    assert check_database(url).ok
    assert len(after["trials"]) == len(written)


def continue_and_compare(url: str, written: list, after: dict) -> None:
    """Work continues once there is space: the failed trial goes in, nothing else changes."""
    from tuner.storage import Store

    with Store.open(url) as store:
        study = store.last_study("wl-a", "plat-a")
        assert store.record_trial(study.id, big_trial(len(written)))
        assert len(store.trials(study.id)) == len(written) + 1
    now = dump(url)
    for table, rows in after.items():
        assert now[table][:len(rows)] == rows, table                # every earlier row unchanged
    assert len(now["trials"]) == len(after["trials"]) + 1


def test_a_full_disk_stops_a_write_with_one_line_and_loses_nothing(small_disk: Path) -> None:
    from tuner.storage import upgrade

    path = small_disk / "tuner.db"
    url = f"sqlite:///{path}"
    upgrade(url)
    ballast = small_disk / "ballast"
    ballast.write_bytes(b"\0" * 256 * 1024)                   # what the user frees afterwards
    written, error, after = fill(url)
    assert_full_and_intact(url, path, error, written, after)
    ballast.unlink()
    continue_and_compare(url, written, after)
    assert sqlite_integrity(path) == ["ok"]


def test_a_page_limit_stops_a_write_the_same_way(tmp_path: Path, page_limit: dict) -> None:
    import sqlite3

    from tuner.storage import upgrade

    path = tmp_path / "tuner.db"
    url = f"sqlite:///{path}"
    upgrade(url)
    connection = sqlite3.connect(path)
    page_limit["pages"] = connection.execute("PRAGMA page_count").fetchone()[0] + 60
    connection.close()
    written, error, after = fill(url)
    assert_full_and_intact(url, path, error, written, after)
    page_limit.clear()
    continue_and_compare(url, written, after)
    assert sqlite_integrity(path) == ["ok"]


@pytest.mark.postgres
def test_a_full_tablespace_stops_a_postgres_write_the_same_way(
        postgres_server, postgres_url: str, small_disk: Path) -> None:
    import pwd

    from tuner.storage import check_database, upgrade

    owner = pwd.getpwnam("postgres")
    os.chown(small_disk, owner.pw_uid, owner.pw_gid)
    database = postgres_url.rsplit("/", 1)[1]
    tablespace = f"small_{uuid.uuid4().hex[:8]}"
    upgrade(postgres_url)
    postgres_server.execute(f"CREATE TABLESPACE {tablespace} LOCATION '{small_disk}'")
    try:                                 # the trials table lives on the small disk
        postgres_server.execute(f"ALTER TABLE trials SET TABLESPACE {tablespace}", database=database)
        ballast = small_disk / "ballast"
        ballast.write_bytes(b"\0" * 256 * 1024)
        written, error, after = fill(postgres_url)
        message = str(error)
        assert type(error).__name__ == "StorageError" and "\n" not in message
        assert "could not extend file" in message and "No space left on device" in message
        assert "free space" in message and "tuner search MODEL --resume" in message, message
        assert check_database(postgres_url).ok and len(after["trials"]) == len(written)
        ballast.unlink()
        continue_and_compare(postgres_url, written, after)
    finally:
        postgres_server.execute("ALTER TABLE trials SET TABLESPACE pg_default", database=database)
        postgres_server.execute(f"DROP TABLESPACE {tablespace}")
