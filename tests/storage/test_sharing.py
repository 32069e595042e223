"""One database for a team: the upsert race, a read-only role, and passwords that never leak.

The race runs on SQLite and PostgreSQL; the role and password tests need real PostgreSQL
roles, so they run on the server tests/conftest.py starts (marked `postgres`). The read-only
role's commands run in this process (`tuner.cli.main`); the password test runs every command as
its own process, so that nothing it prints on any channel (warnings included) escapes the check.
"""
from __future__ import annotations

import json
import random
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from fixtures.sharing_data import best, digest, platform, seed, workload
from helpers import MODELS, cli_env, run_cli, run_main
from tuner.errors import ReadOnlyDatabase
from tuner.storage import Store, export_file, upgrade

W, P = workload("mlp", "relu", "sigmoid"), platform("AMD EPYC 9454")
PROCESSES, ATTEMPTS = 16, 4

RACE_WORKER = r"""
import json, os, sys, time
from datetime import datetime
from tuner.storage import BestConfig, Store

url, go, mine = sys.argv[1:4]
with open(mine) as f:
    attempts = json.load(f)
with Store.open(url, connect_timeout_s=60) as store:
    store.platform_row("warm-up")                       # connected before the start signal
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    started = time.monotonic()
    kept = 0
    for attempt in attempts:
        attempt["created_at"] = datetime.fromisoformat(attempt["created_at"])
        kept += store.save_best(BestConfig(**attempt))
    print(json.dumps({"kept": kept, "elapsed_s": time.monotonic() - started,
                      "finished_at": time.time()}), flush=True)
"""



