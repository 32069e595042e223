"""Database URLs: parse them once, and print them without their password.

Every message, log line and repr that names a database goes through `safe_url`.
"""
from __future__ import annotations

import re
from pathlib import Path

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from tuner.errors import StorageError

SUPPORTED = ("sqlite", "postgresql")
_PASSWORD = re.compile(r"(://[^:/@]*:)[^@/]*@")


def safe_url(url: str | URL) -> str:
    """The URL with any password replaced by `***`. Never raises, even on a malformed URL."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError, TypeError):
        return _PASSWORD.sub(r"\1***@", str(url))


def parse_url(url: str) -> URL:
    """Parse a database URL; only SQLite and PostgreSQL are supported.

    Raises StorageError (naming the accepted forms) for anything else.
    """
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise StorageError(f"cannot parse database URL {safe_url(url)!r}; "
                           f"use sqlite:///PATH or postgresql://USER@HOST/DB") from exc
    if parsed.get_backend_name() not in SUPPORTED:
        raise StorageError(f"database {safe_url(parsed)} is not supported; "
                           f"use sqlite:///PATH or postgresql://USER@HOST/DB")
    return parsed


def sqlite_path(url: URL) -> Path | None:
    """The file behind a SQLite URL, or None for an in-memory database (or a non-SQLite URL)."""
    if url.get_backend_name() != "sqlite":
        return None
    database = url.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        return None
    return Path(database).expanduser().absolute()


def hide_secret(text: str, url: URL) -> str:
    """`text` with the URL's raw password removed, for driver messages we pass on."""
    password = url.password
    if password:
        text = text.replace(str(password), "***")
    return text
