"""`tuner db check`: is a database sound, at this tuner's schema, and what does it hold?

`check_database(url)` opens the database read-only (a SQLite file with `mode=ro`, a
PostgreSQL session with `default_transaction_read_only`), so it never creates, migrates or
writes anything, and reports what it found as a `CheckReport` value: the integrity check
(SQLite `PRAGMA integrity_check`; PostgreSQL: it connects and every tuner table is readable),
the schema revision against this tuner's head, and the row count of each tuner table.
"""
from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import inspect, text
from sqlalchemy.engine import URL, Connection
from sqlalchemy.exc import SQLAlchemyError

from tuner.errors import SchemaOutdated, SchemaTooNew, StorageError
from tuner.storage.engine import make_engine, storage_error
from tuner.storage.models import Base
from tuner.storage.schema import SCHEMA_HEAD, check_revision, read_revision
from tuner.storage.urls import parse_url, safe_url, sqlite_path

# Worst first: the status of a report is the worst it found.
STATUSES = ("missing", "unreachable", "corrupt", "unreadable", "too-new", "outdated", "no-schema",
            "healthy")
MAX_INTEGRITY_LINES = 5


@dataclass(frozen=True)
class CheckReport:
    """What `check_database` found. `ok` only when the status is "healthy".

    `integrity` is ("ok",) when the check passed (PostgreSQL: a note saying what was
    checked), the problems found otherwise, and () when the database could not be opened.
    `revision` is None when the database has no tuner schema or it could not be read
    (`schema_read` tells which). `rows` counts each tuner table present, in schema order.
    `problems` are one line each and name the fix.
    """

    url: str                                   # without its password
    status: str                                # one of STATUSES
    integrity: tuple[str, ...] = ()
    schema_read: bool = False
    revision: str | None = None
    head: str = SCHEMA_HEAD
    rows: tuple[tuple[str, int], ...] = ()
    problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status == "healthy"

    def lines(self) -> list[str]:
        """The report as the lines `tuner db check` prints; the last one is the status."""
        out = [f"database: {self.url}"]
        shown = self.integrity[:MAX_INTEGRITY_LINES]
        out += [f"integrity: {line}" for line in shown]
        if len(self.integrity) > len(shown):
            out.append(f"integrity: ... and {len(self.integrity) - len(shown)} more")
        if self.schema_read:
            out.append(f"schema: {self._schema()}")
        if self.rows:
            out.append("rows: " + ", ".join(f"{table} {count}" for table, count in self.rows))
        out += [f"problem: {problem}" for problem in self.problems]
        out.append(f"status: {self.status}")
        return out

    def _schema(self) -> str:
        if self.revision is None:
            return "none"
        if self.revision == self.head:
            return f"{self.revision} (current)"
        return f"{self.revision} (this tuner's is {self.head})"


def check_database(url: str) -> CheckReport:
    """Check the database at `url` without changing it; never raises for what it finds.

    A missing SQLite file, a server that cannot be reached, a damaged file, a table that
    cannot be read, a schema older or newer than this tuner's: each comes back as a report
    with that status. Raises StorageError only for a URL that is not a supported database URL.
    """
    parsed = parse_url(url)
    safe = safe_url(parsed)
    path = sqlite_path(parsed)
    if path is not None and not path.is_file():
        return CheckReport(url=safe, status="missing", problems=(
            f"database {safe} does not exist; create it with: tuner db upgrade --db {safe}",))
    try:
        engine = make_engine(url, readonly=True)
    except StorageError as exc:                 # no driver
        return CheckReport(url=safe, status="unreachable", problems=(str(exc),))
    try:
        with engine.connect() as connection:
            return _check(connection, safe, sqlite=path is not None)
    except SQLAlchemyError as exc:
        return _unopened(exc, parsed, sqlite=path is not None)
    except StorageError as exc:                 # several schema revisions recorded
        return CheckReport(url=safe, status="corrupt", problems=(str(exc),))
    finally:
        engine.dispose()


