"""A stored verdict's runtime knobs and stability (schema 0009, exchange format 6), against real databases.

`BestConfig.runtime` (settings of the process the model runs in, `tuner.runtime`) stands beside any
verdict, a config, Inductor's defaults or eager, and `stability` is a share in [0, 1] or None. Tests
taking `db_url` run on a SQLite file and on the real PostgreSQL server (tests/conftest.py): the
round trip through save_best, the keep-the-better upsert and history; export, import and merge;
older files; and the trust check of both fields at import (the whole file refused, the record
named) and at lookup (the row skipped with one warning).
"""
from __future__ import annotations

import json
import math
import sqlite3
import warnings
from dataclasses import replace
from pathlib import Path

import pytest

from fixtures.sharing_data import best, digest, seed
from helpers import cli_env, run_main
from helpers.exchange_data import BY, P_CPU, W1, W2, comparable, exported, resign
from tuner.errors import ExchangeError
from tuner.platform import platform_from_parts
from tuner.storage import Store, merge, upgrade
from tuner.storage.exchange import import_file, validate
from tuner.storage.provenance import measurement_key

pytest_plugins = ("helpers.exchange_data",)    # the target fixture

JEMALLOC = {"runtime.allocator": "jemalloc", "runtime.omp_wait_policy": "passive"}
RETAIN = {"runtime.allocator": "glibc-retain"}
EXPANDABLE = {"runtime.cuda_alloc_conf": "expandable-segments"}
CUDA = platform_from_parts("cuda", {"gpu_name": "NVIDIA H200", "capability": "9.0", "memory_gb": "141"},
                           {"python": "3.11.9", "torch": "2.13.0", "triton": "3.9.0", "cuda": "12.8", "tuner": "0.1.0"})


def verdicts(p=P_CPU) -> list:
    """A config, a defaults-won and an eager verdict with runtime knobs, and one without any."""
    return [best(W1, p, graph=0, params={"max_autotune": True}, runtime=JEMALLOC, stability=0.9375),
            best(W1, p, graph=1, is_default=True, speedup=1.0, ci_low=1.0, runtime=RETAIN, stability=0.5),
            best(W2, p, graph=0, params={}, eager=True, ci_low=1.2, speedup=1.3, runtime={"runtime.allocator":
                                                                                       "jemalloc"}, stability=1.0),
            best(W2, p, graph=1, params={"max_autotune": True})]


@pytest.fixture
def store(db_url: str):
    upgrade(db_url)
    with Store.open(db_url) as opened:
        yield opened


def _seed_all(store: Store, rows: list) -> None:
    seed(store, W1, P_CPU, *(b for b in rows if b.workload_key == W1.key))
    seed(store, W2, P_CPU, *(b for b in rows if b.workload_key == W2.key))


# -- the store ------------------------------------------------------------------------------------

def test_runtime_and_stability_round_trip(store: Store) -> None:
    rows = verdicts()
    _seed_all(store, rows)
    for b in rows:
        got = store.best_config(b.graph_key, P_CPU.key)
        assert got == b
        [entry] = store.best_history(b.graph_key, P_CPU.key)
        assert entry.best == got and entry.measurement_key == measurement_key(b)
    assert [(b.runtime, b.stability) for b in store.workload_best(W1.key, P_CPU.key)] == [
        (JEMALLOC, 0.9375), (RETAIN, 0.5)]
    eager, plain = store.workload_best(W2.key, P_CPU.key)
    assert (eager.eager, eager.params, eager.runtime, plain.runtime, plain.stability) == (
        True, {}, {"runtime.allocator": "jemalloc"}, {}, None)
    assert sorted(json.dumps(b.runtime, sort_keys=True) for b in store.snapshot().bests) == sorted(
        json.dumps(b.runtime, sort_keys=True) for b in rows)
    with store.session_scope() as session:      # {} is stored as an empty JSON object, never NULL
        stored = session.connection().exec_driver_sql(
            "SELECT graph_key FROM best_configs WHERE runtime IS NULL OR stability IS NULL").scalars().all()
    assert stored == [W2.graphs[1].key]


