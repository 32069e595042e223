"""A database password is never shown, stored or handed on (issue 22, item 5).

Secrets of a URL: the password of its user part (an unencoded `@` or `?` in it included) and the
`password` and `sslpassword` query parameters. They never reach a message (`safe_url`, driver
text), a stored column (`db merge`'s origin, printed by `tuner db ls`), nor a trial process's
job file or command line (a search hands the URL on through a 0600 pgpass file); the URL
handed on still connects, with real password authentication on the test server.
"""
from __future__ import annotations

import json
import os
import sqlite3
import stat
import uuid
from pathlib import Path
from typing import Iterator

import pytest
from sqlalchemy.engine import make_url

from fixtures.sharing_data import best, platform, seed, workload
from helpers import run_main
from tuner.search import Execution, SearchOptions, run_search
from tuner.settings import Settings
from tuner.storage import Store, handed_on, merge, safe_url, upgrade
from tuner.storage.urls import hide_secret
from tuner.trial import MeasureSpec

CANARY = "S3cretQ"


@pytest.mark.parametrize("url", [
    f"postgresql://bob@db/tuner?password={CANARY}",
    f"postgresql://bob@db/tuner?sslmode=require&sslpassword={CANARY}",
    f"postgresql://db/tuner?user=bob&PassWord={CANARY}&password={CANARY}",
    f"postgresql://bob:{CANARY}@db/tuner",
    f"postgresql://bob:a@{CANARY}@db/tuner",            # unencoded @: SQLAlchemy reads host "S3cretQ@db"
    f"postgresql://bob:a@{CANARY}:b@{CANARY}@db:5432/tuner",   # unparseable (port "b@...")
    f"postgresql://bob:a?{CANARY}@db/tuner?sslmode=require",   # unencoded ? in the password
    f"postgresql://bob:a/{CANARY}@db/tuner",
])
def test_safe_url_masks_every_secret(url: str) -> None:
    shown = safe_url(url)
    assert CANARY not in shown and "***" in shown and "db" in shown
    try:
        parsed = make_url(url)
    except ValueError:
        return
    assert CANARY not in safe_url(parsed)
    assert CANARY not in hide_secret(f"FATAL: password authentication failed ({CANARY})", parsed)


def test_safe_url_keeps_what_is_not_secret() -> None:
    assert safe_url("sqlite:////tmp/a@b/x:y.db") == "sqlite:////tmp/a@b/x:y.db"
    assert safe_url("postgresql://db/tuner?user=a@b&sslmode=require") == "postgresql://db/tuner?user=a@b&sslmode=require"
    assert safe_url("postgresql://bob:pw@db:5432/tuner") == "postgresql://bob:***@db:5432/tuner"


@pytest.fixture
def bob(postgres_server, postgres_url: str) -> Iterator[tuple[str, str]]:
    """(database name, role) of a role that logs in with CANARY as its password (scram-sha-256)."""
    role, name = f"bob_{uuid.uuid4().hex[:8]}", make_url(postgres_url).database
    postgres_server.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{CANARY}'")
    postgres_server.execute(f"GRANT ALL ON SCHEMA public TO {role}", database=name)
    try:
        yield name, role
    finally:
        postgres_server.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                f"WHERE usename = '{role}'")
        for database in (name, "postgres"):
            postgres_server.execute(f"DROP OWNED BY {role}", database=database)
        postgres_server.execute(f"DROP ROLE {role}")


def _url(server, name: str, role: str, query: str = "") -> str:
    return f"postgresql://{role}@{server.host}:{server.port}/{name}{query}"


@pytest.mark.postgres
def test_merge_stores_and_lists_no_password(postgres_server, bob, tmp_path: Path) -> None:
    name, role = bob
    source_url = _url(postgres_server, name, role, f"?password={CANARY}")
    upgrade(source_url)
    w, p = workload("mlp"), platform()
    with Store.open(source_url) as source:
        seed(source, w, p, best(w, p))
    target_url = f"sqlite:///{tmp_path / 'team.db'}"
    upgrade(target_url)
    with Store.open(target_url) as target:
        report = merge(target, source_url, user="alice", host="box", tuner_version="0.1.0")
    assert report.stored == 1
    with sqlite3.connect(tmp_path / "team.db") as raw:
        origins = [row[0] for row in raw.execute("SELECT origin FROM best_configs")]
        everything = "\n".join(raw.iterdump())
    assert origins and all("password=***" in origin for origin in origins), origins
    assert CANARY not in everything
    listed = run_main("db", "ls", "--db", target_url)
    assert listed.returncode == 0 and CANARY not in listed.stdout + listed.stderr


@pytest.mark.postgres
@pytest.mark.parametrize("query", ["", "?sslmode=prefer"])
def test_the_url_handed_on_has_no_password_and_connects(postgres_server, bob, query: str) -> None:
    name, role = bob
    url = f"postgresql://{role}:{CANARY}@{postgres_server.host}:{postgres_server.port}/{name}{query}"
    upgrade(url)
    with handed_on(url) as shared:
        assert CANARY not in shared
        passfile = Path(make_url(shared).query["passfile"])
        assert stat.S_IMODE(passfile.stat().st_mode) == 0o600
        assert stat.S_IMODE(passfile.parent.stat().st_mode) == 0o700
        with Store.open(shared) as store:          # libpq read the password from the file
            assert store.platforms() == []
    assert not passfile.parent.exists()
    with handed_on(_url(postgres_server, name, role)) as shared:     # no password: unchanged
        assert shared == _url(postgres_server, name, role)


SPY_MODEL = '''
import json, os, sys
from pathlib import Path
import torch
from torch import nn

def get_model():
    if Path("job.json").exists():        # in a trial process: write down what it was given
        job = Path("job.json").read_text()
        cmdline = Path("/proc/self/cmdline").read_bytes().decode(errors="replace")
        url = json.loads(job)["request"]["spec"]["kernel_db"]
        from tuner.storage import Store
        with Store.open(url, readonly=True) as store:
            connected = store.platforms() is not None
        Path(SEEN).write_text(json.dumps({"job": job, "cmdline": cmdline, "connected": connected}))
        raise RuntimeError("the spy stops the trial here")
    return nn.Sequential(nn.Linear(8, 8)).eval()

def get_inputs():
    return (torch.randn(2, 8),)
'''


@pytest.mark.postgres
@pytest.mark.slow
def test_a_trial_process_gets_no_password_but_connects(postgres_server, bob, tmp_path: Path) -> None:
    name, role = bob
    url = f"postgresql://{role}:{CANARY}@{postgres_server.host}:{postgres_server.port}/{name}"
    seen = tmp_path / "seen.json"
    model = tmp_path / "spy.py"
    model.write_text(f"SEEN = {str(seen)!r}\n" + SPY_MODEL)
    run_search(SearchOptions(MeasureSpec(str(model), repeat=2, timeout_s=120), trials=1, rounds=12,
                             runtime_knobs=False),
               execution=Execution("local"), settings=Settings(db_url=url, user="tester"))
    got = json.loads(seen.read_text())
    assert CANARY not in got["job"] and CANARY not in got["cmdline"]
    assert got["connected"] is True
    assert not [p for p in Path(os.environ.get("TMPDIR", "/tmp")).glob("tuner-secret-*")
                if p.stat().st_uid == os.getuid() and (p / "pgpass").exists()
                and CANARY in (p / "pgpass").read_text()]
