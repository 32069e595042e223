"""Engines for tuner databases, and the one translation of driver errors into StorageError.

SQLite: WAL, a busy timeout and foreign keys on every connection, and our own BEGIN:
pysqlite's implicit transactions are switched off, reads start with a plain `BEGIN`, and
connections that carry the `WRITE` execution option start with `BEGIN IMMEDIATE`, because in
WAL mode a deferred read-then-write transaction fails with BUSY instead of waiting.
A read-only SQLite open uses a `mode=ro` URI: nothing is created and nothing is written.
PostgreSQL: `pool_pre_ping` and read-only sessions through `default_transaction_read_only`.
An engine with a timeout (the compile-time lookup's, `tuner.autotune`'s reads and writes) gets
libpq's connect timeout, TCP user timeout and keepalives (`bounded_session`) and the server's
`statement_timeout` and `lock_timeout`, all within the budget, so a server that stalls (a lock
held on the tuner tables, a query that never returns, a host that vanished) cannot hold the
user's compile or kernel launch past it: the server cancels the statement, or the client
drops the connection, and the caller falls back.
"""
from __future__ import annotations

import importlib.util
import math
from typing import Any
from urllib.parse import quote

from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.exc import DBAPIError, OperationalError, SQLAlchemyError, StatementError

from tuner.errors import ReadOnlyDatabase, SchemaOutdated, StorageError
from tuner.storage.urls import hide_secret, parse_url, safe_url, sqlite_path

_CANCELLED = ("57014", "55P03")   # PostgreSQL: statement timeout (or cancel), lock timeout
_DISK_FULL = "53100"               # PostgreSQL: could not extend a file
BEGIN_OPTION = "tuner_sqlite_begin"
WRITE = {BEGIN_OPTION: "IMMEDIATE"}     # execution options of a write transaction
DEFAULT_BUSY_TIMEOUT_S = 5.0       # a read-only SQLite open (WAL: readers wait only on recovery)
# A writable open without a timeout (a search, an import, a merge, a migration) waits this long for
# the write lock: an import or merge holds it for its whole apply, and a search that gave up after
# 5 s would lose the trial it has just measured. SQLite's busy handler backs off while it waits.
WRITER_BUSY_TIMEOUT_S = 600.0


def make_engine(url: str, *, readonly: bool = False, timeout_s: float | None = None,
                foreign_keys: bool = True) -> Engine:
    """An engine for `url`; connects lazily.

    `timeout_s` bounds the wait for a connection (PostgreSQL) or for a lock (SQLite busy
    timeout; when None, 5 s read-only and `WRITER_BUSY_TIMEOUT_S` writable); on a read-only PostgreSQL engine it also bounds every
    statement, lock waits included (`statement_timeout`, `lock_timeout`).
    `foreign_keys=False` is for migrations only: SQLite batch mode drops and recreates
    tables, which must not cascade. Raises StorageError for an
    unsupported or malformed URL, a missing read-only SQLite file, or a missing driver.
    """
    parsed = parse_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(parsed, readonly=readonly, timeout_s=timeout_s,
                              foreign_keys=foreign_keys)
    return _postgres_engine(parsed, readonly=readonly, timeout_s=timeout_s)


def _sqlite_engine(url: URL, *, readonly: bool, timeout_s: float | None,
                   foreign_keys: bool) -> Engine:
    path = sqlite_path(url)
    safe = safe_url(url)
    if path is not None and readonly:
        if not path.is_file():
            raise StorageError(f"database {safe} does not exist; "
                               f"create it with: tuner db upgrade --db {safe}")
        url = url.set(database=f"file:{quote(str(path))}", query={"mode": "ro", "uri": "true"})
    elif path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create the folder of database {safe} ({exc.strerror}); "
                               f"choose a writable --db path") from exc
    engine = create_engine(url)
    if timeout_s is None:
        timeout_s = DEFAULT_BUSY_TIMEOUT_S if readonly else WRITER_BUSY_TIMEOUT_S
    busy_ms = int(1000 * max(timeout_s, 0.0))
    _install_sqlite_hooks(engine, busy_ms=busy_ms, wal=not readonly, foreign_keys=foreign_keys)
    return engine


