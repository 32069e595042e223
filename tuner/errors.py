"""Exceptions for user mistakes and environment problems.

Tuning failures are never exceptions: they are `Measurement` values with a status.
Every message here is one line that says what happened and what to type next.
The CLI prints `error: <message>` and exits with `exit_code`.
"""
from __future__ import annotations


class TunerError(Exception):
    """Base class: a problem the user can fix. The message names the fix."""

    exit_code = 1


class UsageError(TunerError):
    """Wrong flags or arguments."""

    exit_code = 2


class ModelFileError(TunerError):
    """The model file is missing, broken, or its model fails in eager mode."""


class SpaceError(TunerError):
    """A search-space file is malformed or names knobs of the wrong type."""


class StorageError(TunerError):
    """The database could not be opened, read or written."""


class SchemaOutdated(StorageError):
    """The database schema is older than this tuner (run `tuner db upgrade`)."""


class SchemaTooNew(StorageError):
    """The database schema is newer than this tuner (upgrade tuner)."""


class ReadOnlyDatabase(StorageError):
    """A write was needed but the database (or role) only allows reads."""


class ExchangeError(TunerError):
    """An export/import file failed validation; nothing was written."""
