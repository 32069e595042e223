"""The kernel_configs table (tuner.storage.kernel_table), against real databases.

Tests taking `db_url` (tests/conftest.py) run once per backend: a SQLite file and a real
PostgreSQL server.
"""
from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from pathlib import Path

import pytest

from helpers.kernel_rows import PLATFORM, record
from fixtures import make_fixtures          # tests/fixtures: the committed databases' rows
from tuner.errors import StorageError
from tuner.storage import Store, find_kernel_config, kernel_configs, save_kernel_config, upgrade


@pytest.fixture
def store(db_url: str):
    upgrade(db_url)
    with Store.open(db_url) as opened:
        opened.ensure_platform(PLATFORM)
        yield opened


def test_saved_configs_read_back_exactly(store: Store) -> None:
    assert find_kernel_config(store, "k" * 32, PLATFORM.key) is None
    assert save_kernel_config(store, record())
    assert find_kernel_config(store, "k" * 32, PLATFORM.key) == record()
    assert find_kernel_config(store, "k" * 32, "other-platform") is None
    assert find_kernel_config(store, "x" * 32, PLATFORM.key) is None


def test_keep_the_better(store: Store) -> None:
    assert save_kernel_config(store, record(1.25))
    slower = record(1.5, config=(("BLOCK_M", 64),), created_at=datetime.now(timezone.utc))
    assert not save_kernel_config(store, slower)
    assert find_kernel_config(store, "k" * 32, PLATFORM.key) == record(1.25)
    faster = record(1.0, config=(("BLOCK_M", 64),), configs_tried=12)
    assert save_kernel_config(store, faster)
    assert find_kernel_config(store, "k" * 32, PLATFORM.key) == faster
    newer_triton = record(2.0, triton_version="3.7.0")     # other versions: the new one replaces
    assert save_kernel_config(store, newer_triton)
    assert find_kernel_config(store, "k" * 32, PLATFORM.key) == newer_triton
    assert len(kernel_configs(store)) == 1


def test_refuses_what_is_not_a_json_scalar_or_not_finite(store: Store) -> None:
    with pytest.raises(ValueError, match="not a JSON scalar"):
        save_kernel_config(store, record(config=(("BLOCK_M", [128]),)))
    with pytest.raises(ValueError, match="not a JSON scalar"):
        save_kernel_config(store, record(key_args=(("M", None),)))
    with pytest.raises(ValueError, match="finite"):
        save_kernel_config(store, record(float("inf")))
    with pytest.raises(StorageError, match="ensure_platform"):
        save_kernel_config(store, record(platform_key="never-stored"))
    assert kernel_configs(store) == []


def test_listing_filters_by_platform_and_name(store: Store) -> None:
    other = dataclasses.replace(PLATFORM, key="plat-2")
    store.ensure_platform(other)
    save_kernel_config(store, record())
    save_kernel_config(store, record(kernel_key="a" * 32, kernel_name="add_kernel"))
    save_kernel_config(store, record(platform_key="plat-2"))
    assert [r.kernel_name for r in kernel_configs(store)] == ["add_kernel", "matmul_kernel",
                                                              "matmul_kernel"]
    assert [r.platform_key for r in kernel_configs(store, kernel_name="matmul_kernel")] == [
        PLATFORM.key, "plat-2"]
    assert [r.kernel_name for r in kernel_configs(store, platform_key="plat-2")] == ["matmul_kernel"]


def load_fixture(db_url: str, revision: str) -> None:
    if db_url.startswith("sqlite"):
        target = Path(db_url.removeprefix("sqlite:///"))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(make_fixtures.fixture_path(revision).read_bytes())
    else:
        make_fixtures.populate(db_url, revision)


@pytest.mark.parametrize("revision", make_fixtures.REVISIONS)
def test_fixtures_upgrade_with_their_kernel_configs(revision: str, db_url: str) -> None:
    load_fixture(db_url, revision)
    upgrade(db_url)
    rows = make_fixtures.rows_at(revision)
    platforms = {row["id"]: row["key"] for row in rows["platforms"]}
    with Store.open(db_url) as store:
        stored = kernel_configs(store)
        assert len(stored) == len(rows.get("kernel_configs", []))
        for row in rows.get("kernel_configs", []):
            got = find_kernel_config(store, row["kernel_key"], platforms[row["platform_id"]])
            for name, value in row.items():
                if name in ("config", "key_args"):
                    assert dict(getattr(got, name)) == value, name
                elif name not in ("id", "platform_id"):
                    assert getattr(got, name) == value, name
        assert save_kernel_config(store, record(platform_key=platforms[2]))   # writable at head
