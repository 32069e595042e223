"""The schema check every `Store.open` runs, without importing alembic.

Compile-time lookups open the store inside a ~2 s budget, so this module reads the version
table with plain SQLAlchemy and compares it with `SCHEMA_HEAD`; alembic (tuner.storage.migrate)
is imported only to explain a mismatch. tests/storage/test_migrations.py checks that `SCHEMA_HEAD`
is the head of the shipped migrations: bump it with every new migration.
"""
from __future__ import annotations

from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection

from tuner.errors import SchemaOutdated, SchemaTooNew, StorageError
from tuner.storage.urls import safe_url

VERSION_TABLE = "tuner_alembic_version"
SCHEMA_HEAD = "0009_runtime_and_stability"


def read_revision(connection: Connection) -> str | None:
    """The revision recorded in the database; None when it has no tuner schema."""
    if not inspect(connection).has_table(VERSION_TABLE):
        return None
    revisions = connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()
    if len(revisions) > 1:
        raise StorageError(f"database {safe_url(connection.engine.url)} records several tuner "
                           f"schema revisions ({', '.join(sorted(revisions))}); "
                           f"restore it from a backup")
    return revisions[0] if revisions else None


def check_revision(have: str | None, safe: str) -> None:
    """Refuse a database whose schema is not this tuner's head, naming the fix.

    Raises SchemaOutdated (no schema, or an older one) or SchemaTooNew (a revision this
    tuner does not know, so written by a newer tuner).
    """
    if have == SCHEMA_HEAD:
        return
    if have is None:
        raise SchemaOutdated(f"database {safe} has no tuner schema; "
                             f"run: tuner db upgrade --db {safe}")
    from tuner.storage.revisions import known_revisions   # alembic loads only on this path

    if have in known_revisions():
        raise SchemaOutdated(f"database {safe} is at schema {have}, this tuner needs "
                             f"{SCHEMA_HEAD}; back it up, then run: tuner db upgrade --db {safe}")
    raise SchemaTooNew(f"database {safe} is at schema {have}, newer than this tuner's "
                       f"{SCHEMA_HEAD}; upgrade tuner (in its checkout: git pull, then pip install .) to use it")
