"""`tuner.storage.check_database`: what `tuner db check` reports, and that it never writes.

SQLite: a healthy database, a damaged one, a file that is not a database, an outdated one,
one newer than this tuner, one without a tuner schema, and a missing file, each checked to
be byte-for-byte unchanged afterwards. PostgreSQL: a healthy database, a server that cannot
be reached, and a role that cannot read one table.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from helpers.dbstate import damage_index
from fixtures import make_fixtures
from tuner.storage import check_database
from tuner.storage.migrate import head_revision
from tuner.storage.models import Base

HEAD = make_fixtures.REVISIONS[-1]


def committed(revision: str, tmp_path: Path) -> Path:
    path = tmp_path / "tuner.db"
    shutil.copy(make_fixtures.fixture_path(revision), path)
    return path


def fingerprint(folder: Path) -> dict[str, str]:
    """Every file in the folder and its hash: a check must leave them all as they were."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def rows_line(revision: str) -> str:
    rows = make_fixtures.rows_at(revision)
    return "rows: " + ", ".join(f"{table} {len(rows.get(table, []))}"
                                for table in Base.metadata.tables if table in rows)


def test_the_fixtures_are_at_this_tuners_head() -> None:
    assert HEAD == head_revision()


def test_healthy_sqlite(tmp_path: Path) -> None:
    path = committed(HEAD, tmp_path)
    url = f"sqlite:///{path}"
    before = fingerprint(tmp_path)
    report = check_database(url)
    assert report.ok and report.status == "healthy"
    assert report.lines() == [f"database: {url}", "integrity: ok", f"schema: {HEAD} (current)",
                              rows_line(HEAD), "status: healthy"]
    assert fingerprint(tmp_path) == before


def test_damaged_sqlite(tmp_path: Path) -> None:
    path = committed(HEAD, tmp_path)
    damage_index(path, "ix_best_configs_platform_id")
    before = fingerprint(tmp_path)
    report = check_database(f"sqlite:///{path}")
    assert report.status == "corrupt" and not report.ok
    assert any("missing from index ix_best_configs_platform_id" in line for line in report.integrity)
    lines = report.lines()
    assert lines[0] == f"database: sqlite:///{path}" and lines[-1] == "status: corrupt"
    assert all(line.startswith("integrity: ") for line in lines[1:1 + min(5, len(report.integrity))])
    problem = next(line for line in lines if line.startswith("problem: "))
    assert "is damaged" in problem and "restore it from a backup" in problem
    assert fingerprint(tmp_path) == before


def test_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "tuner.db"
    path.write_bytes(os.urandom(8192))
    before = fingerprint(tmp_path)
    report = check_database(f"sqlite:///{path}")
    assert report.status == "corrupt"
    assert report.lines()[1] == "integrity: file is not a database"
    assert "is not a SQLite database" in report.problems[0]
    assert fingerprint(tmp_path) == before


def test_outdated_sqlite(tmp_path: Path) -> None:
    old = make_fixtures.REVISIONS[0]
    path = committed(old, tmp_path)
    url = f"sqlite:///{path}"
    before = fingerprint(tmp_path)
    report = check_database(url)
    assert report.status == "outdated" and report.revision == old
    assert report.lines() == [
        f"database: {url}", "integrity: ok", f"schema: {old} (this tuner's is {HEAD})",
        rows_line(old),
        f"problem: database {url} is at schema {old}, this tuner needs {HEAD}; back it up, "
        f"then run: tuner db upgrade --db {url}",
        "status: outdated"]
    assert fingerprint(tmp_path) == before


def test_newer_than_this_tuner_and_no_schema(tmp_path: Path) -> None:
    path = committed(HEAD, tmp_path)
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE tuner_alembic_version SET version_num = '0099_future'")
    connection.close()
    report = check_database(f"sqlite:///{path}")
    assert report.status == "too-new" and "upgrade tuner" in report.problems[0]
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as connection:
        connection.execute("CREATE TABLE unrelated (x)")
    connection.close()
    report = check_database(f"sqlite:///{other}")
    assert report.status == "no-schema" and report.rows == ()
    assert "schema: none" in report.lines() and "tuner db upgrade" in report.problems[0]


def test_missing_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "tuner.db"
    url = f"sqlite:///{path}"
    report = check_database(url)
    assert report.status == "missing"
    assert report.lines() == [
        f"database: {url}",
        f"problem: database {url} does not exist; create it with: tuner db upgrade --db {url}",
        "status: missing"]
    assert not path.parent.exists()


@pytest.mark.postgres
def test_healthy_postgres(postgres_url: str) -> None:
    make_fixtures.populate(postgres_url, HEAD)
    report = check_database(postgres_url)
    assert report.lines() == [
        f"database: {postgres_url}", "integrity: ok (connected; every tuner table readable)",
        f"schema: {HEAD} (current)", rows_line(HEAD), "status: healthy"]


def test_unreachable_postgres() -> None:
    pytest.importorskip("psycopg2")
    report = check_database("postgresql://tuner:s3cret@127.0.0.1:1/tuning")
    assert report.status == "unreachable" and len(report.problems) == 1
    assert "s3cret" not in "\n".join(report.lines())
    assert report.lines()[0] == "database: postgresql://tuner:***@127.0.0.1:1/tuning"


@pytest.mark.postgres
def test_a_table_the_role_cannot_read(postgres_server, postgres_url: str) -> None:
    make_fixtures.populate(postgres_url, HEAD)
    database = postgres_url.rsplit("/", 1)[1]
    postgres_server.execute("CREATE ROLE partial LOGIN PASSWORD 'pw'",
                            f"GRANT CONNECT ON DATABASE {database} TO partial")
    try:
        postgres_server.execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO partial",
                                "REVOKE SELECT ON trials FROM partial", database=database)
        report = check_database(postgres_server.url(database, user="partial", password="pw"))
        assert report.status == "unreadable"
        assert report.integrity == (report.integrity[0],) and "table trials" in report.integrity[0]
        assert "trials" not in dict(report.rows) and "platforms" in dict(report.rows)
    finally:
        postgres_server.execute("DROP OWNED BY partial", database=database)
        postgres_server.execute(f"REVOKE CONNECT ON DATABASE {database} FROM partial",
                                "DROP ROLE partial")
