"""`tuner.search.run_search` from Python: the one owner of a search, without the CLI.

What stops a search before any trial runs is checked here without a search; one real search
(slow) runs the example of docs/search.md ("From Python") and checks the events and results it hands back.
"""
from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from fixtures import make_fixtures
from fixtures.sharing_data import platform, workload
from helpers import MODELS
from tuner.errors import ModelFileError, SchemaOutdated, UsageError
from tuner.search import Execution, SearchOptions, Target, run_search
from tuner.search.pipeline import pick_platforms
from tuner.search_spaces import load_space
from tuner.settings import Settings
from tuner.trial import MeasureSpec

TINY = str(MODELS / "tiny_mlp.py")


class Recorder:
    """SearchEvents that write down what happened, in order."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def prepared(self, target) -> None:
        self.seen.append(f"prepared {target.workload.name}")

    def starting(self, target, *, database: str) -> None:
        self.seen.append(f"starting {target.platform.key}")

    def searching(self, study, *, done: int) -> None:
        self.seen.append(f"searching study {study.id}, {done} done")

    def kernels_tuned(self, launches) -> None:
        """The model launches no @tuner.autotune kernel (tests/kernels/test_kernel_discovery.py checks them)."""

    def trial_started(self, number, params) -> None:
        """Starts are left out of the order checked here (tests/cli/test_progress.py checks them)."""

    def trial_done(self, record) -> None:
        self.seen.append(f"trial {record.number}")

    def finished(self, result) -> None:
        self.seen.append(f"finished {result.target.platform.key}")


class Cluster:
    """An executor as `pick_platforms` sees it: only the platforms its nodes advertise
    (None: an executor that runs everything on this machine)."""

    def __init__(self, present: dict[str, int] | None):
        self.present = present

    def platforms(self) -> dict[str, int] | None:
        return self.present


@pytest.fixture(scope="module")
def target() -> Target:
    return Target(workload=workload(), platform=platform("This CPU"), space=load_space("cpu"))


def test_without_platform_this_machine_is_tuned_and_the_executor_is_not_asked(target: Target) -> None:
    assert pick_platforms(None, object(), target) == [target.platform]


def test_all_platforms_of_a_cluster_of_this_machine(target: Target) -> None:
    assert pick_platforms("all", Cluster({target.platform.key: 2}), target) == [target.platform]


@pytest.mark.parametrize(("wanted", "present", "message"), [
    ("abc", None, "--platform needs Ray: add --executor ray (or --address ADDRESS)"),
    ("zzz", {"abc": 1}, "no Ray node advertises platform zzz; platforms present: abc"),
    ("all", {}, "no Ray node advertises platform all; platforms present: none"),
])
def test_platforms_the_cluster_cannot_give(target: Target, wanted: str, present, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        pick_platforms(wanted, Cluster(present), target)
    assert str(caught.value) == message


@pytest.mark.parametrize(("make", "message"), [
    (lambda: SearchOptions(MeasureSpec("m.py"), trials=0), "--trials must be at least 1, got 0"),
    (lambda: SearchOptions(MeasureSpec("m.py"), trials=5, sampler="nuts"),
     "unknown sampler 'nuts'; choose one of: tpe, cmaes, gp, qmc, random, grid"),
    (lambda: SearchOptions(MeasureSpec("m.py", threads=0), trials=5), "--threads must be at least 1, got 0"),
    (lambda: SearchOptions(MeasureSpec("m.py"), trials=5, rounds=11),
     "--rounds must be at least 12 (half choose, half report, and a 95% interval needs 6 rounds per half), got 11"),
    (lambda: Execution("local", platform="all"), "--address and --platform need Ray; drop --executor local"),
])
def test_a_python_caller_gets_the_errors_the_cli_prints(make, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        make()
    assert str(caught.value) == message


def test_a_bad_model_file_stops_before_the_database_is_made(tmp_path: Path) -> None:
    settings = Settings(db_url=f"sqlite:///{tmp_path / 't.db'}", user="tester")
    events = Recorder()
    with pytest.raises(ModelFileError, match="not found"):
        run_search(SearchOptions(MeasureSpec(str(tmp_path / "missing.py")), trials=2),
                   execution=Execution("local"), settings=settings, events=events)
    assert events.seen == [] and not (tmp_path / "t.db").exists()


def test_an_older_schema_is_refused_before_any_trial(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    shutil.copy(make_fixtures.fixture_path("0001_initial"), db)
    events = Recorder()
    with pytest.raises(SchemaOutdated, match="tuner db upgrade"):
        run_search(SearchOptions(MeasureSpec(TINY), trials=2), execution=Execution("local"),
                   settings=Settings(db_url=f"sqlite:///{db}", user="tester"), events=events)
    assert events.seen == ["prepared tiny_mlp"]


@pytest.mark.slow
def test_the_documented_example_searches_without_the_cli(tmp_path: Path) -> None:
    shutil.copy(TINY, tmp_path / "model.py")
    settings = Settings(db_url=f"sqlite:///{tmp_path / 't.db'}", user="tester")
    options = SearchOptions(MeasureSpec(str(tmp_path / "model.py"), repeat=3), trials=3, rounds=12,
                            runtime_knobs=False)
    events = Recorder()
    results = run_search(options, execution=Execution("local"), settings=settings, events=events)
    assert len(results) == 1 and results[0].verdict is not None
    key = results[0].target.platform.key
    assert events.seen[:3] == ["prepared model", f"starting {key}", "searching study 1, 0 done"]
    assert sorted(events.seen[3:6]) == ["trial 0", "trial 1", "trial 2"] and events.seen[6:] == [f"finished {key}"]
    assert [r.number for r in results[0].outcome.trials] == [0, 1, 2]
    with sqlite3.connect(tmp_path / "t.db") as conn:
        assert conn.execute("SELECT count(*) FROM trials").fetchone()[0] == 3
        assert conn.execute("SELECT count(*) FROM best_configs").fetchone()[0] == 1
