"""`tuner compare`: the demo's last step, on a tiny stored database, in a fresh process.

The verdict is stored through the real `Store.save_best` into a SQLite file (a freezing winner
with the config measured without freezing beside it, as a search stores one), then the real
CLI runs in a subprocess: real `torch.compile` with Inductor's defaults, `backend="tuner"` (the
entry point) and `tuner.compile`, each checked against eager and timed interleaved.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from helpers import MODELS, cli_env, run_cli, run_main
from helpers.stored import STORED, TINY, UNFROZEN, store_configs, tiny_workload

PATHS = ("eager (not compiled)", "torch.compile (Inductor's defaults)", 'torch.compile(backend="tuner")',
         "tuner.compile")


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, int]:
    """A database holding a freezing winner for every graph of the tiny MLP on this platform
    (at this process's thread count, passed to the command), and that thread count."""
    from tuner.platform import current_platform

    threads = torch.get_num_threads()
    url = f"sqlite:///{tmp_path_factory.mktemp('compare') / 'tuner.db'}"
    store_configs(url, tiny_workload(), current_platform("cpu", threads=threads), STORED,
                  unfrozen_params=UNFROZEN, unfrozen_speedup=1.04, runtime={"runtime.omp_wait_policy": "passive"})
    return url, threads


USER_PATHS = ("default compile", 'backend="tuner"', "tuner.compile", "emitted code", "tuner run + backend")


def test_compare_applies_the_stored_config_on_every_path_and_times_them(tmp_path: Path, stored) -> None:
    url, threads = stored
    ran = run_cli("compare", str(TINY), "--db", url, "--rounds", "12", "--threads", str(threads),
                  "--processes", "1", cwd=tmp_path, timeout=900)
    assert ran.returncode == 0, ran.stderr[-3000:]
    out = ran.stdout
    assert all(len(line) <= 100 for line in out.splitlines()), out
    assert f"on cpu, {threads} threads, 12 paired rounds" in out
    rows = {label: next(ln for ln in out.splitlines() if ln.startswith(label)) for label in PATHS}
    assert "1.00x (baseline)" in rows[PATHS[1]]
    for label in (PATHS[0], *PATHS[2:]):      # a latency and a speedup with its interval
        assert re.search(r"\d+\.\d{3}\s+\d+\.\d\dx \[\d+\.\d\d, \d+\.\d\d\]", rows[label]), rows[label]
    assert ("stored (tuner best): freezing=True, max_fusion_size=8, 1.10x [1.05, 1.15] over the default "
            "compile in 5 rounds") in " ".join(out.split())
    lookups = " ".join(out.split('lookup, torch.compile(backend="tuner"):')[1].split())
    plain, tuned = lookups.split("lookup, tuner.compile:")
    # both paths are the one backend: the freezing winner as stored, frozen in the first trace
    for path in (plain, tuned):
        assert "exact hit" in path and "freezing=True" in path and "without freezing" not in path, path
    assert "not timed" not in out
    # the user's view: each path in fresh processes, the emitted code and tuner run among them
    view = out.split("as a user runs it: 1 round of a fresh process per path")[1]
    for label in USER_PATHS:
        row = next(ln for ln in view.splitlines() if ln.startswith(label))
        assert re.search(r"\d+\.\d{3}", row), row
    assert "exit " not in view, view                                   # no path's process failed


def test_compare_without_a_stored_config_names_the_search(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    from tuner.storage import upgrade

    upgrade(url)
    ran = run_main("compare", str(MODELS / "tiny_mlp.py"), "--db", url, "--processes", "0", env=cli_env())
    assert ran.returncode == 1
    assert ran.stderr.strip().endswith(f"run: tuner search {MODELS / 'tiny_mlp.py'}")
    assert ran.stdout == ""


@pytest.mark.parametrize("rounds", [1, 2, 5])
def test_compare_refuses_rounds_that_give_no_interval(tmp_path: Path, rounds: int) -> None:
    """Below 6 paired rounds the interval of every speedup is [-inf, inf]: refused before any
    compile, in one line naming the fix."""
    ran = run_main("compare", str(TINY), "--rounds", str(rounds), "--db", f"sqlite:///{tmp_path / 'x.db'}")
    assert ran.returncode == 2 and ran.stdout == ""
    assert ran.stderr.strip() == (f"error: --rounds {rounds} is too few for a 95% interval (each speedup is the "
                                  f"median of {rounds} paired ratios); give at least --rounds 6")


def test_the_fewest_rounds_compare_takes_give_a_bounded_interval() -> None:
    from tuner.errors import UsageError
    from tuner.report import check_rounds, compare_applied
    from tuner.trial import MIN_INTERVAL_VALUES, paired_speedup

    check_rounds(MIN_INTERVAL_VALUES)
    ratios = [1.0 + i / 100 for i in range(MIN_INTERVAL_VALUES)]
    assert paired_speedup(ratios, [1.0] * MIN_INTERVAL_VALUES).low > 0
    assert paired_speedup(ratios[:-1], [1.0] * (MIN_INTERVAL_VALUES - 1)).low == float("-inf")
    with pytest.raises(UsageError, match="give at least --rounds 6"):      # the Python API refuses too
        compare_applied(str(TINY), rounds=MIN_INTERVAL_VALUES - 1)
