"""What "nothing was lost" means in the fault tests: every row, the schema, the integrity check.

`dump` reads every row of every table (or of the given columns) with plain SQL, ordered by
primary key, so a dump taken before a fault can be compared with one taken after.
"""
from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlalchemy import inspect, text

from tuner.storage.engine import make_engine

Dump = dict[str, list[tuple]]


def dump(url: str, columns: dict[str, list[str]] | None = None) -> Dump:
    """Every row of every table (or of `columns`: table -> column names), ordered by its key."""
    engine = make_engine(url, readonly=True)
    try:
        with engine.connect() as connection:
            found = inspect(connection)
            wanted = columns or {table: [c["name"] for c in found.get_columns(table)]
                                 for table in found.get_table_names()}
            rows: Dump = {}
            for table, names in sorted(wanted.items()):
                order = ", ".join(f'"{n}"' for n in found.get_pk_constraint(table)["constrained_columns"])
                select = ", ".join(f'"{n}"' for n in names)
                rows[table] = [tuple(r) for r in connection.execute(
                    text(f'SELECT {select} FROM "{table}" ORDER BY {order or select}'))]
            return rows
    finally:
        engine.dispose()


def columns_of(url: str) -> dict[str, list[str]]:
    """Table -> column names, as the database has them now."""
    engine = make_engine(url, readonly=True)
    try:
        with engine.connect() as connection:
            found = inspect(connection)
            return {t: [c["name"] for c in found.get_columns(t)] for t in found.get_table_names()}
    finally:
        engine.dispose()


def sqlite_integrity(path: Path) -> list[str]:
    """`PRAGMA integrity_check` of a SQLite file: ["ok"] when it is sound."""
    connection = sqlite3.connect(path)
    try:
        return [row[0] for row in connection.execute("PRAGMA integrity_check")]
    finally:
        connection.close()


def sqlite_schema(path: Path) -> list[tuple]:
    """The file's schema as SQLite stores it (type, name, SQL), sorted."""
    connection = sqlite3.connect(path)
    try:
        return sorted(connection.execute("SELECT type, name, sql FROM sqlite_master"))
    finally:
        connection.close()


def damage_index(path: Path, index: str = "ix_best_configs_platform_id") -> None:
    """Flip the last 16 bytes of `index`'s root page in the SQLite file at `path`: the index
    no longer matches its table, which `PRAGMA integrity_check` reports."""
    connection = sqlite3.connect(path)
    page_size, = connection.execute("PRAGMA page_size").fetchone()
    root, = connection.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (index,)).fetchone()
    connection.close()
    with path.open("r+b") as raw:
        raw.seek(root * page_size - 16)
        tail = raw.read(16)
        raw.seek(root * page_size - 16)
        raw.write(bytes(b ^ 0x01 for b in tail))
