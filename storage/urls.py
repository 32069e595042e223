"""Database URLs: parse them once, print them without their secrets, hand them on without them.

Every message, log line, repr and stored column that names a database goes through `safe_url`.
A secret is the password of the user part (an unencoded `@` in it included: the user part ends
at the last `@` of the authority) and the value of a `password` or `sslpassword` query
parameter, libpq's names.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from tuner.errors import StorageError

SUPPORTED = ("sqlite", "postgresql")
SECRET_PARAMETERS = ("password", "sslpassword")
_MASK = "***"


def safe_url(url: str | URL) -> str:
    """The URL with every secret replaced by `***`. Never raises, even on a malformed URL."""
    text = url.render_as_string(hide_password=False) if isinstance(url, URL) else str(url)
    return _masked(text)[0]


def _masked(text: str) -> tuple[str, list[str]]:
    """(`text` with its secrets masked, the secrets found), read as text, not parsed: a
    malformed URL (an unencoded `@` or `?` in the password) must not leak part of one."""
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "", text
    secrets: list[str] = []
    head, qmark, query = rest.partition("?")
    at = head.rfind("@")
    if at < 0 and "@" in query:          # an unencoded `?` in the password
        at = rest.find("@")
        head, qmark, query = rest, "", ""
        query_at = rest.find("?", at)
        if query_at >= 0:
            head, qmark, query = rest[:query_at], "?", rest[query_at + 1:]
    if at >= 0:
        user, colon, password = head[:at].partition(":")
        if colon and "/" not in user:
            secrets.append(password)
            head = f"{user}:{_MASK}@{head[at + 1:]}"
    parts = []
    for part in query.split("&") if qmark else ():
        name, eq, value = part.partition("=")
        if eq and unquote(name).lower() in SECRET_PARAMETERS:
            secrets.append(value)
            part = f"{name}={_MASK}"
        parts.append(part)
    return scheme + sep + head + qmark + "&".join(parts), secrets


def without_secrets(url: URL) -> URL:
    """`url` with no password and no secret query parameter (what may travel or be stored)."""
    query = {k: v for k, v in url.query.items() if k.lower() not in SECRET_PARAMETERS}
    return URL.create(url.drivername, username=url.username, host=url.host, port=url.port,
                      database=url.database, query=query)


def secret_of(url: str | URL) -> str | None:
    """The password `url` carries (user part first, else a `password` parameter), or None."""
    parsed = make_url(url) if isinstance(url, str) else url
    if parsed.password:
        return str(parsed.password)
    value = parsed.query.get("password")
    return value if isinstance(value, str) and value else None


@contextlib.contextmanager
def handed_on(url: str) -> Iterator[str]:
    """`url` as it may travel to other processes (Ray task arguments, a trial's job file).

    A URL without a password is handed on unchanged (libpq still reads PGPASSWORD and
    ~/.pgpass where it connects). One with a password loses it: the password waits in a
    pgpass file, 0600 in a 0700 folder of its own, that the handed URL names in libpq's
    `passfile` parameter, so processes of this user on this machine connect with it and no
    command line, task argument or stored row shows it. The folder is removed on exit.
    Remote Ray nodes do not see the file: give them PGPASSWORD or ~/.pgpass (docs/sharing.md).
    """
    parsed = parse_url(url)
    secret = secret_of(parsed) if parsed.get_backend_name() == "postgresql" else None
    if secret is None:
        yield url
        return
    folder = tempfile.mkdtemp(prefix="tuner-secret-")          # 0700
    try:
        passfile = Path(folder) / "pgpass"
        escaped = secret.replace("\\", "\\\\").replace(":", "\\:")
        fd = os.open(passfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(f"*:*:*:*:{escaped}\n")
        plain = without_secrets(parsed)
        yield plain.set(query={**plain.query, "passfile": str(passfile)}).render_as_string(hide_password=False)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


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
    """`text` with the URL's secrets removed, for driver messages we pass on. Where the URL
    was malformed (an unencoded `@`, `?` or `/` in the password), SQLAlchemy took part of the
    password for the host, so each such part goes too."""
    secrets: set[str] = set()
    for secret in _masked(url.render_as_string(hide_password=False))[1]:
        for form in {secret, unquote(secret)}:
            secrets.add(form)
            secrets.update(part for part in re.split(r"[@?/#]", form) if len(part) >= 3)
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, _MASK)
    return text
