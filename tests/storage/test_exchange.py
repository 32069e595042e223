"""Exchange files and merges: export, import, idempotence, provenance, `tuner db`.
The refusals of bad files are in `test_exchange_refusals.py`.

Tests taking `db_url` run on a SQLite file and on PostgreSQL (the target database); sources
of merges are SQLite files, so merges also cross backends.
"""
from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from helpers.exchange_data import BY, P_CPU, P_OTHER, W1, W2, as_version_1, comparable, exported
from fixtures.sharing_data import best, digest, platform, seed
from helpers import FIXTURES, REPO, cli_env, run_cli, run_main
from tuner.errors import ExchangeError, StorageError
from tuner.storage import Store, merge, read_file, upgrade
from tuner.storage.exchange import checksum_of, import_file, to_document
from tuner.storage.records import Snapshot

pytest_plugins = ("helpers.exchange_data",)    # the source, target and _closing fixtures
V1_FILE = FIXTURES / "exchange-v1.json"   # written by the tuner before 0004


def test_export_then_import_copies_every_value(source: Store, target: Store, tmp_path: Path) -> None:
    path = exported(source, tmp_path / "configs.json")
    document = json.loads(path.read_text())
    assert (document["format"], document["version"]) == ("tuner-exchange", 6)
    assert document["checksum"] == checksum_of(document) and len(document["records"]) == 4
    report = import_file(target, path)
    assert (report.records, report.stored, report.not_better, report.already_present) == (4, 4, 0, 0)
    assert (report.platforms_added, report.workloads_added) == (2, 2)
    assert comparable(target) == comparable(source)
    kept = target.best_config(W1.graphs[1].key, P_CPU.key)
    assert (kept.source, kept.origin, kept.study_id) == ("import", "configs.json", None)
    assert target.workload(W2.key) == tuple(g.key for g in W2.graphs)
    assert target.platform_row(P_OTHER.key) == P_OTHER
    assert [h.kept for h in target.best_history(W1.graphs[0].key, P_CPU.key)] == [True]
    assert target.snapshot().workloads == source.snapshot().workloads    # graphs, code and all


def test_reimport_and_remerge_change_nothing(source: Store, target: Store, db_url: str,
                                             tmp_path: Path) -> None:
    path = exported(source, tmp_path / "configs.json")
    import_file(target, path)
    before = digest(db_url)
    again = import_file(target, path)
    assert (again.stored, again.not_better, again.already_present) == (0, 0, 4)
    merged = merge(target, source.safe_url, **BY)
    assert (merged.stored, merged.already_present, merged.platforms_added) == (0, 4, 0)
    assert digest(db_url) == before
    # and back: exporting the copy and importing it into the source changes nothing there
    copy = exported(target, tmp_path / "copy.json")
    source_before = digest(source.safe_url)
    assert import_file(source, copy).already_present == 4
    assert digest(source.safe_url) == source_before


def test_export_selection(source: Store, tmp_path: Path) -> None:
    only_w2 = read_file(exported(source, tmp_path / "w2.json", workload_keys=[W2.key]))
    assert {b.graph_key for b in only_w2.bests} == {W2.graphs[0].key, W2.graphs[2].key}
    assert [w.key for w in only_w2.workloads] == [W2.key]
    only_other = read_file(exported(source, tmp_path / "p.json", platform_keys=[P_OTHER.key]))
    assert [(b.graph_key, b.is_default) for b in only_other.bests] == [(W2.graphs[2].key, True)]
    assert [p.key for p in only_other.platforms] == [P_OTHER.key]
    with pytest.raises(ExchangeError, match="no best configs to export"):
        exported(source, tmp_path / "none.json", platform_keys=["nope"])
    assert not (tmp_path / "none.json").exists()


def test_merge_reads_the_source_only(source: Store, target: Store, db_url: str) -> None:
    source_before = digest(source.safe_url)
    report = merge(target, source.safe_url, **BY)
    assert (report.records, report.stored) == (4, 4)
    assert comparable(target) == comparable(source)
    assert target.best_config(W2.graphs[0].key, P_CPU.key).origin == source.safe_url
    assert digest(source.safe_url) == source_before


def test_conflicts_are_settled_by_evidence_not_arrival(source: Store, target: Store,
                                                       tmp_path: Path) -> None:
    strong = best(W1, P_CPU, ci_low=1.25, speedup=1.3, user="carol", minutes=-60)   # older
    weak = best(W1, P_CPU, ci_low=1.05, speedup=1.6, user="dave", minutes=60)       # newer
    for first, second in ((strong, weak), (weak, strong)):
        files = []
        for b in (first, second):
            path = tmp_path / f"{b.user}.json"
            path.write_text(json.dumps(to_document(Snapshot((P_CPU,), (W1,), (b,)), **BY)))
            files.append(path)
        upgrade_and_clear(target)
        for path in files:
            import_file(target, path)
        assert target.best_config(W1.graphs[0].key, P_CPU.key).user == "carol"
        assert len(target.best_history(W1.graphs[0].key, P_CPU.key)) == 2