def _install_sqlite_hooks(engine: Engine, *, busy_ms: int, wal: bool, foreign_keys: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None   # we emit BEGIN ourselves, below
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {busy_ms}")
            cursor.execute(f"PRAGMA foreign_keys = {'ON' if foreign_keys else 'OFF'}")
            if wal:
                cursor.execute("PRAGMA journal_mode = WAL")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        mode = connection.get_execution_options().get(BEGIN_OPTION, "")
        connection.exec_driver_sql(f"BEGIN {mode}".strip())


def _postgres_driver() -> str:
    """A bare `postgresql://` means psycopg (3) to SQLAlchemy 2.1; tuner[postgres] installs
    psycopg2, so use whichever is installed, psycopg2 first."""
    for module, driver in (("psycopg2", "postgresql+psycopg2"), ("psycopg", "postgresql+psycopg")):
        if importlib.util.find_spec(module) is not None:
            return driver
    return "postgresql+psycopg2"   # create_engine then names the missing module


def _postgres_engine(url: URL, *, readonly: bool, timeout_s: float | None) -> Engine:
    if url.drivername == "postgresql":
        url = url.set(drivername=_postgres_driver())
    connect_args: dict[str, Any] = {}
    options = ["-c default_transaction_read_only=on"] if readonly else []
    if timeout_s is not None:
        connect_args.update(bounded_session(timeout_s))
        # Server-side, per statement: each query (the schema check, then one per graph or
        # kernel) answers or is cancelled within the budget, and the first cancellation
        # makes the lookup stop reading the database for the rest of the process.
        budget_ms = max(1, int(1000 * timeout_s))
        options += [f"-c statement_timeout={budget_ms}", f"-c lock_timeout={budget_ms}"]
    if options:
        connect_args["options"] = " ".join(options)
    try:
        return create_engine(url, pool_pre_ping=True, connect_args=connect_args)
    except ModuleNotFoundError as exc:
        raise StorageError(f"database {safe_url(url)} needs the PostgreSQL driver; "
                           f"install it: pip install psycopg2-binary (or, in the tuner checkout: pip install '.[postgres]')") from exc


def bounded_session(timeout_s: float) -> dict[str, Any]:
    """libpq's client-side bounds for a session opened at compile time or at a kernel launch:
    the connection (`connect_timeout`, whole seconds), data the server never acknowledges
    (`tcp_user_timeout`) and a server host that vanished while idle (keepalives: the first probe
    after a second, then one a second), each within `timeout_s`. A peer that acknowledges
    but never answers (a stalled proxy) is bounded by `tuner.storage.within`, not here."""
    seconds = max(1, math.ceil(timeout_s))
    return {"connect_timeout": seconds, "tcp_user_timeout": max(1, int(1000 * timeout_s)),
            "keepalives": 1, "keepalives_idle": 1, "keepalives_interval": 1,
            "keepalives_count": max(1, seconds - 1)}


def caller_bug(exc: SQLAlchemyError) -> Exception | None:
    """The caller's exception when SQLAlchemy failed to bind a value (no database involved)."""
    if isinstance(exc, StatementError) and not isinstance(exc, DBAPIError):
        if isinstance(exc.orig, Exception) and not isinstance(exc.orig, SQLAlchemyError):
            return exc.orig
    return None


def storage_error(exc: BaseException, url: URL) -> StorageError:
    """Turn a SQLAlchemy or driver error into one line naming the database and the fix.

    The password never appears: the URL is shown by `safe_url`, and the raw password is
    scrubbed from the driver's text too.
    """
    safe = safe_url(url)
    orig = getattr(exc, "orig", None) or exc
    detail = hide_secret(" ".join(str(orig).split()), url)[:300]
    low = detail.lower()
    sqlstate = getattr(orig, "pgcode", None) or getattr(orig, "sqlstate", None)
    if "readonly database" in low or sqlstate == "25006":
        return ReadOnlyDatabase(f"database {safe} is read-only ({detail}); "
                                f"open it writable, or point --db at a database you can write")
    if "file is not a database" in low or "file is encrypted" in low:
        return StorageError(f"{safe} is not a SQLite database ({detail}); check the --db path, "
                            f"or move the file aside and run: tuner db upgrade --db {safe}")
    if "database is locked" in low or "database is busy" in low:
        return StorageError(f"database {safe} is locked by another writer ({detail}); "
                            f"retry when that process finishes")
    if sqlstate in _CANCELLED:
        return StorageError(f"database {safe} did not answer in time ({detail}); another session "
                            f"may hold a lock on the tuner tables (see pg_stat_activity), or the "
                            f"server is overloaded; retry later, or raise TUNER_LOOKUP_TIMEOUT")
    if "database or disk is full" in low or sqlstate == _DISK_FULL:
        return StorageError(f"cannot write to database {safe}: no space left ({detail}); free "
                            f"space on the disk that holds it, then run the command again "
                            f"(a search continues with: tuner search MODEL --resume)")
    if "no such table" in low or sqlstate == "42P01":
        return SchemaOutdated(f"database {safe} lacks tuner tables ({detail}); "
                              f"run: tuner db upgrade --db {safe}")
    if "unable to open database file" in low:
        return StorageError(f"cannot open database {safe} ({detail}); "
                            f"check that the file and its folder exist and are accessible")
    if isinstance(exc, OperationalError) and url.get_backend_name() != "sqlite":
        return StorageError(f"cannot use database {safe} ({detail}); "
                            f"check that the server is running and the URL is right")
    kind = type(orig).__name__ if isinstance(exc, DBAPIError) else type(exc).__name__
    return StorageError(f"database error on {safe}: {kind}: {detail}; "
                        f"re-run with --debug for the traceback")
