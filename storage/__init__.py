"""Storage: the tuner database (SQLite or PostgreSQL), its schema migrations and records.

`Store` is the only code that opens sessions; it returns the frozen records below.
The migrations ship as `tuner.migrations`; `upgrade` runs them without an alembic.ini.
The migration functions load alembic on first use, so compile-time lookups never import it.
"""
from typing import Any

from tuner.storage.check import CheckReport, check_database
from tuner.storage.records import (ApplyReport, BestConfig, FailureRule, HistoryEntry, Snapshot, StudyInfo,
                                   TrialRecord)
from tuner.storage.store import Store
from tuner.storage.urls import safe_url

_MIGRATE = ("current_revision", "downgrade", "ensure_schema", "head_revision", "upgrade")

__all__ = [
    "ApplyReport",
    "BestConfig",
    "CheckReport",
    "FailureRule",
    "HistoryEntry",
    "Snapshot",
    "Store",
    "StudyInfo",
    "TrialRecord",
    "check_database",
    "current_revision",
    "downgrade",
    "ensure_schema",
    "head_revision",
    "safe_url",
    "upgrade",
]


def __getattr__(name: str) -> Any:
    if name in _MIGRATE:
        from tuner.storage import migrate

        return getattr(migrate, name)
    raise AttributeError(f"module 'tuner.storage' has no attribute {name!r}")