def upgrade_and_clear(store: Store) -> None:
    from sqlalchemy import text

    with store.session_scope(write=True) as session:
        for table in ("best_history", "best_configs", "graphs", "workloads", "platforms"):
            session.execute(text(f"DELETE FROM {table}"))


def test_a_failed_write_leaves_nothing(source: Store, target: Store, db_url: str) -> None:
    snapshot = source.snapshot()
    ghost = replace(snapshot.bests[-1], platform_key="not-in-the-snapshot")
    before = digest(db_url)
    with pytest.raises(StorageError, match="not-in-the-snapshot"):
        target.apply_snapshot(replace(snapshot, bests=snapshot.bests + (ghost,)),
                              source="import", origin="x")
    assert digest(db_url) == before


# ---------------------------------------------------------------- verdicts and version 1

@pytest.fixture
def verdicts(tmp_path: Path):
    """A SQLite database holding an eager verdict and two freezing winners (one whose config
    without freezing is a knob, one whose is Inductor's defaults)."""
    url = f"sqlite:///{tmp_path / 'verdicts.db'}"
    upgrade(url)
    with Store.open(url) as store:
        seed(store, W1, P_CPU,
             best(W1, P_CPU, graph=0, ci_low=1.2, speedup=1.3, params={}, eager=True,
                  search_speedup=1.375),
             best(W1, P_CPU, graph=1, params={"freezing": True, "max_autotune": True},
                  unfrozen_params={"max_autotune": True}, unfrozen_speedup=1.0625,
                  search_speedup=1.25))
        seed(store, W2, P_CPU, best(W2, P_CPU, params={"freezing": True}, unfrozen_params={}))
        yield store


def test_verdicts_travel_through_export_import_and_merge(verdicts: Store, target: Store,
                                                         tmp_path: Path) -> None:
    path = exported(verdicts, tmp_path / "verdicts.json")
    document = json.loads(path.read_text())
    assert document["version"] == 6
    by_graph = {r["graph_key"]: r for r in document["records"]}
    eager = by_graph[W1.graphs[0].key]
    assert (eager["eager"], eager["params"], eager["is_default"], eager["unfrozen_params"],
            eager["search_speedup"]) == (True, {}, False, None, 1.375)
    assert by_graph[W1.graphs[1].key]["unfrozen_params"] == {"max_autotune": True}
    assert (by_graph[W2.graphs[0].key]["unfrozen_params"],
            by_graph[W2.graphs[0].key]["unfrozen_speedup"]) == ({}, None)
    assert import_file(target, path).stored == 3
    assert comparable(target) == comparable(verdicts)
    history = target.best_history(W1.graphs[0].key, P_CPU.key)
    assert [(h.best.eager, h.best.search_speedup) for h in history] == [(True, 1.375)]
    assert import_file(target, path).already_present == 3
    assert merge(target, verdicts.safe_url, **BY).already_present == 3


def test_a_version_1_file_still_imports(target: Store, tmp_path: Path) -> None:
    report = import_file(target, V1_FILE)
    assert (report.records, report.stored, report.platforms_added) == (2, 2, 1)
    stored = target.snapshot().bests
    assert [(b.eager, b.unfrozen_params, b.unfrozen_speedup, b.search_speedup)
            for b in stored] == [(False, None, None, None)] * 2
    assert sorted(b.params.get("cpp.simdlen", 0) for b in stored) == [0, 256]
    keys = {h.measurement_key for b in stored for h in target.best_history(b.graph_key, b.platform_key)}
    assert keys == {"06cf0644f3549d1a302625fffabee1af906bff614dae01596bfdd21475aa884f",   # as the
                    "a65dd26c55f3f01add9bc740e07bcc32285646e7cbf746e84082d1223b2008df"}   # old tuner
    again = exported(target, tmp_path / "again.json")                   # now version 6 ...
    assert json.loads(again.read_text())["version"] == 6
    assert import_file(target, again).already_present == 2              # ... the same measurements
    rewritten = tmp_path / "v1.json"
    rewritten.write_text(json.dumps(as_version_1(json.loads(again.read_text()))))
    assert import_file(target, rewritten).already_present == 2


