"""`tuner db check` through `tuner.cli.main`: the report on stdout, exit 0 when healthy, and exit 1
with one `error:` line naming the fix when not (tests/storage/test_db_check.py covers check_database)."""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from helpers.dbstate import damage_index
from fixtures import make_fixtures
from helpers import run_main

HEAD = make_fixtures.REVISIONS[-1]


def copy_of(revision: str, folder: Path) -> Path:
    path = folder / "tuner.db"
    shutil.copy(make_fixtures.fixture_path(revision), path)
    return path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_healthy_database_exits_0(tmp_path: Path) -> None:
    path = copy_of(HEAD, tmp_path)
    before = digest(path)
    url = f"sqlite:///{path}"
    ran = run_main("db", "check", "--db", url)
    assert ran.returncode == 0 and ran.stderr == ""
    lines = ran.stdout.splitlines()
    assert lines[:3] == [f"database: {url}", "integrity: ok", f"schema: {HEAD} (current)"]
    assert lines[3].startswith("rows: platforms ") and lines[-1] == "status: healthy"
    assert digest(path) == before


def test_the_environments_database_is_checked_without_db(tmp_path: Path) -> None:
    from helpers import cli_env

    path = copy_of(HEAD, tmp_path)
    ran = run_main("db", "check", env=cli_env(TUNER_DB=f"sqlite:///{path}"))
    assert ran.returncode == 0 and ran.stdout.splitlines()[0] == f"database: sqlite:///{path}"


def test_a_damaged_database_exits_1_naming_the_fix(tmp_path: Path) -> None:
    path = copy_of(HEAD, tmp_path)
    damage_index(path, "ix_best_configs_platform_id")
    before = digest(path)
    ran = run_main("db", "check", "--db", f"sqlite:///{path}")
    assert ran.returncode == 1
    assert ran.stdout.splitlines()[-1] == "status: corrupt"
    error, = ran.stderr.strip().splitlines()
    assert error.startswith("error: database ") and "is damaged" in error
    assert "restore it from a backup" in error and ".recover" in error
    assert digest(path) == before


def test_a_missing_or_outdated_database_exits_1_naming_the_command(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'none.db'}"
    ran = run_main("db", "check", "--db", url)
    assert ran.returncode == 1 and ran.stdout.splitlines()[-1] == "status: missing"
    assert ran.stderr.strip() == f"error: database {url} does not exist; create it with: tuner db upgrade --db {url}"
    assert not (tmp_path / "none.db").exists()

    old = copy_of(make_fixtures.REVISIONS[0], tmp_path)
    ran = run_main("db", "check", "--db", f"sqlite:///{old}")
    assert ran.returncode == 1 and ran.stdout.splitlines()[-1] == "status: outdated"
    error, = ran.stderr.strip().splitlines()
    assert error.startswith("error: ") and "tuner db upgrade" in error
