"""bench/reproducibility.py's replay mode (bench/reproducibility_replay.py): the confirmation rounds it
synthesizes from a recorded table, its counting of flips, and re-tunes of tiny tables with a known answer
through the product's search and verdict."""
from __future__ import annotations

import importlib.util
import random
import statistics
import sys
from typing import Any

import pytest

from helpers import REPO
from tuner.keys import platform_from_parts
from tuner.search.recording import RecordedTable
from tuner.search_spaces import Knob, SearchSpace
from tuner.trial import Candidate, Measurement, Status


def bench() -> Any:
    """bench/reproducibility_replay.py as a module (a bench script, not part of the package)."""
    if "reproducibility_replay" not in sys.modules:
        spec = importlib.util.spec_from_file_location("reproducibility_replay",
                                                      REPO / "bench" / "reproducibility_replay.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["reproducibility_replay"] = module      # its dataclasses look their module up while it loads
        spec.loader.exec_module(module)
    return sys.modules["reproducibility_replay"]


def tiny(speedups: dict[tuple[tuple[str, Any], ...], float], *, width: float = 0.02) -> RecordedTable:
    """A recorded table of two boolean knobs (4 points): each point's speedup over the defaults as given
    (missing: 1.0), with an interval of +-`width` around it, 20 rounds."""
    space = SearchSpace(name="tiny", device="cpu", knobs=(Knob("max_autotune", "bool", False, "autotune"),
                                                          Knob("cpp_wrapper", "bool", False, "wrapper")))
    rows = []
    for candidate in space.points(10):
        ratio = speedups.get(candidate.params, 1.0)
        rows.append((candidate, Measurement(Status.OK, latency_ms=0.5 / ratio, baseline_ms=0.5, speedup=ratio,
                                            speedup_low=ratio * (1 - width), speedup_high=ratio * (1 + width),
                                            reps=20)))
    platform = platform_from_parts("cpu", {"replay": "tiny"}, {"torch": "none"})
    return RecordedTable(model="tiny", workload_key="t" * 32, platform=platform, space=space, rows=tuple(rows),
                         measure={})


MA, CW = (("max_autotune", True),), (("cpp_wrapper", True),)


def test_synthesized_rounds_pair_to_each_configs_speedup_whatever_the_drift() -> None:
    table = tiny({MA: 2.0, CW: 1.1}, width=0.0)         # no interval: no jitter, only the shared drift
    rounds = bench().draw_rounds(table, random.Random(0), 80)
    default, ma = rounds[Candidate().key], rounds[Candidate(MA).key]
    assert len(default) == len(ma) == 80
    assert max(default) / min(default) > 1.05           # the drift moves every variant...
    assert all(d / m == pytest.approx(2.0) for d, m in zip(default, ma))    # ...and each paired ratio cancels it


def test_synthesized_rounds_jitter_as_the_recorded_interval_says_and_differ_per_run() -> None:
    table = tiny({MA: 1.3}, width=0.05)
    rng = random.Random(1)
    first, second = (bench().draw_rounds(table, rng, 2000) for _ in range(2))
    key, base = Candidate(MA).key, Candidate().key
    assert first[key] != second[key]                    # each confirmation run draws its own rounds
    ratios = [d / m for d, m in zip(first[base], first[key])]
    assert statistics.median(ratios) == pytest.approx(1.3, rel=0.01)
    # A median of 20 such ratios has the recorded interval: about +-5%, so +-2.5% a standard error.
    spread = statistics.stdev(statistics.median(ratios[i:i + 20]) / 1.3 for i in range(0, 2000, 20))
    assert 0.015 < spread < 0.035


def test_flips_count_the_most_common_config_and_the_pairs_that_disagree() -> None:
    counted = bench().flips(["a", "b", "a", "a"])
    assert counted.modal == "a" and counted.counts == (("a", 3), ("b", 1))
    assert counted.flip_rate == pytest.approx(0.25)
    assert counted.pair_rate == pytest.approx(0.5)      # 3 of the 6 pairs hold the b
    assert bench().flips(["x"] * 5).flip_rate == bench().flips(["x"] * 5).pair_rate == 0.0
    with pytest.raises(ValueError):
        bench().flips([])


def test_retunes_of_a_tiny_table_store_a_verdict_each() -> None:
    table = tiny({MA: 1.3, CW: 1.3, MA + CW: 1.31}, width=0.05)     # three ways to the same speed
    done = bench().retunes(table, repeat=3, seed=0, trials=4, rounds=12)
    assert [r.seed for r in done] == [0, 1, 2]
    assert 0.0 <= bench().flips([r.config for r in done]).flip_rate <= 1.0
    assert all(r.truth in (1.0, 1.3, 1.31) for r in done)


def test_one_clearly_best_config_is_stored_by_every_retune() -> None:
    table = tiny({MA: 2.0, CW: 1.02, MA + CW: 1.05})
    done = bench().retunes(table, repeat=5, seed=0, trials=4, rounds=12)
    assert {r.config for r in done} == {"max_autotune=True"}
    assert bench().flips([r.config for r in done]).flip_rate == 0.0
    assert all(bench().regret(2.0, r.truth) == 0.0 for r in done)
