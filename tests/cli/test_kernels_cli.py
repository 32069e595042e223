"""`tuner kernels`: the stored kernel tile configs, read-only, through the CLI in-process."""
from __future__ import annotations

from pathlib import Path

from helpers import cli_env, run_main
from helpers.kernel_rows import PLATFORM, record
from tuner.storage import Store, save_kernel_config, upgrade


def _seeded(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'k.db'}"
    upgrade(url)
    with Store.open(url) as store:
        store.ensure_platform(PLATFORM)
        assert save_kernel_config(store, record(1.25))
        assert save_kernel_config(store, record(0.5, kernel_key="a" * 32, kernel_name="add_kernel",
                                               key_args=(("n", 1024),), config=(("BLOCK", 256),)))
    return url


def test_lists_every_stored_config_with_its_timing_and_evidence(tmp_path: Path) -> None:
    url = _seeded(tmp_path)
    ran = run_main("kernels", "--db", url)
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[0].split()[:5] == ["kernel", "key", "dtypes", "platform", "config"]
    add, matmul = lines[2], lines[3]
    assert add.startswith("add_kernel") and "n=1024" in add and "BLOCK=256" in add and "0.5" in add
    assert matmul.startswith("matmul_kernel") and "M=4096, N=4096, K=4096" in matmul
    assert "BLOCK_M=128, BLOCK_N=256, num_warps=8, num_stages=3" in matmul and "64/272" in matmul
    assert "alice@h200-node-7, 2026-05-12 09:00" in matmul and PLATFORM.key in matmul


def test_filters_and_an_empty_answer(tmp_path: Path) -> None:
    url = _seeded(tmp_path)
    only = run_main("kernels", "--kernel", "add_kernel", env=cli_env(TUNER_DB=url))
    assert only.returncode == 0 and len(only.stdout.splitlines()) == 3
    none = run_main("kernels", "--db", url, "--platform", "nope")
    assert none.returncode == 1 and "no kernel configs stored matching those filters" in none.stderr
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    upgrade(empty)
    bare = run_main("kernels", "--db", empty)
    assert bare.returncode == 1 and "@tuner.autotune" in bare.stderr


def test_a_missing_database_is_an_error_naming_the_fix(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'absent.db'}"
    ran = run_main("kernels", "--db", url)
    assert ran.returncode == 1 and ran.stderr.startswith("error: ") and "tuner db upgrade" in ran.stderr
    assert not (tmp_path / "absent.db").exists()