def test_upsert_race_keeps_the_true_best_and_every_measurement(db_url: str, tmp_path: Path) -> None:
    """16 processes offer 4 configs each for the same (graph, platform) at the same moment."""
    upgrade(db_url)
    with Store.open(db_url) as store:
        seed(store, W, P)
    order = list(range(PROCESSES * ATTEMPTS))
    random.Random(5).shuffle(order)
    attempts = [best(W, P, ci_low=1.0 + i / 1000, speedup=1.05 + i / 1000, user=f"user{i % PROCESSES}",
                     params={"max_fusion_size": 4 + i}, minutes=i) for i in order]
    go = tmp_path / "go"
    workers = []
    for n in range(PROCESSES):
        mine = [{**asdict(a), "created_at": a.created_at.isoformat()}
                for a in attempts[n * ATTEMPTS:(n + 1) * ATTEMPTS]]
        (tmp_path / f"attempts{n}.json").write_text(json.dumps(mine))
        workers.append(subprocess.Popen(
            [sys.executable, "-c", RACE_WORKER, db_url, str(go), str(tmp_path / f"attempts{n}.json")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path))
    for worker in workers:
        assert worker.stdout.readline().strip() == "ready", worker.stderr.read()
    started = time.time()
    go.touch()
    reports = []
    for worker in workers:
        out, err = worker.communicate(timeout=300)
        assert worker.returncode == 0, err
        reports.append(json.loads(out.strip().splitlines()[-1]))
    elapsed = max(r["finished_at"] for r in reports) - started      # start signal -> last commit

    true_best = max(attempts, key=lambda a: a.ci_low)
    with Store.open(db_url, readonly=True) as store:
        rows = [b for b in store.snapshot().bests if b.graph_key == W.graphs[0].key]
        history = store.best_history(W.graphs[0].key, P.key)
    assert len(rows) == 1                                   # exactly one best row ...
    assert replace(rows[0], source="search") == true_best   # ... and it is the true best
    assert sorted(h.best.params["max_fusion_size"] for h in history) == sorted(
        a.params["max_fusion_size"] for a in attempts)      # every measurement is in history
    assert sum(h.kept for h in history) == sum(r["kept"] for r in reports) >= 1
    assert [h.kept for h in history if h.best == rows[0]] == [True]
    backend = db_url.split(":")[0]
    print(f"\nrace[{backend}]: {PROCESSES} processes x {ATTEMPTS} attempts = "
          f"{len(attempts)} concurrent upserts in {elapsed:.2f} s from the start signal to the last commit "
          f"(slowest worker {max(r['elapsed_s'] for r in reports):.2f} s); "
          f"{sum(r['kept'] for r in reports)} replaced the best on arrival; one best row "
          f"(ci_low {rows[0].ci_low}), {len(history)} history rows")


# ---------------------------------------------------------------- PostgreSQL roles

@pytest.fixture
def team_db(postgres_server, postgres_url: str, tmp_path: Path):
    """A team database (as its owner) with one tuned workload, and a way to add roles."""
    upgrade(postgres_url)
    with Store.open(postgres_url) as store:
        seed(store, W, P, best(W, P, ci_low=1.15), best(W, P, graph=1, ci_low=1.2))
    database = postgres_url.rsplit("/", 1)[1]
    roles: list[str] = []

    def add_role(kind: str, password: str, *grants: str) -> str:
        name = f"tuner_{kind}_{uuid.uuid4().hex[:8]}"
        postgres_server.execute(f"CREATE ROLE {name} LOGIN PASSWORD '{password}'",
                                *(g.format(role=name, db=database) for g in grants),
                                database=database)
        roles.append(name)
        return postgres_server.url(database, user=name, password=password)

    yield postgres_url, add_role
    for name in roles:
        postgres_server.execute(f"DROP OWNED BY {name} CASCADE", database=database)
        postgres_server.execute(f"DROP ROLE {name}")


# The statements docs/sharing.md gives for a read-only consumer (the tables' owner is
# `postgres` here, `tuner` there).
READER_GRANTS = ("GRANT CONNECT ON DATABASE {db} TO {role}",
                 "GRANT USAGE ON SCHEMA public TO {role}",
                 "GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}",
                 "ALTER DEFAULT PRIVILEGES FOR ROLE postgres IN SCHEMA public "
                 "GRANT SELECT ON TABLES TO {role}")


@pytest.mark.postgres
def test_read_only_role_looks_up_and_search_is_refused(team_db, tmp_path: Path) -> None:
    owner_url, add_role = team_db
    reader_url = add_role("reader", "reader-pw", *READER_GRANTS)
    with Store.open(reader_url, readonly=True) as store:                # lookup works
        assert store.best_config(W.graphs[0].key, P.key).ci_low == 1.15
        assert [b.graph_key for b in store.workload_best(W.key, P.key)] == [g.key for g in W.graphs]
    with Store.open(reader_url) as store:                               # writes are refused
        with pytest.raises(ReadOnlyDatabase, match="can only read for role tuner_reader_") as caught:
            store.check_writable()
        assert "INSERT on platforms" in str(caught.value) and "docs/sharing.md" in str(caught.value)
        with pytest.raises(ReadOnlyDatabase, match="can only read"):
            store.save_best(best(W, P, ci_low=2.0))
    before = digest(owner_url)

    done = run_main("db", "ls", "--db", reader_url)
    assert done.returncode == 0 and "mlp" in done.stdout, done.stderr
    exchange = tmp_path / "x.json"
    with Store.open(owner_url) as store:
        export_file(store, exchange, user="u", host="h", tuner_version="0.1.0")
    done = run_main("db", "import", str(exchange), "--db", reader_url)
    assert done.returncode == 1 and "can only read" in done.stderr, done.stderr

    started = time.monotonic()
    done = run_main("search", str(MODELS / "mlp_a.py"), "--trials", "2", "--db", reader_url)
    assert done.returncode == 1, done.stdout + done.stderr
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("error: ") and "can only read" in error, done.stderr
    assert "trial" not in done.stdout.lower()
    assert digest(owner_url) == before                     # no study, no trial, nothing
    print(f"\nsearch with the read-only role refused after {time.monotonic() - started:.1f} s: {error}")


@pytest.mark.postgres
def test_password_never_leaves_the_url(team_db, postgres_server, tmp_path: Path) -> None:
    """A canary password through every `tuner db` command, succeeding and failing; then grep
    every output, the exchange file and every stored row for it."""
    owner_url, add_role = team_db
    canary = f"canary-{uuid.uuid4().hex}"
    url = add_role("writer", canary, "GRANT CONNECT ON DATABASE {db} TO {role}",
                   "GRANT ALL ON SCHEMA public TO {role}",
                   "GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}",
                   "GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role}")
    laptop = f"sqlite:///{tmp_path / 'laptop.db'}"
    upgrade(laptop)
    with Store.open(laptop) as store:
        seed(store, W, P, best(W, P, ci_low=1.3, speedup=1.4, user="laptop-user"))
    wrong = url.replace(canary, canary + "-wrong")
    no_db = url.rsplit("/", 1)[0] + "/no_such_db"
    no_server = url.replace(f":{postgres_server.port}/", ":9/")
    exchange = tmp_path / "team.json"
    in_order = [                                      # each needs the one before
        ("db", "upgrade", "--db", url),
        ("db", "merge", laptop, "--db", url),
        ("db", "ls", "--db", url),
        ("db", "export", "--out", str(exchange), "--db", url),
        ("db", "import", str(exchange), "--db", url),
        ("db", "merge", url, "--db", f"sqlite:///{tmp_path / 'copy.db'}"),
    ]
    failing = [                                       # independent: run side by side
        ("db", "ls", "--db", wrong),
        ("--debug", "db", "import", str(exchange), "--db", wrong),
        ("db", "export", "--out", str(tmp_path / "y.json"), "--db", no_db),
        ("--debug", "db", "upgrade", "--db", no_db),
        ("db", "merge", wrong, "--db", laptop),
        ("db", "ls", "--db", no_server),
    ]
    outputs = []
    for args in in_order:
        done = run_cli(*args, cwd=tmp_path, timeout=120)
        assert done.returncode == 0, (args, done.stderr)
        outputs.append(done.stdout + done.stderr)
    env = [cli_env()] * len(failing) + [cli_env(TUNER_DB=wrong)]     # the URL from the environment
    running = [subprocess.Popen([sys.executable, "-m", "tuner", *args], cwd=tmp_path, env=e,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for args, e in zip(failing + [("db", "ls")], env)]
    for args, process in zip(failing + [("db", "ls")], running):
        out, err = process.communicate(timeout=120)
        assert process.returncode == 1 and err.count("error: ") == 1, (args, err)
        outputs.append(out + err)
    text = "\n".join(outputs)
    assert "password authentication failed" in text and "no_such_db" in text
    assert ":***@" in text
    assert canary not in text
    assert canary not in exchange.read_text()
    for stored in (owner_url, laptop, f"sqlite:///{tmp_path / 'copy.db'}"):
        assert canary not in _dump(stored), stored
    with Store.open(url) as store:
        assert canary not in repr(store) and canary not in store.safe_url


def _dump(url: str) -> str:
    from sqlalchemy import MetaData, select

    from tuner.storage.engine import make_engine

    engine = make_engine(url)
    try:
        meta = MetaData()
        with engine.connect() as connection:
            meta.reflect(connection)
            return "\n".join(repr(row) for table in meta.tables.values()
                             for row in connection.execute(select(table)))
    finally:
        engine.dispose()
