"""Whether a store may write what a search writes, and the one message that names the fix.

`Store.check_writable` asks before work that must write (`tuner search`, `tuner db import`,
`tuner db merge`): on SQLite, whether this user may write the file and its folder (WAL files);
on PostgreSQL, whether the role holds every privilege a search uses, in a writable transaction
on a primary server. `Store.session_scope` turns a write that PostgreSQL refuses in the middle
of a transaction (SQLSTATE 42501) into the same ReadOnlyDatabase. Nothing here writes.
"""
from __future__ import annotations

import os

from sqlalchemy import text
from sqlalchemy.engine import URL, Connection
from sqlalchemy.exc import SQLAlchemyError

from tuner.errors import ReadOnlyDatabase
from tuner.storage.urls import hide_secret, safe_url, sqlite_path

# What `tuner search`, `tuner db import` and `tuner db merge` write: (table, privilege).
_WRITES = tuple((table, "INSERT") for table in ("platforms", "workloads", "graphs", "studies",
                                                "trials", "best_configs", "best_history",
                                                "failure_rules"))
_WRITES += (("best_configs", "UPDATE"), ("failure_rules", "UPDATE"), ("failure_rules", "DELETE"))
_WRITE_FIX = ("`tuner search`, `tuner db import` and `tuner db merge` need a role with INSERT and "
              "UPDATE on the tuner tables and DELETE on failure_rules (docs/sharing.md); lookups work "
              "with this one")


def opened_readonly(url: URL) -> ReadOnlyDatabase:
    """The error for a write asked of a store opened read-only."""
    return ReadOnlyDatabase(f"database {safe_url(url)} was opened read-only; "
                            f"open it without readonly to write")


def permission_denied(exc: SQLAlchemyError, url: URL) -> ReadOnlyDatabase | None:
    """PostgreSQL's refusal of a write (SQLSTATE 42501) as ReadOnlyDatabase naming the fix,
    with the server's detail (the password hidden); None for any other error."""
    if getattr(getattr(exc, "orig", None), "pgcode", None) != "42501":
        return None
    detail = hide_secret(" ".join(str(exc.orig).split()), url)[:200]
    return ReadOnlyDatabase(f"database {safe_url(url)} can only read here ({detail}); {_WRITE_FIX}")


def check_sqlite_files(url: URL) -> None:
    """Raise ReadOnlyDatabase unless this user may write the SQLite file and its folder; an
    in-memory database passes."""
    path = sqlite_path(url)
    if path is None:
        return
    for target in (path, path.parent):
        if not os.access(target, os.W_OK):
            raise ReadOnlyDatabase(f"database {safe_url(url)} can only read: {target} is "
                                   f"not writable by this user; use a writable copy, or "
                                   f"fix its permissions, for `tuner search`")


def check_privileges(connection: Connection, url: URL) -> None:
    """PostgreSQL: raise ReadOnlyDatabase, naming what the role or session lacks and the fix,
    unless it can write what a search writes (INSERT on every tuner table, UPDATE on
    best_configs and failure_rules, DELETE on failure_rules, USAGE on their id sequences)."""
    missing, user = _missing_privileges(connection)
    if missing:
        raise ReadOnlyDatabase(f"database {safe_url(url)} can only read for role {user} "
                               f"(it lacks {', '.join(missing[:4])}"
                               f"{', ...' if len(missing) > 4 else ''}); {_WRITE_FIX}")


def _missing_privileges(connection: Connection) -> tuple[list[str], str]:
    """What the current role or session lacks for a search; and the role's name."""
    user, recovery, readonly = connection.execute(text(
        "SELECT current_user, pg_is_in_recovery(), current_setting('transaction_read_only')")).one()
    if recovery:
        return ["a primary server (this one is a read-only standby)"], user
    if readonly == "on":
        return ["a writable transaction (default_transaction_read_only is on)"], user
    missing = [f"{privilege} on {table}" for table, privilege in _WRITES
               if not connection.scalar(text("SELECT has_table_privilege(:t, :p)"),
                                        {"t": table, "p": privilege})]
    for table in sorted({table for table, _ in _WRITES}):
        sequence = connection.scalar(text("SELECT pg_get_serial_sequence(:t, 'id')"), {"t": table})
        if sequence and not connection.scalar(text("SELECT has_sequence_privilege(:s, 'USAGE')"),
                                              {"s": sequence}):
            missing.append(f"USAGE on sequence {sequence}")
    return missing, user
