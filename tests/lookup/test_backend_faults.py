"""The backend never breaks the program: every database fault gives defaults and one warning.

Each fault compiles the tiny MLP through a `TunerBackend` with its own `Lookup` (one
Lookup is one process's view: its warning is issued once), checks exactly one
`LookupWarning`, a second lookup that warns no more and answers at once, and an output
bit-identical to `torch.compile(backend="inductor")`. One subprocess checks the same for
the real entry point, `backend="tuner"`, across two graphs of one process.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest
import torch

from helpers import MODELS, cli_env, tiny_model_and_input
from helpers.stored import store_configs, tiny_workload

TIMEOUT_S = 2.0


@pytest.fixture(scope="module")
def tiny():
    """The tiny MLP, its input, its default-compiled output, its workload and platform."""
    from tuner.platform import current_platform

    model, x = tiny_model_and_input(7)
    torch._dynamo.reset()
    with torch.no_grad():
        default = torch.compile(model, backend="inductor")(x)
    return model, x, default, tiny_workload(), current_platform("cpu")


@pytest.fixture(scope="module")
def good_db(tmp_path_factory: pytest.TempPathFactory, tiny) -> Path:
    """A valid database holding a non-default config for the tiny MLP on this platform."""
    *_, workload, platform = tiny
    path = tmp_path_factory.mktemp("good") / "tuner.db"
    store_configs(f"sqlite:///{path}", workload, platform, {"max_fusion_size": 8})
    return path


def compile_with(url: str, tiny) -> tuple[torch.Tensor, list[warnings.WarningMessage], object]:
    """Compile and run the tiny MLP through a fresh Lookup on `url`; return output, warnings, lookup."""
    from tuner.lookup import Lookup
    from tuner.lookup.backend import TunerBackend
    from tuner.settings import Settings

    model, x, *_ = tiny
    lookup = Lookup(Settings(db_url=url, lookup_timeout_s=TIMEOUT_S))
    torch._dynamo.reset()
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        out = torch.compile(model, backend=TunerBackend(lookup=lookup))(x)
    return out, caught, lookup


def assert_one_warning_and_defaults(url: str, tiny, *, match: str):
    from tuner.lookup import LookupWarning
    from tuner.lookup.decision import Tier

    _, _, default, workload, platform = tiny
    out, caught, lookup = compile_with(url, tiny)
    lookup_warnings = [w for w in caught if issubclass(w.category, LookupWarning)]
    assert len(lookup_warnings) == 1, [str(w.message) for w in caught]
    assert match in str(lookup_warnings[0].message)
    assert torch.equal(out, default)                     # bit-identical to plain torch.compile
    # a second graph in the same process: no second warning, and no second wait
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        start = time.perf_counter()
        decision = lookup.decide("0" * 32, platform)
        elapsed = time.perf_counter() - start
    assert decision.tier is Tier.UNAVAILABLE and decision.config.is_default
    assert not [w for w in again if issubclass(w.category, LookupWarning)]
    return lookup, elapsed


def test_no_database_file(tmp_path: Path, tiny) -> None:
    path = tmp_path / "missing" / "tuner.db"
    _, elapsed = assert_one_warning_and_defaults(f"sqlite:///{path}", tiny, match="does not exist")
    assert elapsed < 0.1
    assert not path.exists() and not path.parent.exists()      # lookup never creates anything


def test_corrupt_file(tmp_path: Path, tiny) -> None:
    path = tmp_path / "tuner.db"
    path.write_bytes(b"\x00not sqlite\xff" + os.urandom(8192))
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    _, elapsed = assert_one_warning_and_defaults(f"sqlite:///{path}", tiny, match="not a SQLite database")
    assert elapsed < 0.1
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_locked_by_another_writer_answers_within_the_timeout(tmp_path: Path, good_db: Path, tiny) -> None:
    from tuner.lookup import Lookup
    from tuner.lookup.decision import Tier
    from tuner.settings import Settings

    *_, workload, platform = tiny
    path = tmp_path / "tuner.db"
    shutil.copy(good_db, path)
    holder = sqlite3.connect(path, isolation_level=None)
    # A plain BEGIN EXCLUSIVE does not block readers of a WAL database (lookup just reads);
    # an exclusive-locking-mode writer does, which is the case to survive.
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("UPDATE best_configs SET rounds = rounds + 1")
    try:
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            decision = Lookup(Settings(db_url=f"sqlite:///{path}", lookup_timeout_s=TIMEOUT_S)).decide(
                workload.graphs[0].key, platform)
        waited = time.perf_counter() - start
        assert decision.tier is Tier.UNAVAILABLE and "locked" in decision.reason
        assert TIMEOUT_S * 0.8 <= waited < TIMEOUT_S + 1.5, waited
        _, elapsed = assert_one_warning_and_defaults(f"sqlite:///{path}", tiny, match="locked")
        assert elapsed < 0.1
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_a_plain_exclusive_writer_does_not_block_the_lookup(tmp_path: Path, good_db: Path, tiny) -> None:
    from tuner.lookup import Lookup
    from tuner.lookup.decision import Tier
    from tuner.settings import Settings

    *_, workload, platform = tiny
    path = tmp_path / "tuner.db"
    shutil.copy(good_db, path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("UPDATE best_configs SET rounds = rounds + 1")
    try:
        start = time.perf_counter()
        decision = Lookup(Settings(db_url=f"sqlite:///{path}")).decide(workload.graphs[0].key, platform)
        assert decision.tier is Tier.EXACT and time.perf_counter() - start < 1.0
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_future_schema_revision(tmp_path: Path, good_db: Path, tiny) -> None:
    path = tmp_path / "tuner.db"
    shutil.copy(good_db, path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE tuner_alembic_version SET version_num = '0099_from_the_future'")
    assert_one_warning_and_defaults(f"sqlite:///{path}", tiny, match="newer than this tuner")


def test_database_without_a_tuner_schema(tmp_path: Path, tiny) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE unrelated (x)")
    assert_one_warning_and_defaults(f"sqlite:///{path}", tiny, match="tuner db upgrade")


@pytest.mark.parametrize("params, fields, match", [
    ({"no_such_knob_in_this_torch": True}, {}, "no_such_knob_in_this_torch"),
    ({"max_fusion_size": "big"}, {}, "max_fusion_size"),
    # the config measured without freezing is re-validated like the params
    ({"max_fusion_size": 8, "freezing": True}, {"unfrozen_params": {"no_such_knob_in_this_torch": True}},
     "no_such_knob_in_this_torch"),
], ids=["unknown-knob", "wrong-type", "unknown-knob-in-unfrozen"])
def test_stored_config_that_does_not_validate(tmp_path: Path, tiny, params: dict, fields: dict,
                                              match: str) -> None:
    from tuner.lookup.decision import Tier

    *_, workload, platform = tiny
    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    store_configs(url, workload, platform, params, **fields)
    _, _, default, *_ = tiny
    out, caught, lookup = compile_with(url, tiny)
    messages = [str(w.message) for w in caught if w.category.__name__ == "LookupWarning"]
    assert len(messages) == 1 and match in messages[0], messages
    assert torch.equal(out, default)
    assert lookup.decide(workload.graphs[0].key, platform).tier is Tier.UNAVAILABLE
    assert lookup.unusable is None                  # one bad config does not close the database


def test_unreachable_postgres(tiny) -> None:
    pytest.importorskip("psycopg2")
    from tuner.lookup import Lookup
    from tuner.lookup.decision import Tier
    from tuner.settings import Settings

    *_, platform = tiny
    url = "postgresql://tuner@10.255.255.1:5432/tuner"     # routable nowhere: refused at once or timed out
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        decision = Lookup(Settings(db_url=url, lookup_timeout_s=TIMEOUT_S)).decide("0" * 32, platform)
    assert decision.tier is Tier.UNAVAILABLE
    assert time.perf_counter() - start < TIMEOUT_S + 1.5
    assert_one_warning_and_defaults(url, tiny, match="10.255.255.1")


def test_lookup_reads_only(good_db: Path, tiny) -> None:
    from tuner.lookup import Lookup
    from tuner.lookup.decision import Tier
    from tuner.settings import Settings

    *_, workload, platform = tiny
    before = hashlib.sha256(good_db.read_bytes()).hexdigest()
    decision = Lookup(Settings(db_url=f"sqlite:///{good_db}")).decide(workload.graphs[0].key, platform)
    assert decision.tier is Tier.EXACT
    assert hashlib.sha256(good_db.read_bytes()).hexdigest() == before


@pytest.mark.slow
def test_entry_point_warns_once_per_process_over_two_graphs(tmp_path: Path) -> None:
    program = tmp_path / "program.py"
    program.write_text(textwrap.dedent(f'''
        import sys, torch
        sys.path.insert(0, {str(MODELS)!r})
        import graph_break
        torch.manual_seed(0)
        model, x = graph_break.get_model(), torch.randn(2, 8)
        with torch.no_grad():
            tuned = torch.compile(model, backend="tuner")(x)
            torch._dynamo.reset()
            default = torch.compile(model, backend="inductor")(x)
        print("EQUAL", torch.equal(tuned, default))
    '''))
    env = cli_env(TUNER_DB=f"sqlite:///{tmp_path / 'nowhere' / 'tuner.db'}")
    out = subprocess.run([sys.executable, str(program)], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "EQUAL True" in out.stdout
    assert out.stderr.count("LookupWarning") == 1, out.stderr[-3000:]
    assert not (tmp_path / "nowhere").exists()
