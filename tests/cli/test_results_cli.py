"""`tuner best` and `tuner trials` on stored verdicts and paired trials, in this process
(`tuner.cli.main`) on real SQLite files: an eager verdict, a freezing winner with and without a
measured config without freezing, and the paired speedup column of `tuner trials`."""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest

from helpers import MODELS, run_main
from tuner.storage import BestConfig, Store, TrialRecord, upgrade
from tuner.trial import Measurement, Status

TINY = str(MODELS / "tiny_mlp.py")
AT = datetime(2026, 5, 14, 9, 30, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def tiny_target():
    from tuner.search import prepare_target

    return prepare_target(TINY)


@pytest.fixture
def stored(tmp_path: Path, tiny_target):
    """An empty database that knows tiny_mlp's workload and platform, and a way to store a
    best config for its first graph; yields (url, save, study id)."""
    url = f"sqlite:///{tmp_path / 'tuned.db'}"
    upgrade(url)
    w, p = tiny_target.workload, tiny_target.platform
    base = BestConfig(graph_key=w.graphs[0].key, platform_key=p.key, params={"max_autotune": True},
                      is_default=False, speedup=1.2, ci_low=1.1, ci_high=1.25, rounds=15,
                      latency_ms=1.0, baseline_ms=1.2, workload_key=w.key, user="alice",
                      host="box", tuner_version="0.2.0", torch_version=dict(p.software)["torch"],
                      created_at=AT)
    with Store.open(url) as store:
        store.ensure_platform(p)
        store.ensure_workload(w)
        study = store.create_study(workload_key=w.key, platform_key=p.key, space_hash="h",
                                   sampler="tpe", seed=3, trials_requested=3, user="alice",
                                   host="box", tuner_version="0.2.0")

    def save(**changes) -> None:
        with Store.open(url) as store:
            assert store.save_best(replace(base, **changes))

    return url, save, study.id


def best_lines(url: str) -> list[str]:
    done = run_main("best", TINY, "--db", url)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_best_shows_an_eager_verdict(stored) -> None:
    url, save, _ = stored
    save(params={}, eager=True, speedup=1.3, ci_low=1.2, ci_high=1.4, search_speedup=1.375)
    assert best_lines(url)[:4] == [
        "config: eager (run uncompiled)",
        "confirmed speedup over default compile: 1.30x [1.20, 1.40] over 15 paired rounds",
        "speedup seen in its search trial: 1.38x (unconfirmed)",
        "latency: 1.000 ms uncompiled, 1.200 ms default"]


@pytest.mark.parametrize(("unfrozen", "unfrozen_speedup", "shown"), [
    ({"max_autotune": True}, 1.0625, "max_autotune=True, confirmed 1.06x"),
    ({}, None, "Inductor's defaults"),
    (None, None, "Inductor's defaults (no config without freezing was measured for this graph; "
                 "search again to measure one)"),
])
def test_best_shows_what_the_plain_backend_applies_beside_a_freezing_config(
        stored, unfrozen, unfrozen_speedup, shown) -> None:
    url, save, _ = stored
    save(params={"freezing": True, "max_autotune": True}, unfrozen_params=unfrozen,
         unfrozen_speedup=unfrozen_speedup)
    lines = best_lines(url)
    assert lines[:3] == ["config: freezing=True, max_autotune=True",
                         f'with grad enabled backend="tuner" cannot freeze; it applies: {shown}',
                         "confirmed speedup over default compile: 1.20x [1.10, 1.25] over 15 "
                         "paired rounds"]
    assert lines[3].startswith("latency: ") and lines[4].startswith("provenance: alice@box")


def test_trials_show_the_paired_speedup_when_stored(stored) -> None:
    url, _, study_id = stored
    paired = Measurement(Status.OK, 0.9, 0.01, 2.0, 300, 20, threads=2, baseline_ms=1.0,
                         speedup=1.078125, speedup_low=1.03125, speedup_high=1.125)
    with Store.open(url) as store:
        store.record_trial(study_id, TrialRecord(0, "k0", {"max_autotune": True}, paired, finished_at=AT))
        store.record_trial(study_id, TrialRecord(1, "k1", {}, Measurement(Status.OK, 1.0, 0.01, 2.0, 300, 20),
                                                 finished_at=AT))
        store.record_trial(study_id, TrialRecord(2, "k2", {"freezing": True},
                                                 Measurement.failed(Status.CRASHED, "killed\nby"), finished_at=AT))
    done = run_main("trials", TINY, "--db", url)
    assert done.returncode == 0, done.stderr
    _, columns, first, second, third = done.stdout.splitlines()
    assert columns.split()[:6] == ["#", "status", "latency", "ms", "vs", "default"]
    assert first.split()[:6] == ["0", "ok", "0.900", "1.08x", "[1.03,", "1.12]"]
    assert second.split()[:4] == ["1", "ok", "1.000", "-"]
    assert third.split()[:4] == ["2", "crashed", "-", "-"] and third.endswith("freezing=True | killed")
    assert columns.index("vs default") == first.index("1.08x") == second.index("-")


def test_best_names_each_graph_only_when_their_verdicts_differ() -> None:
    from tuner.cli.results import workload_best_text

    one = BestConfig(graph_key="a" * 32, platform_key="p", params={"max_autotune": True}, is_default=False,
                     speedup=1.2, ci_low=1.1, ci_high=1.25, rounds=15, latency_ms=1.0, baseline_ms=1.2,
                     study_id=1, created_at=AT)
    both = workload_best_text([one, replace(one, graph_key="b" * 32)]).splitlines()
    assert both[0] == "config: max_autotune=True" and both[-1] == "applies to all 2 graphs of this model"
    other = replace(one, graph_key="b" * 32, params={"freezing": False}, speedup=1.05, study_id=2)
    lines = workload_best_text([one, other]).splitlines()
    assert lines[0] == "graph 1 of 2 (aaaaaaaaaaaa):" and lines[1] == "  config: max_autotune=True"
    assert "graph 2 of 2 (bbbbbbbbbbbb):" in lines and "  config: freezing=False" in lines
