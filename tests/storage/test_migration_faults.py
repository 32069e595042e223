"""`tuner db upgrade` killed in the middle of a migration, on SQLite and on PostgreSQL.

Each migration runs in one transaction, so a SIGKILL leaves the database at the old revision
(every row and the schema exactly as before) or at the new one, never between; it passes
its integrity check, and a second `tuner db upgrade` reaches head with every row.

"In the middle" without a hook in the product: on PostgreSQL another session holds a lock
that a later statement of 0002 needs, and the test kills the upgrade once
`pg_stat_activity` shows that statement waiting; on SQLite the fixture is grown until
0002's history seeding overflows SQLite's page cache, and the test kills the upgrade once
uncommitted pages reach the write-ahead log while the committed revision is still 0001.
"""
from __future__ import annotations

import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.dbstate import columns_of, dump, sqlite_integrity, sqlite_schema
from fixtures import make_fixtures
from helpers import cli_env
from helpers.stalls import Holder
from tuner.storage.migrate import known_revisions
from tuner.storage.schema import VERSION_TABLE

OLD = "0001_initial"          # the committed fixture's revision; 0002 is the migration interrupted
EXTRA_BEST = 8000      # best configs added to the SQLite fixture: 0002 seeds one history row each


def start_upgrade(url: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tuner", "db", "upgrade", "--db", url],
                            cwd=cwd, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def rerun_upgrade(url: str, cwd: Path) -> None:
    from tuner.storage import current_revision
    from tuner.storage.migrate import head_revision

    done = subprocess.run([sys.executable, "-m", "tuner", "db", "upgrade", "--db", url], cwd=cwd,
                          env=cli_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert current_revision(url) == head_revision()


def data_columns(columns: dict[str, list[str]]) -> dict[str, list[str]]:
    """The tables and columns that hold rows, without the version table."""
    return {table: names for table, names in columns.items() if table != VERSION_TABLE}


def kill(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=30)


def assert_at_old_revision_with_every_row(url: str, before: dict, old_columns: dict) -> None:
    from tuner.storage import check_database, current_revision

    assert current_revision(url) == OLD
    assert columns_of(url) == old_columns                # no column or table of 0002 survived
    assert dump(url) == before
    report = check_database(url)
    assert report.status == "outdated" and report.integrity[0].startswith("ok"), report.lines()


# ---------------------------------------------------------------- SQLite


def grown_fixture(path: Path) -> None:
    """The committed 0001 fixture plus EXTRA_BEST best configs, written with plain SQL."""
    shutil.copy(make_fixtures.fixture_path(OLD), path)
    connection = sqlite3.connect(path)
    try:
        cursor = connection.execute("SELECT * FROM best_configs WHERE id = 1")
        names = [d[0] for d in cursor.description]
        template = cursor.fetchone()
        rows = [tuple(100 + n if name == "id" else f"{n:032x}" if name == "graph_key" else value
                      for name, value in zip(names, template)) for n in range(EXTRA_BEST)]
        connection.executemany(f"INSERT INTO best_configs VALUES ({', '.join('?' * len(names))})",
                               rows)
        connection.commit()
    finally:
        connection.close()


def committed_revision(path: Path) -> str:
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return connection.execute("SELECT version_num FROM tuner_alembic_version").fetchone()[0]
    finally:
        connection.close()


def kill_once_uncommitted(process: subprocess.Popen, path: Path, limit_s: float = 60.0) -> bool:
    """SIGKILL the upgrade as soon as its transaction has written pages to the WAL while the
    committed revision is still the old one. False when it finished first."""
    wal = path.with_name(path.name + "-wal")
    deadline = time.monotonic() + limit_s
    while process.poll() is None and time.monotonic() < deadline:
        if wal.exists() and wal.stat().st_size > 0 and committed_revision(path) == OLD:
            kill(process)
            return True
        time.sleep(0.01)
    kill(process) if process.poll() is None else process.communicate()
    return False


def test_sqlite_upgrade_killed_mid_migration_is_old_or_new_and_resumes(tmp_path: Path) -> None:
    path = tmp_path / "tuner.db"
    url = f"sqlite:///{path}"
    grown_fixture(path)
    before, old_columns, old_schema = dump(url), columns_of(url), sqlite_schema(path)
    for _attempt in range(3):                      # a slow machine may commit before the kill
        caught_mid = kill_once_uncommitted(start_upgrade(url, tmp_path), path)
        assert sqlite_integrity(path) == ["ok"]
        if committed_revision(path) == OLD:
            assert sqlite_schema(path) == old_schema
            assert_at_old_revision_with_every_row(url, before, old_columns)
            if caught_mid:
                break
        else:                                      # it committed first: start over
            assert committed_revision(path) in known_revisions()
            assert dump(url, data_columns(old_columns)) == data_columns(before)
            for leftover in tmp_path.glob("tuner.db*"):
                leftover.unlink()
            grown_fixture(path)
    assert caught_mid, "the upgrade always committed before the kill"
    rerun_upgrade(url, tmp_path)
    assert sqlite_integrity(path) == ["ok"]
    assert dump(url, data_columns(old_columns)) == data_columns(before)
    assert len(dump(url, {"best_history": ["id"]})["best_history"]) == 3 + EXTRA_BEST


# ---------------------------------------------------------------- PostgreSQL

# A lock another session holds, and the statement of 0002 that waits for it.
BLOCKERS = {
    "after-the-first-alter": ("LOCK TABLE studies IN ACCESS SHARE MODE", "ALTER TABLE studies"),
    "after-both-alters": ("LOCK TABLE platforms IN ROW EXCLUSIVE MODE", "CREATE TABLE best_history"),
}


def waiting_backend(server, database: str, statement: str, process: subprocess.Popen) -> int:
    """The pid of the upgrade's server process once it waits for a lock at `statement`."""
    import psycopg2

    deadline = time.monotonic() + 60
    connection = psycopg2.connect(host=server.host, port=server.port, user="postgres",
                                  dbname=database)
    connection.autocommit = True
    try:
        while time.monotonic() < deadline:
            assert process.poll() is None, process.communicate()[1][-2000:]
            with connection.cursor() as cursor:
                cursor.execute("SELECT pid, query FROM pg_stat_activity WHERE datname = %s "
                               "AND wait_event_type = 'Lock'", (database,))
                found = [pid for pid, query in cursor.fetchall() if statement in query]
            if found:
                return found[0]
            time.sleep(0.05)
    finally:
        connection.close()
    raise AssertionError(f"the upgrade never waited at {statement!r}")


def wait_gone(server, pid: int) -> None:
    import psycopg2

    deadline = time.monotonic() + 30
    connection = psycopg2.connect(host=server.host, port=server.port, user="postgres",
                                  dbname="postgres")
    connection.autocommit = True
    try:
        while time.monotonic() < deadline:
            with connection.cursor() as cursor:
                cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,))
                if cursor.fetchone()[0] == 0:
                    return
            time.sleep(0.05)
    finally:
        connection.close()
    raise AssertionError(f"server process {pid} of the killed upgrade is still there")


@pytest.mark.postgres
@pytest.mark.parametrize("blocker", list(BLOCKERS))
def test_postgres_upgrade_killed_mid_migration_is_old_and_resumes(
        postgres_server, postgres_url: str, blocker: str, tmp_path: Path) -> None:
    make_fixtures.populate(postgres_url, OLD)
    before, old_columns = dump(postgres_url), columns_of(postgres_url)
    lock, statement = BLOCKERS[blocker]
    holder = Holder(postgres_url, ["BEGIN", lock])
    try:
        upgrade = start_upgrade(postgres_url, tmp_path)
        database = postgres_url.rsplit("/", 1)[1]
        backend = waiting_backend(postgres_server, database, statement, upgrade)
        kill(upgrade)
    finally:
        holder.release()                         # the server goes on, finds its client gone
    wait_gone(postgres_server, backend)
    assert_at_old_revision_with_every_row(postgres_url, before, old_columns)
    rerun_upgrade(postgres_url, tmp_path)
    assert dump(postgres_url, data_columns(old_columns)) == data_columns(before)