def _unopened(exc: SQLAlchemyError, url: URL, *, sqlite: bool) -> CheckReport:
    """The report on a database that failed before the checks could finish: a file that is
    not a database or is damaged (corrupt), or one that cannot be reached or is locked."""
    safe, detail = safe_url(url), _first_line(exc)
    error = storage_error(exc, url)
    if sqlite and "not a database" in detail:
        return CheckReport(url=safe, status="corrupt", integrity=(detail,), problems=(str(error),))
    if sqlite and "malformed" in detail:
        return CheckReport(url=safe, status="corrupt", integrity=(detail,),
                           problems=(_damaged(safe, detail),))
    return CheckReport(url=safe, status="unreachable", problems=(str(error),))


def _check(connection: Connection, safe: str, *, sqlite: bool) -> CheckReport:
    problems: list[str] = []
    integrity: tuple[str, ...] = ()
    if sqlite:
        integrity = _sqlite_integrity(connection)
        if integrity != ("ok",):
            problems.append(_damaged(safe, f"{len(integrity)} problem(s), first: {integrity[0]}"))
    revision = read_revision(connection)
    connection.rollback()
    present = set(inspect(connection).get_table_names())
    rows, unreadable = _count_rows(connection, present)
    if not sqlite:
        integrity = unreadable or ("ok (connected; every tuner table readable)",)
        problems += [f"database {safe}: {line}; check the server's log and the role's "
                     f"privileges" for line in unreadable]
    status = ("corrupt" if sqlite else "unreadable") if problems else "healthy"
    schema_status, schema_problem = _schema(revision, present, safe)
    if schema_problem is not None:
        status = status if problems else schema_status
        problems.append(schema_problem)
    return CheckReport(url=safe, status=status, integrity=integrity, schema_read=True,
                       revision=revision, rows=tuple(rows), problems=tuple(problems))


def _schema(revision: str | None, present: set[str], safe: str) -> tuple[str, str | None]:
    """The schema's status and the problem to report, None when it is this tuner's, complete."""
    try:
        check_revision(revision, safe)
    except SchemaTooNew as exc:
        return "too-new", str(exc)
    except SchemaOutdated as exc:
        return ("no-schema" if revision is None else "outdated"), str(exc)
    missing = [table for table in Base.metadata.tables if table not in present]
    if missing:
        return "corrupt", (f"database {safe} is at schema {revision} but lacks table(s) "
                           f"{', '.join(missing)}; restore it from a backup")
    return "healthy", None


def _sqlite_integrity(connection: Connection) -> tuple[str, ...]:
    """`PRAGMA integrity_check`, one problem per line (SQLite packs several into one row)."""
    found = connection.exec_driver_sql("PRAGMA integrity_check").scalars()
    lines = (line.strip() for row in found for line in str(row).splitlines())
    return tuple(line for line in lines if line and not line.startswith("*** in database"))


def _damaged(safe: str, detail: str) -> str:
    return (f"database {safe} is damaged ({detail}); restore it from a backup "
            f"(`sqlite3 FILE .recover` salvages the rows still readable)")


def _count_rows(connection: Connection,
                present: set[str]) -> tuple[list[tuple[str, int]], tuple[str, ...]]:
    """Row counts of the tuner tables present, in schema order, and one line per table that
    could not be read."""
    rows: list[tuple[str, int]] = []
    unreadable: list[str] = []
    for table in (name for name in Base.metadata.tables if name in present):
        try:
            rows.append((table, int(connection.scalar(text(f'SELECT count(*) FROM "{table}"')))))
        except SQLAlchemyError as exc:
            connection.rollback()
            unreadable.append(f"table {table} cannot be read ({_first_line(exc)})")
    return rows, tuple(unreadable)


def _first_line(exc: SQLAlchemyError) -> str:
    orig = getattr(exc, "orig", None) or exc
    return " ".join(str(orig).split())[:200]
