"""Schema migrations and the schema check on open, against real databases.

Tests taking `db_url` (tests/conftest.py) run once per backend: a SQLite file and a real
PostgreSQL server.
"""
from __future__ import annotations

import ast
import hashlib
import os
import sqlite3
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from fixtures import make_fixtures          # tests/fixtures: the committed databases' rows
from tuner.errors import ReadOnlyDatabase, SchemaOutdated, SchemaTooNew, StorageError
from tuner.platform import Platform
from tuner.storage import Store, current_revision, upgrade
from tuner.storage.engine import make_engine
from tuner.storage.migrate import downgrade, head_revision, known_revisions, script_location
from tuner.storage.schema import SCHEMA_HEAD, VERSION_TABLE
from tuner.storage.models import Base

PAIRED = ("threads", "baseline_ms", "speedup", "speedup_low", "speedup_high")
PHASES = ("start_s", "load_s", "baseline_compile_s", "measure_s", "compile_cached")     # 0008
NO_VERDICT = {"eager": False, "unfrozen_params": None, "unfrozen_speedup": None,
              "search_speedup": None}
NO_RUNTIME = make_fixtures.NO_RUNTIME                                                # 0009
TABLES = {"platforms", "workloads", "graphs", "studies", "trials", "best_configs", "best_history",
          "kernel_configs", "failure_rules"}



def table_names(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return set(inspect(connection).get_table_names())
    finally:
        engine.dispose()


def set_revision(url: str, revision: str) -> None:
    engine = make_engine(url)
    with engine.begin() as connection:
        connection.execute(text(f"UPDATE {VERSION_TABLE} SET version_num = :rev"),
                           {"rev": revision})
    engine.dispose()


def test_schema_head_is_the_shipped_head() -> None:
    assert head_revision() == SCHEMA_HEAD, "bump SCHEMA_HEAD in storage/schema.py"


def test_upgrade_from_empty(db_url: str) -> None:
    upgrade(db_url)
    assert current_revision(db_url) == SCHEMA_HEAD
    assert table_names(db_url) == TABLES | {VERSION_TABLE}
    upgrade(db_url)                                   # idempotent at head
    Store.open(db_url).close()


def test_downgrade_to_base_and_back(db_url: str) -> None:
    upgrade(db_url)
    downgrade(db_url, "base")
    assert current_revision(db_url) is None
    assert table_names(db_url) <= {VERSION_TABLE}
    upgrade(db_url)
    assert current_revision(db_url) == head_revision()


def test_models_match_migrations(db_url: str) -> None:
    upgrade(db_url)
    engine = make_engine(db_url)
    with engine.connect() as connection:
        context = MigrationContext.configure(
            connection, opts={"compare_type": True, "version_table": VERSION_TABLE})
        assert compare_metadata(context, Base.metadata) == []
    engine.dispose()


def test_version_table_is_ours(db_url: str) -> None:
    upgrade(db_url)
    names = table_names(db_url)
    assert "tuner_alembic_version" in names and "alembic_version" not in names


def test_future_revision_is_refused(db_url: str) -> None:
    upgrade(db_url)
    set_revision(db_url, "9999_future")
    with pytest.raises(SchemaTooNew) as caught:
        Store.open(db_url)
    message = str(caught.value)
    assert "9999_future" in message and SCHEMA_HEAD in message
    assert "upgrade tuner" in message and "\n" not in message
    with pytest.raises(SchemaTooNew):
        upgrade(db_url)
    assert current_revision(db_url) == "9999_future"


def test_database_without_schema_is_refused(db_url: str) -> None:
    with pytest.raises(SchemaOutdated) as caught:
        Store.open(db_url)
    message = str(caught.value)
    assert "no tuner schema" in message and "tuner db upgrade --db" in message
    assert "\n" not in message
    Store.open(db_url, check_schema=False).close()


def test_random_bytes_are_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(os.urandom(8192))
    for readonly in (False, True):
        with pytest.raises(StorageError, match="not a SQLite database") as caught:
            Store.open(f"sqlite:///{path}", readonly=readonly)
        assert type(caught.value) is StorageError and str(path) in str(caught.value)


def test_readonly_never_creates_a_file(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "tuner.db"
    with pytest.raises(StorageError, match="does not exist"):
        Store.open(f"sqlite:///{path}", readonly=True)
    with pytest.raises(StorageError):
        current_revision(f"sqlite:///{path}")
    assert not path.parent.exists()


def test_readonly_never_writes(tmp_path: Path) -> None:
    path = tmp_path / "tuner.db"
    url = f"sqlite:///{path}"
    upgrade(url)
    before = hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns
    with Store.open(url, readonly=True) as store:
        assert store.platform_row("any") is None
        with pytest.raises(ReadOnlyDatabase):
            store.ensure_platform(Platform("p", "h", "s", "cpu", (), ()))
        with pytest.raises(ReadOnlyDatabase), store.session_scope() as session:
            session.connection().exec_driver_sql("CREATE TABLE sneaky (x INTEGER)")
    assert (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns) == before


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="root ignores file modes")
def test_readonly_opens_a_read_only_file(tmp_path: Path) -> None:
    path = tmp_path / "tuner.db"
    upgrade(f"sqlite:///{path}")
    path.chmod(0o444)
    with Store.open(f"sqlite:///{path}", readonly=True) as store:
        assert store.workload("any") is None


def test_migrations_ship_in_the_package_and_stand_alone() -> None:
    folder = script_location()
    assert (folder / "env.py").is_file() and (folder / "script.py.mako").is_file()
    versions = sorted((folder / "versions").glob("[0-9][0-9][0-9][0-9]_*.py"))
    assert [v.stem for v in versions][0] == "0001_initial"
    for version in versions:
        tree = ast.parse(version.read_text())
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                    for alias in node.names}
        imported |= {node.module or "" for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom)}
        assert not {name for name in imported if name.split(".")[0] == "tuner"}, version.name
        assert any(isinstance(node, ast.FunctionDef) and node.name == "downgrade"
                   for node in tree.body), version.name
    assert not (folder / "__init__.py").exists()       # would shadow the alembic library


