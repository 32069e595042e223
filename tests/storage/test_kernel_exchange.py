"""Kernel configs travel in exchange files (format version 4) and merges: `tuner.autotune`
winners and Inductor's harvested GEMM choices and Triton kernel configs, so a teammate who
imports a file launches those kernels without benchmarking. Real SQLite and PostgreSQL."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from helpers.exchange_data import BY, P_CPU, P_OTHER, resign
from helpers import run_main
from tuner.errors import ExchangeError
from tuner.storage import (KernelConfig, Store, export_file, find_kernel_config, kernel_configs, merge,
                           save_kernel_config, upgrade)
from tuner.storage.exchange import import_file

pytest_plugins = ("helpers.exchange_data",)    # the target fixture


def kernel(name: str, key: str, platform_key: str, latency: float, **config: object) -> KernelConfig:
    return KernelConfig(kernel_key=key, kernel_name=name, platform_key=platform_key,
                        key_args=(("M", 4096), ("note", "fp16")), dtypes="float16,float16",
                        config=tuple(config.items()) or (("BLOCK_M", 128), ("num_warps", 8)),
                        latency_ms=latency, spread_ms=0.01, configs_tried=18, space_size=18,
                        user="alice", host="h200", tuner_version="0.1.0", torch_version="2.11.0",
                        triton_version="3.6.0")


def kernel_source(path: Path) -> Store:
    """A database holding only kernel configs: two on one GPU platform, one on another."""
    url = f"sqlite:///{path}"
    upgrade(url)
    store = Store.open(url)
    for platform in (P_CPU, P_OTHER):
        store.ensure_platform(platform)
    for record in (kernel("matmul_kernel", "k1", P_CPU.key, 0.5),
                   kernel("inductor-triton:" + "f" * 64, "k2", P_CPU.key, 0.0, XBLOCK=128, num_warps=4, num_stages=1),
                   kernel("matmul_kernel", "k1", P_OTHER.key, 0.7)):
        assert save_kernel_config(store, record)
    return store


def _as_triton(**config: object):
    """A change making the record an Inductor Triton tile config (XBLOCK=128, 4 warps, 1 stage) with `config` over it."""
    def change(k: dict) -> None:
        k.update(kernel_name="inductor-triton:" + "f" * 64, latency_ms=0.0,
                 config={"XBLOCK": 128, "num_warps": 4, "num_stages": 1, **config})
    return change


def rows(store: Store) -> list[tuple]:
    return sorted((k.kernel_key, k.platform_key, k.kernel_name, sorted(k.config), sorted(k.key_args), k.latency_ms, k.user)
                  for k in kernel_configs(store))


def test_kernel_configs_export_import_and_merge_with_every_value(target: Store, tmp_path: Path) -> None:
    source = kernel_source(tmp_path / "source.db")
    try:
        report = export_file(source, tmp_path / "kernels.json", **BY)      # a database of kernels only
        document = json.loads((tmp_path / "kernels.json").read_text())
        assert (report.kernels, report.records, document["version"], len(document["kernel_configs"])) == (3, 0, 6, 3)
        applied = import_file(target, tmp_path / "kernels.json")
        assert (applied.kernels, applied.kernels_stored, applied.platforms_added) == (3, 3, 2)
        assert rows(target) == rows(source)
        assert {k.source for k in kernel_configs(target)} == {"import"}
        assert import_file(target, tmp_path / "kernels.json").kernels_stored == 0     # nothing new or faster
        assert merge(target, source.safe_url, **BY).kernels_stored == 0
        only = export_file(source, tmp_path / "one.json", platform_keys=[P_OTHER.key], **BY)
        assert only.kernels == 1 and only.platforms == 1
    finally:
        source.close()


def test_an_imported_kernel_config_replaces_a_stored_one_only_when_faster(target: Store, tmp_path: Path) -> None:
    source = kernel_source(tmp_path / "source.db")
    try:
        target.ensure_platform(P_CPU)
        # Stored here under other versions and slower: a search would replace it; an import replaces it
        # because it is faster, not because its versions differ.
        save_kernel_config(target, replace(kernel("matmul_kernel", "k1", P_CPU.key, 0.9), tuner_version="0.0.9"))
        export_file(source, tmp_path / "kernels.json", **BY)
        assert import_file(target, tmp_path / "kernels.json").kernels_stored == 3
        assert find_kernel_config(target, "k1", P_CPU.key).latency_ms == 0.5
        slower = replace(kernel("matmul_kernel", "k1", P_CPU.key, 0.6), tuner_version="0.2.0", source="import")
        assert not save_kernel_config(target, slower)          # other versions, but slower: kept
        assert find_kernel_config(target, "k1", P_CPU.key).latency_ms == 0.5
    finally:
        source.close()


@pytest.mark.parametrize("change, message", [
    (lambda k: k["config"].update(BLOCK_M=[128]), "config 'BLOCK_M' is [128], not a JSON scalar"),
    (lambda k: k["key_args"].update(blob={"__reduce__": "os.system"}), "key_args 'blob'"),
    (lambda k: k.update(platform_key="0" * 24), "is not in the file's platforms"),
    (lambda k: k.update(latency_ms=-1.0), "must not be negative"),
    (lambda k: k.update(kernel_name="x" * 300), "over the 255-byte limit"),
    (lambda k: k.update(extra=1), "unknown key(s) 'extra'"),
    # Inductor's Triton tile configs within Inductor's limits; latencies above zero (tuner.storage.trust)
    (_as_triton(XBLOCK=3, num_warps=0, num_stages=-5), "XBLOCK 3 is not a power of two"),
    (_as_triton(XBLOCK=1 << 20), "is not a power of two up to 8192"),
    (_as_triton(num_warps=64), "num_warps 64 is not a power of two up to 32"),
    (_as_triton(num_stages=-5), "num_stages -5 is outside [1, 8]"),
    (_as_triton(XBLOCK=128.0), "XBLOCK is 128.0, not a plain int"),
    (lambda k: k.update(kernel_name="matmul_kernel", latency_ms=0.0), "latency_ms 0.0 is outside"),
    (lambda k: k.update(user="eve\x1b[2K"), "control character"),
])
def test_a_bad_kernel_config_refuses_the_whole_file(target: Store, tmp_path: Path, change, message: str) -> None:
    source = kernel_source(tmp_path / "source.db")
    try:
        export_file(source, tmp_path / "kernels.json", **BY)
    finally:
        source.close()
    document = json.loads((tmp_path / "kernels.json").read_text())
    change(document["kernel_configs"][1])
    (tmp_path / "bad.json").write_text(json.dumps(resign(document)))
    with pytest.raises(ExchangeError, match="nothing was imported") as refused:
        import_file(target, tmp_path / "bad.json")
    assert message in str(refused.value)
    assert kernel_configs(target) == [] and target.platforms() == []


def test_cli_says_what_the_kernel_configs_did(tmp_path: Path) -> None:
    source = kernel_source(tmp_path / "source.db")
    source.close()
    out = tmp_path / "kernels.json"
    exported = run_main("db", "export", "--db", f"sqlite:///{tmp_path / 'source.db'}", "--out", str(out))
    assert exported.returncode == 0 and "with 3 kernel configs" in exported.stdout, exported.stdout + exported.stderr
    target = f"sqlite:///{tmp_path / 'target.db'}"
    upgrade(target)
    imported = run_main("db", "import", str(out), "--db", target)
    assert imported.returncode == 0 and "3 kernel configs, 3 new or faster here" in imported.stdout, imported.stdout