def test_keep_the_better_writes_the_winners_runtime_and_stability(store: Store) -> None:
    plain = best(W1, P_CPU, ci_low=1.10)
    tuned = best(W1, P_CPU, ci_low=1.20, speedup=1.3, runtime=JEMALLOC, stability=0.75, minutes=1)
    weaker = best(W1, P_CPU, ci_low=1.15, runtime=RETAIN, stability=1.0, minutes=2)
    stronger = best(W1, P_CPU, ci_low=1.30, speedup=1.4, minutes=3)
    seed(store, W1, P_CPU)
    assert store.save_best(plain) and store.save_best(tuned)
    assert not store.save_best(weaker)                              # lower ci_low: the stored row stays
    kept = store.best_config(W1.graphs[0].key, P_CPU.key)
    assert (kept.runtime, kept.stability) == (JEMALLOC, 0.75)
    assert store.save_best(stronger)                                # a winner without runtime knobs
    kept = store.best_config(W1.graphs[0].key, P_CPU.key)
    assert (kept.runtime, kept.stability, kept.ci_low) == ({}, None, 1.30)
    history = store.best_history(W1.graphs[0].key, P_CPU.key)
    assert [(h.best.runtime, h.best.stability, h.kept) for h in history] == [
        ({}, None, True), (JEMALLOC, 0.75, True), (RETAIN, 1.0, False), ({}, None, True)]
    assert not store.save_best(tuned)                               # the same measurement again: nothing


def test_runtime_and_stability_enter_the_measurement_key_only_when_set() -> None:
    plain = best(W1, P_CPU)
    assert measurement_key(plain) == measurement_key(replace(plain, runtime={}, stability=None))
    keys = {measurement_key(v) for v in (replace(plain, runtime=RETAIN), replace(plain, runtime=JEMALLOC),
                                         replace(plain, stability=0.5), replace(plain, stability=1.0))}
    assert len(keys) == 4 and measurement_key(plain) not in keys


# -- exchange files ---------------------------------------------------------------------------------

@pytest.fixture
def source(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'source.db'}"
    upgrade(url)
    with Store.open(url) as opened:
        _seed_all(opened, verdicts())
        yield opened


def test_export_import_and_merge_carry_runtime_and_stability(source: Store, target: Store, tmp_path: Path) -> None:
    path = exported(source, tmp_path / "configs.json")
    document = json.loads(path.read_text())
    assert document["version"] == 6
    records = {r["graph_key"]: r for r in document["records"]}
    assert (records[W1.graphs[0].key]["runtime"], records[W1.graphs[0].key]["stability"]) == (JEMALLOC, 0.9375)
    assert (records[W2.graphs[1].key]["runtime"], records[W2.graphs[1].key]["stability"]) == ({}, None)
    assert import_file(target, path).stored == 4
    assert comparable(target) == comparable(source)
    [entry] = target.best_history(W1.graphs[1].key, P_CPU.key)
    assert (entry.best.is_default, entry.best.runtime, entry.best.stability) == (True, RETAIN, 0.5)
    assert import_file(target, path).already_present == 4
    assert merge(target, source.safe_url, **BY).already_present == 4


def test_a_format_5_file_imports_with_no_runtime_knobs_and_no_stability(source: Store, target: Store,
                                                                        tmp_path: Path) -> None:
    document = json.loads(exported(source, tmp_path / "configs.json").read_text())
    v5 = {**document, "version": 5, "records": [{k: v for k, v in r.items() if k not in ("runtime", "stability")}
                                                for r in document["records"]]}
    path = tmp_path / "v5.json"
    path.write_text(json.dumps(resign(v5)))
    assert import_file(target, path).stored == 4
    assert {(json.dumps(b.runtime), b.stability) for b in target.snapshot().bests} == {("{}", None)}
    # the row without runtime knobs is the same measurement in both formats
    assert import_file(target, tmp_path / "configs.json").already_present == 1
    carrying = tmp_path / "v5-runtime.json"
    carrying.write_text(json.dumps(resign({**v5, "records": [{**v5["records"][0], "runtime": JEMALLOC}]})))
    with pytest.raises(ExchangeError, match="record 0 has unknown key.s. 'runtime'"):
        import_file(target, carrying)


