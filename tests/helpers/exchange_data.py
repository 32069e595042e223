"""What the exchange tests share: two workloads on two platforms, the source and target stores.

Test modules import the fixtures (`source`, `target`, `_closing`) by name, so pytest finds them.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fixtures.sharing_data import best, platform, seed, workload
from tuner.storage import Store, export_file, upgrade
from tuner.storage.exchange import checksum_of

W1, W2 = workload("mlp", "relu", "sigmoid"), workload("convnet", "conv", "pool", "relu")
P_CPU, P_OTHER = platform("AMD EPYC 9454"), platform("Intel Xeon 8480", threads=4)
BY = dict(user="alice", host="box", tuner_version="0.1.0")



@pytest.fixture
def target(db_url: str):
    upgrade(db_url)
    with Store.open(db_url) as store:
        yield store


@pytest.fixture
def source(tmp_path: Path):
    """A SQLite database with two workloads on two platforms, one default-is-best config."""
    url = f"sqlite:///{tmp_path / 'source.db'}"
    upgrade(url)
    with Store.open(url) as store:
        seed(store, W1, P_CPU, best(W1, P_CPU, graph=0, ci_low=1.10),
             best(W1, P_CPU, graph=1, ci_low=1.12, params={"cpp.simdlen": 256, "max_autotune": True}))
        seed(store, W2, P_OTHER, best(W2, P_OTHER, graph=2, is_default=True, speedup=1.0,
                                      ci_low=1.0, user="bob"))
        seed(store, W2, P_CPU, best(W2, P_CPU, graph=0, ci_low=1.3, speedup=1.4, rounds=8))
        yield store


@pytest.fixture
def _closing():
    opened: list[Store] = []
    yield lambda store: opened.append(store) or store
    for store in opened:
        store.close()


def exported(source: Store, path: Path, **selection: Any) -> Path:
    export_file(source, path, **selection, **BY)
    return path


def comparable(store: Store) -> list[tuple]:
    return sorted((b.graph_key, b.platform_key, json.dumps(b.params, sort_keys=True),
                   b.is_default, b.speedup, b.ci_low, b.ci_high, b.rounds, b.latency_ms,
                   b.baseline_ms, b.workload_key, b.user, b.host, b.tuner_version,
                   b.torch_version, b.triton_version, b.created_at, b.eager,
                   json.dumps(b.unfrozen_params, sort_keys=True), b.unfrozen_speedup,
                   b.search_speedup, b.unsafe, json.dumps(b.runtime, sort_keys=True), b.stability)
                  for b in store.snapshot().bests)


def resign(document: dict[str, Any]) -> dict[str, Any]:
    document["checksum"] = checksum_of(document)
    return document


def as_version_1(document: dict[str, Any]) -> dict[str, Any]:
    """The document as the tuner before 0004 wrote it: version 1, records without the verdict keys."""
    v1 = {**{k: v for k, v in document.items() if k not in ("failure_rules", "kernel_configs")}, "version": 1, "records": [
        {k: v for k, v in r.items() if k not in ("eager", "unfrozen_params", "unfrozen_speedup",
                                                  "unfrozen_eager", "search_speedup", "unsafe",
                                                  "runtime", "stability")}
        for r in document["records"]]}
    return resign(v1)