def test_sqlite_file_is_left_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "tuner.db"
    upgrade(f"sqlite:///{path}")
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    raw.close()


# ---------------------------------------------------------------- committed fixture databases


def fixture_db(db_url: str, revision: str, tmp_path: Path) -> None:
    """The committed SQLite file for `revision` (copied), or its rows written on PostgreSQL."""
    if db_url.startswith("sqlite"):
        committed = make_fixtures.fixture_path(revision)
        target = Path(db_url.removeprefix("sqlite:///"))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(committed.read_bytes())
        assert current_revision(db_url) == revision
    else:
        make_fixtures.populate(db_url, revision)


@pytest.mark.parametrize("revision", make_fixtures.REVISIONS)
def test_every_released_schema_upgrades_and_reads_back(revision: str, db_url: str,
                                                       tmp_path: Path) -> None:
    from tuner.storage.provenance import measurement_key

    assert revision in known_revisions()
    fixture_db(db_url, revision, tmp_path)
    if revision != SCHEMA_HEAD:
        with pytest.raises(SchemaOutdated, match=f"at schema {revision}"):
            Store.open(db_url)
    upgrade(db_url)
    assert current_revision(db_url) == SCHEMA_HEAD
    rows = make_fixtures.rows_at(revision)
    platforms = {row["id"]: row for row in rows["platforms"]}
    workloads = {row["id"]: row for row in rows["workloads"]}
    with Store.open(db_url, readonly=True) as store:
        for row in rows["platforms"]:
            got = store.platform_row(row["key"])
            assert (got.hardware_key, got.software_key, got.device) == (
                row["hardware_key"], row["software_key"], row["device"])
            assert (dict(got.hardware), dict(got.software)) == (row["hardware"], row["software"])
        snapshot = store.snapshot()
        assert store.workload_names() == {w["key"]: w["name"] for w in rows["workloads"]}
        graphs = {(w.key, g.index): g for w in snapshot.workloads for g in w.graphs}
        for row in rows["graphs"]:
            graph = graphs[(workloads[row["workload_id"]]["key"], row["index"])]
            assert (graph.key, graph.num_nodes, graph.input_meta, graph.code) == (
                row["key"], row["num_nodes"], row["input_meta"], row["code"])
        for study_row in rows["studies"]:
            w, p = workloads[study_row["workload_id"]], platforms[study_row["platform_id"]]
            study = store.last_study(w["key"], p["key"])
            assert study.id == study_row["id"]
            for name in ("space_hash", "sampler", "seed", "trials_requested", "created_at",
                         "user", "host", "tuner_version"):
                assert getattr(study, name) == study_row[name], name
            assert (study.torch_version, study.triton_version) == (
                p["software"]["torch"], p["software"]["triton"])        # filled by 0002
            trials = {t.number: t for t in store.trials(study.id)}
            expected = [t for t in rows["trials"] if t["study_id"] == study.id]
            assert len(trials) == len(expected)
            for trial_row in expected:
                got = trials[trial_row["number"]]
                assert (got.candidate_key, got.params, got.started_at, got.finished_at) == (
                    trial_row["candidate_key"], trial_row["params"], trial_row["started_at"],
                    trial_row["finished_at"])
                m = got.measurement
                assert (m.status.value, m.latency_ms, m.spread_ms, m.compile_s, m.peak_mem_mb,
                        m.reps, m.error, m.worker) == tuple(trial_row[name] for name in (
                            "status", "latency_ms", "spread_ms", "compile_s", "peak_mem_mb",
                            "reps", "error", "worker"))
                for name in PAIRED + PHASES:          # NULL in trials from before 0004 and 0008
                    assert getattr(m, name) == trial_row.get(name), name
        for best_row in rows["best_configs"]:
            key = platforms[best_row["platform_id"]]["key"]
            got = store.best_config(best_row["graph_key"], key)
            for name, value in {**NO_VERDICT, **NO_RUNTIME, **best_row}.items():   # the defaults before 0004, 0009
                if name not in ("id", "platform_id"):
                    assert getattr(got, name) == value, name
            # 0007 marks the rows whose knobs are unsafe, in every older database too
            assert got.unsafe is (make_fixtures.UNSAFE_0007 in best_row["params"]), best_row["id"]
            history = store.best_history(best_row["graph_key"], key)
            if revision == "0001_initial":        # 0002 seeds one kept entry per best config
                assert [(h.best, h.kept, h.measurement_key) for h in history] == [
                    (got, True, measurement_key(got))]
        rules = {(r.platform_key, r.knobs): r for r in store.snapshot().rules}
        assert len(rules) == len(rows.get("failure_rules", []))
        for rule_row in rows.get("failure_rules", []):                # 0005
            rule = rules[(platforms[rule_row["platform_id"]]["key"], tuple(sorted(rule_row["knobs"].items())))]
            assert (rule.key, rule.failures, rule.source, rule.origin, rule.created_at) == tuple(
                rule_row[name] for name in ("rule_key", "failures", "source", "origin", "created_at"))
        for history_row in rows.get("best_history", []):
            key = platforms[history_row["platform_id"]]["key"]
            entry = next(h for h in store.best_history(history_row["graph_key"], key)
                         if h.measurement_key == history_row["measurement_key"])
            assert (entry.kept, entry.recorded_at) == (history_row["kept"], history_row["recorded_at"])
            for name, value in {**NO_VERDICT, **NO_RUNTIME, **history_row}.items():
                if name not in ("id", "platform_id", "measurement_key", "kept", "recorded_at"):
                    assert getattr(entry.best, name) == value, name