REFUSED = {
    "allocator as a path": (dict(runtime={"runtime.allocator": "/tmp/evil.so"}),
                            "runtime: runtime.allocator: value '/tmp/evil.so' is not one of"),
    "unknown runtime knob": (dict(runtime={"runtime.nope": "x"}), "runtime: unknown runtime knob 'runtime.nope'"),
    "CUDA knob on a CPU": (dict(runtime=EXPANDABLE), "runtime.cuda_alloc_conf applies to cuda platforms, not cpu"),
    "runtime knob as a number": (dict(runtime={"runtime.allocator": 3}), "runtime.allocator must be a string"),
    "runtime as a list": (dict(runtime=["runtime.allocator"]), "runtime must be dict, got"),
    "stability 1.5": (dict(stability=1.5), "stability 1.5 is outside [0, 1]"),
    "stability below 0": (dict(stability=-0.25), "stability -0.25 is outside [0, 1]"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_an_import_refuses_a_file_with_a_bad_runtime_or_stability(case: str, source: Store, target: Store,
                                                                 db_url: str, tmp_path: Path) -> None:
    fields, cause = REFUSED[case]
    document = json.loads(exported(source, tmp_path / "configs.json").read_text())
    index = next(i for i, r in enumerate(document["records"]) if r["graph_key"] == W2.graphs[1].key)
    document["records"][index].update(fields)
    path = tmp_path / "crafted.json"
    path.write_text(json.dumps(resign(document)))
    before = digest(db_url)
    with pytest.raises(ExchangeError) as refused:
        import_file(target, path)
    message = str(refused.value)
    assert f"record {index}" in message and cause in message, message
    assert "nothing was imported" in message and "\n" not in message
    assert digest(db_url) == before


def test_an_import_refuses_a_nan_stability(source: Store, target: Store, db_url: str, tmp_path: Path) -> None:
    document = json.loads(exported(source, tmp_path / "configs.json").read_text())
    document["records"][0]["stability"] = math.nan
    with pytest.raises(ExchangeError, match="record 0: stability must be float or null, got nan"):
        validate(resign(document), name="crafted.json")
    path = tmp_path / "crafted.json"
    path.write_text(json.dumps(resign(document)))          # json writes NaN, which is not JSON
    before = digest(db_url)
    with pytest.raises(ExchangeError, match="contains NaN, which is not a finite number; nothing was imported"):
        import_file(target, path)
    assert digest(db_url) == before


def test_a_cuda_platform_takes_cuda_runtime_knobs_and_refuses_cpu_ones() -> None:
    from tuner.storage.trust import best_problem

    w = W1
    assert best_problem(best(w, CUDA, params={}, eager=True, runtime=EXPANDABLE, stability=0.0), CUDA) is None
    assert best_problem(best(w, P_CPU, is_default=True, speedup=1.0, ci_low=1.0, runtime=RETAIN), P_CPU) is None
    assert best_problem(best(w, P_CPU, runtime={"runtime.allocator": "default"}), P_CPU) is None
    problem = best_problem(best(w, CUDA, params={}, eager=True, runtime={"runtime.allocator": "jemalloc"}), CUDA)
    assert problem == "runtime: runtime.allocator applies to cpu platforms, not cuda"
    problem = best_problem(best(w, P_CPU, runtime={"runtime.allocator": "x" * 10_000}), P_CPU)
    assert "over 64 characters" in problem and len(problem) < 200


# -- at lookup: the same rows, stored as any teammate could, are skipped with one warning ------------

AT_LOOKUP = {
    "allocator as a path": (dict(runtime={"runtime.allocator": "/tmp/evil.so"}),
                            "runtime.allocator: value '/tmp/evil.so' is not one of"),
    "unknown runtime knob": (dict(runtime={"runtime.nope": "x"}), "unknown runtime knob 'runtime.nope'"),
    "CUDA knob on a CPU": (dict(runtime=EXPANDABLE), "runtime.cuda_alloc_conf applies to cuda platforms, not cpu"),
    "stability 1.5": (dict(stability=1.5), "stability 1.5 is outside [0, 1]"),
    "stability NaN": (dict(stability=math.nan), ("stability is ", ", not a finite number")),   # nan; SQLite: 'NaN'
}


def _stored(url: str, here, row) -> None:
    """`row` saved on platform `here` through the real Store, which writes what it is given. SQLite
    turns a NaN into NULL, so there a NaN arrives as a teammate's SQL leaves it: the text 'NaN' in
    the REAL column."""
    upgrade(url)
    with Store.open(url) as opened:
        seed(opened, W1, here, row)
    if url.startswith("sqlite") and row.stability is not None and math.isnan(row.stability):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as connection:
            assert connection.execute("UPDATE best_configs SET stability = 'NaN'").rowcount == 1


@pytest.mark.parametrize("case", AT_LOOKUP)
def test_a_row_with_a_bad_runtime_or_stability_is_skipped_at_lookup(case: str, db_url: str) -> None:
    from tuner.inductor import CompileConfig
    from tuner.lookup import Lookup, LookupWarning
    from tuner.lookup.decision import Tier
    from tuner.platform import current_platform
    from tuner.settings import Settings

    fields, cause = AT_LOOKUP[case]
    here = current_platform("cpu")
    _stored(db_url, here, replace(best(W1, here, params={"max_fusion_size": 8}), **fields))
    lookup = Lookup(Settings(db_url=db_url))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        decisions = [lookup.decide(W1.graphs[0].key, here) for _ in range(2)]
    said = [str(w.message) for w in caught if issubclass(w.category, LookupWarning)]
    assert decisions[0].tier is Tier.UNAVAILABLE and decisions[0].config == CompileConfig()
    causes = cause if isinstance(cause, tuple) else (cause,)
    assert len(said) == 1 and all(c in said[0] for c in causes), said
    assert "not one this cpu platform can apply" in said[0], said


def test_an_eager_row_with_runtime_knobs_is_used_at_lookup(db_url: str) -> None:
    from tuner.lookup import Lookup
    from tuner.lookup.decision import Tier
    from tuner.platform import current_platform
    from tuner.settings import Settings

    here = current_platform("cpu")
    _stored(db_url, here, best(W1, here, params={}, eager=True, runtime={"runtime.allocator": "jemalloc"}, stability=0.8))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        decision = Lookup(Settings(db_url=db_url)).decide(W1.graphs[0].key, here)
    assert decision.tier is Tier.EXACT and decision.best.eager
    assert (decision.best.runtime, decision.best.stability) == ({"runtime.allocator": "jemalloc"}, 0.8)


# -- what the CLI shows -----------------------------------------------------------------------------

def test_db_ls_and_best_show_the_runtime_knobs(store: Store) -> None:
    from tuner.cli.results import best_text

    _seed_all(store, verdicts())
    done = run_main("db", "ls", "--db", store.safe_url, env=cli_env(COLUMNS="250"))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[-2:] == ["RUNTIME", "FLAGS"]
    mlp = next(line for line in lines if line.startswith("mlp "))
    convnet = next(line for line in lines if line.startswith("convnet "))
    assert "allocator=glibc-retain | allocator=jemalloc, omp_wait_policy=passive" in mlp
    assert "allocator=jemalloc" in convnet and "omp_wait_policy" not in convnet
    text = best_text(store.best_config(W1.graphs[0].key, P_CPU.key)).splitlines()
    assert text[:2] == ["config: max_autotune=True", "runtime: allocator=jemalloc, omp_wait_policy=passive"]
    assert "stability: fastest or tied in 94% of resamples of its held-out rounds" in text
    plain = best_text(store.best_config(W2.graphs[1].key, P_CPU.key))
    assert "runtime:" not in plain and "stability:" not in plain
