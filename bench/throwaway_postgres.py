"""A throw-away PostgreSQL server for benchmarks, started with tests/conftest.py's helpers."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def start_postgres() -> tuple[Any, Callable[[], None]]:
    """A server on 127.0.0.1 in a new temporary folder, started the way tests/conftest.py
    starts it (its helpers are imported); returns it and a function that stops and deletes it."""
    import pwd

    sys.path.insert(0, str(ROOT / "tests"))
    import conftest

    bindir = conftest._postgres_bindir()
    if bindir is None:
        raise SystemExit("PostgreSQL server binaries not found; install Debian's postgresql")
    folder = Path(tempfile.mkdtemp(prefix="tuner-bench-pg-"))
    data = folder / "data"
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        os.chown(folder, owner.pw_uid, owner.pw_gid)
    run = lambda *a: subprocess.run(conftest._as_postgres([str(x) for x in a]), check=True,
                                    capture_output=True, text=True, timeout=120)
    run(bindir / "initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8",
        "--locale", "C")
    (data / "pg_hba.conf").write_text(conftest.HBA)
    server = conftest.PostgresServer("127.0.0.1", conftest._start(run, bindir, data, folder), folder)

    def stop() -> None:
        subprocess.run(conftest._as_postgres([str(bindir / "pg_ctl"), "-D", str(data), "-m",
                                              "immediate", "-w", "stop"]), capture_output=True,
                       timeout=60)
        shutil.rmtree(folder, ignore_errors=True)

    return server, stop


def postgres_counter(server: Any, database: str) -> Callable[[], int]:
    """A function that counts the server's connections to `database` (pg_stat_activity)."""
    import psycopg2

    connection = psycopg2.connect(host=server.host, port=server.port, user="postgres",
                                  dbname="postgres")
    connection.autocommit = True

    def count() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (database,))
            return cursor.fetchone()[0]

    return count