def test_fixture_downgrades_keep_the_older_rows(db_url: str, tmp_path: Path) -> None:
    fixture_db(db_url, "0001_initial", tmp_path)
    upgrade(db_url)
    downgrade(db_url, "0001_initial")
    assert current_revision(db_url) == "0001_initial"
    engine = make_engine(db_url)
    with engine.connect() as connection:
        got = connection.execute(text("SELECT id, graph_key, ci_low, rounds FROM best_configs "
                                      "ORDER BY id")).all()
        assert "best_history" not in inspect(connection).get_table_names()
    engine.dispose()
    assert [tuple(r) for r in got] == [(b["id"], b["graph_key"], b["ci_low"], b["rounds"])
                                       for b in make_fixtures.ROWS["best_configs"]]


def test_0004_downgrade_drops_its_columns_and_keeps_the_rows(db_url: str, tmp_path: Path) -> None:
    from dataclasses import replace

    fixture_db(db_url, "0004_paired_trials", tmp_path)
    upgrade(db_url)                                   # to head, so the store opens it
    rows = make_fixtures.rows_at("0004_paired_trials")
    with Store.open(db_url, readonly=True) as store:
        before = store.snapshot().bests
    downgrade(db_url, "0003_kernel_configs")
    assert current_revision(db_url) == "0003_kernel_configs"
    engine = make_engine(db_url)
    with engine.connect() as connection:
        found = inspect(connection)
        columns = {t: {c["name"] for c in found.get_columns(t)}
                   for t in ("trials", "best_configs", "best_history")}
        counts = {t: connection.scalar(text(f"SELECT count(*) FROM {t}")) for t in columns}
    engine.dispose()
    assert not columns["trials"] & set(PAIRED)
    assert not (columns["best_configs"] | columns["best_history"]) & set(NO_VERDICT)
    assert counts == {t: len(rows[t]) for t in columns}
    upgrade(db_url)
    with Store.open(db_url, readonly=True) as store:
        after = store.snapshot().bests
        trials = [t.measurement for s in (1, 2) for t in store.trials(s)]
    assert after == tuple(replace(b, **NO_VERDICT) for b in before)      # defaults again
    assert {m.threads for m in trials} == {None} and {m.speedup for m in trials} == {None}