def test_new_fields_enter_the_measurement_key_only_when_set() -> None:
    from tuner.storage.provenance import measurement_key

    path = REPO / "alembic" / "versions" / "0002_sharing.py"
    spec = importlib.util.spec_from_file_location("sharing_0002", path)
    sharing = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = sharing
    spec.loader.exec_module(sharing)
    plain = read_file(V1_FILE).bests[0]
    assert measurement_key(plain) == sharing._measurement_key(asdict(plain))   # 0002's restatement
    variants = [replace(plain, eager=True), replace(plain, unfrozen_params={}),
                replace(plain, unfrozen_params={"max_autotune": True}),
                replace(plain, unfrozen_speedup=1.0), replace(plain, search_speedup=1.0),
                replace(plain, unfrozen_params={}, unfrozen_eager=True)]
    keys = {measurement_key(v) for v in variants}
    assert len(keys) == len(variants) and measurement_key(plain) not in keys


# ---------------------------------------------------------------- refused imports


# ---------------------------------------------------------------- the CLI

def test_cli_export_import_merge_ls(source: Store, db_url: str, tmp_path: Path) -> None:
    out = tmp_path / "configs.json"
    done = run_cli("db", "export", "--out", str(out), "--db", source.safe_url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "exported 4 best configs (2 workloads, 2 platforms)" in done.stdout
    done = run_cli("db", "import", str(out), "--db", db_url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "4 records: 4 stored as best, 0 kept the stored config" in done.stdout
    done = run_cli("db", "merge", source.safe_url, "--db", db_url, cwd=tmp_path)
    assert done.returncode == 0 and "4 already present" in done.stdout, done.stderr
    done = run_cli("db", "ls", "--db", db_url, cwd=tmp_path, env=cli_env(COLUMNS="200"))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:4] == ["WORKLOAD", "PLATFORM", "GRAPHS", "SPEEDUP"]
    mlp = next(line for line in lines if line.startswith("mlp "))
    assert "1.200x" in mlp and "[1.100, 1.250]" in mlp and "15" in mlp and "alice@alice-box" in mlp
    convnet_cpu = next(line for line in lines if line.startswith("convnet ") and "AMD" in line)
    assert convnet_cpu.rstrip().endswith("thin")                       # 8 rounds
    convnet_other = next(line for line in lines if "Intel" in line)
    assert "defaults" in convnet_other and convnet_other.rstrip().endswith("-")
    done = run_cli("db", "ls", "--workload", "convnet", "--platform", P_OTHER.key[:6],
                   "--db", db_url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines()[1:] if line.startswith("convnet ")]
    assert len(rows) == 1 and "Intel" in rows[0]


def test_ls_flags_stale_and_thin(tmp_path: Path) -> None:
    from tuner.cli.db import older, overview

    old = platform("AMD EPYC 9454", torch="2.12.1+cpu")
    rows = overview([best(W1, old, ci_low=1.1), best(W1, P_CPU, ci_low=0.99, speedup=1.02),
                     best(W2, P_CPU, ci_low=1.2, rounds=9), best(W2, P_OTHER, ci_low=1.2)],
                    installed=("2.13.0+cpu", "none"))
    flags = {(r.workload_key, r.weakest.platform_key): r.flags for r in rows}
    assert flags[(W1.key, old.key)] == ("stale",)
    assert flags[(W1.key, P_CPU.key)] == ("thin",)          # interval includes 1.0
    assert flags[(W2.key, P_CPU.key)] == ("thin",)          # 9 rounds
    assert flags[(W2.key, P_OTHER.key)] == ()
    assert older("2.12.1+cpu", "2.13.0") and not older("2.13.0", "2.13.0+cpu")
    assert not older("none", "3.5.0") and not older("weird", "2.13.0")


def test_ls_says_eager_where_it_says_defaults(target: Store) -> None:
    seed(target, W1, P_CPU, best(W1, P_CPU, params={}, eager=True, ci_low=1.2, speedup=1.3),
         best(W1, P_CPU, graph=1, params={}, eager=True, ci_low=1.25, speedup=1.4))
    seed(target, W2, P_OTHER, *(best(W2, P_OTHER, graph=g, is_default=True, speedup=1.0,
                                     ci_low=0.99) for g in range(3)))
    done = run_main("db", "ls", "--db", target.safe_url, env=cli_env(COLUMNS="200"))
    assert done.returncode == 0, done.stderr
    mlp = next(line for line in done.stdout.splitlines() if line.startswith("mlp "))
    convnet = next(line for line in done.stdout.splitlines() if line.startswith("convnet "))
    assert " eager 1.300x " in mlp and "[1.200, 1.350]" in mlp
    assert " defaults " in convnet and "eager" not in convnet
