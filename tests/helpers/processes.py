"""Trial processes found in /proc, and rows kept across an interruption."""
from __future__ import annotations

import os
from pathlib import Path


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def processes() -> dict[int, tuple[int, bytes]]:
    """Every process: pid -> (parent pid, command line)."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as stat:
                fields = stat.read().rpartition(")")[2].split()
            with open(f"/proc/{name}/cmdline", "rb") as cmdline:
                found[int(name)] = (int(fields[1]), cmdline.read())
        except (OSError, IndexError):
            continue
    return found


def trial_processes(driver: int, *, spares: bool = False) -> list[int]:
    """The trial processes below `driver`, however deep (Ray: raylet -> worker -> trial); with
    `spares`, also the zygotes and the spares forked from them still waiting for a job
    (workers/zygote.py: a spare has its zygote's command line)."""
    table = processes()
    below, frontier = set(), {driver}
    while frontier:
        frontier = {pid for pid, (parent, _) in table.items() if parent in frontier} - below
        below |= frontier
    return sorted(pid for pid in below if b"tuner.workers.trial_process" in table[pid][1]
                  and (spares or not waiting_spare(pid, table[pid][1])))


def waiting_spare(pid: int, cmdline: bytes) -> bool:
    """A zygote, or a spare forked from one that has no job yet: no job.json in its folder."""
    if b"\0--zygote\0" not in cmdline:
        return False
    try:
        return not Path(f"/proc/{pid}/cwd/job.json").exists()
    except OSError:
        return False


def trial_rows(db: Path) -> list[tuple]:
    import sqlite3

    with sqlite3.connect(db) as connection:
        return connection.execute("SELECT number, status, candidate_key FROM trials ORDER BY number").fetchall()


def rows_by_key(state: dict) -> dict[str, dict]:
    """A dump (tests/helpers/dbstate.py) as table -> {first column (the id): row}."""
    return {table: {row[0]: row for row in rows} for table, rows in state.items()}


def assert_kept(before: dict, after: dict) -> None:
    """Every row of `before` is in `after`, unchanged field by field."""
    now = rows_by_key(after)
    for table, rows in rows_by_key(before).items():
        for key, row in rows.items():
            assert now[table].get(key) == row, (table, key)