def test_0005_downgrade_drops_the_failure_rules_and_keeps_the_rest(db_url: str, tmp_path: Path) -> None:
    fixture_db(db_url, "0005_failure_rules", tmp_path)
    upgrade(db_url)                                   # to head, so the store opens it
    with Store.open(db_url, readonly=True) as store:
        before = store.snapshot()
    assert len(before.rules) == 2
    downgrade(db_url, "0004_paired_trials")
    assert current_revision(db_url) == "0004_paired_trials"
    assert "failure_rules" not in table_names(db_url)
    upgrade(db_url)
    with Store.open(db_url, readonly=True) as store:
        after = store.snapshot()
    assert after.rules == () and after.bests == before.bests


def test_every_shipped_revision_has_a_committed_fixture() -> None:
    assert list(make_fixtures.REVISIONS) == known_revisions()
    for revision in known_revisions():
        assert make_fixtures.fixture_path(revision).is_file(), (
            f"commit a fixture for {revision}: python tests/fixtures/make_fixtures.py {revision}")


def test_0008_downgrade_drops_the_phase_columns_and_keeps_the_trials(db_url: str, tmp_path: Path) -> None:
    fixture_db(db_url, "0008_trial_phases", tmp_path)
    upgrade(db_url)
    downgrade(db_url, "0007_unsafe_rows")
    engine = make_engine(db_url)
    with engine.connect() as connection:
        columns = {c["name"] for c in inspect(connection).get_columns("trials")}
        count = connection.scalar(text("SELECT count(*) FROM trials"))
    engine.dispose()
    assert not columns & set(PHASES) and count == len(make_fixtures.rows_at("0008_trial_phases")["trials"])
    upgrade(db_url)
    with Store.open(db_url, readonly=True) as store:
        trials = [t.measurement for s in (1, 2) for t in store.trials(s)]
    assert {m.start_s for m in trials} == {None} and {m.compile_cached for m in trials} == {None}


@pytest.mark.parametrize("revision", make_fixtures.REVISIONS)
def test_every_released_schema_upgrades_and_downgrades_back_with_its_rows(revision: str, db_url: str,
                                                                          tmp_path: Path) -> None:
    """Each fixture, upgraded to the head and downgraded to its own revision again, has that
    revision's tables and columns and every row it had."""
    fixture_db(db_url, revision, tmp_path)

    def shape() -> dict[str, tuple[set[str], int]]:
        engine = make_engine(db_url)
        with engine.connect() as connection:
            found = inspect(connection)
            tables = set(found.get_table_names()) - {VERSION_TABLE}
            got = {t: ({c["name"] for c in found.get_columns(t)},
                       connection.scalar(text(f'SELECT count(*) FROM "{t}"'))) for t in tables}
        engine.dispose()
        return got

    before = shape()
    assert {t: n for t, (_, n) in before.items() if n} == {
        t: len(r) for t, r in make_fixtures.rows_at(revision).items() if r}
    upgrade(db_url)
    downgrade(db_url, revision)
    assert current_revision(db_url) == revision
    assert shape() == before


def test_0009_downgrade_drops_runtime_and_stability_and_keeps_the_rows(db_url: str, tmp_path: Path) -> None:
    from dataclasses import replace

    fixture_db(db_url, "0009_runtime_and_stability", tmp_path)
    upgrade(db_url)
    with Store.open(db_url, readonly=True) as store:
        before = store.snapshot().bests
    assert {b.stability for b in before} == {None, 0.875, 0.96875}
    downgrade(db_url, "0008_trial_phases")
    engine = make_engine(db_url)
    with engine.connect() as connection:
        columns = {t: {c["name"] for c in inspect(connection).get_columns(t)} for t in ("best_configs", "best_history")}
    engine.dispose()
    assert not (columns["best_configs"] | columns["best_history"]) & set(NO_RUNTIME)
    upgrade(db_url)
    with Store.open(db_url, readonly=True) as store:
        after = store.snapshot().bests
    assert after == tuple(replace(b, **NO_RUNTIME) for b in before)       # {} and None again
