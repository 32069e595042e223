"""Multi-objective search (`--objective`, `--prefer`): the Pareto front as a pure function, a
search over a replay table with a known front (searched, confirmed and stored, no compiles),
the usage errors, the schema that records a study's objectives, `tuner best` and the report."""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest
from sqlalchemy import inspect

from fixtures import make_fixtures
from helpers import MODELS, run_main
from tuner.errors import UsageError
from tuner.platform import Platform
from tuner.search import SearchEvents, SearchOptions, Target, front, parse_objectives, preferred_order
from tuner.search.driver import Driver, open_study
from tuner.search.objectives import front_finalists, pareto_front
from tuner.search.pipeline import tune
from tuner.search_spaces import Knob, SearchSpace
from tuner.storage import Store, TrialRecord, current_revision, ensure_schema, upgrade
from tuner.storage.engine import make_engine
from tuner.storage.migrate import downgrade
from tuner.trial import Candidate, MeasureSpec, Measurement, Status
from tuner.workers.replay import EAGER_KEY, ReplayExecutor
from tuner.keys import GraphFingerprint, Workload

WORKLOAD = Workload(key="w" * 32, name="recorded", graphs=(GraphFingerprint("g" * 32, 0, 3, "[]", "graph"),))
PLATFORM = Platform(key="p" * 24, hardware_key="h" * 24, software_key="s" * 24, device="cpu",
                    hardware=(("cores", "2"),), software=(("torch", "2.13.0"),))
SPACE = SearchSpace(name="pareto", device="cpu", knobs=(Knob("a", "bool", False, "autotune"),
                                                        Knob("b", "choice", 1, "tiling", choices=(1, 2, 4))))
# params -> (latency ratio to the defaults, peak MB, compile s). On (latency, memory) the front is
# a (fastest), b=2 and b=4 (least memory); the defaults and the other two are dominated.
TABLE = {
    (): (1.0, 100.0, 10.0),
    (("a", True),): (0.8, 130.0, 12.0),
    (("b", 2),): (0.9, 90.0, 11.0),
    (("b", 4),): (0.95, 80.0, 9.0),
    (("a", True), ("b", 2)): (0.85, 140.0, 13.0),
    (("a", True), ("b", 4)): (1.1, 150.0, 8.0),
}
FRONT = {(("a", True),), (("b", 2),), (("b", 4),)}
BASE_MS = 10.0


def measured(ratio: float, mem: float, compile_s: float) -> Measurement:
    return Measurement(Status.OK, latency_ms=BASE_MS * ratio, spread_ms=0.1, compile_s=compile_s, peak_mem_mb=mem,
                       reps=8, baseline_ms=BASE_MS, speedup=1 / ratio, speedup_low=1 / ratio, speedup_high=1 / ratio)


def replay() -> ReplayExecutor:
    recorded = {Candidate(p).key: measured(*v) for p, v in TABLE.items()}
    rounds = {Candidate(p).key: [BASE_MS * v[0]] * 4 for p, v in TABLE.items()}
    rounds[EAGER_KEY] = [BASE_MS * 1.5] * 4          # eager is slower than everything here
    return ReplayExecutor(recorded, rounds=rounds)


def record(number: int, params: dict, values: tuple[float, float, float] | None) -> TrialRecord:
    m = Measurement.failed(Status.COMPILE_ERROR, "boom") if values is None else measured(*values)
    return TrialRecord(number=number, candidate_key=Candidate.from_dict(params).key, params=params, measurement=m)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    url = f"sqlite:///{tmp_path / 'pareto.db'}"
    ensure_schema(url)
    with Store.open(url) as opened:
        yield opened


def job(sampler: str = "grid", **changes) -> SearchOptions:
    return SearchOptions(measure=MeasureSpec("recorded.py", repeat=8), trials=len(TABLE), sampler=sampler,
                         seed=5, rounds=12, **{"objectives": ("latency", "memory"), **changes})


# ---------------------------------------------------------------- the front, as a pure function


def test_the_front_keeps_the_non_dominated_points_duplicates_and_ties() -> None:
    points = [(1.0, 5.0), (2.0, 3.0), (2.0, 3.0), (3.0, 1.0), (3.0, 3.0), (9.0, 9.0), (1.0, 6.0)]
    # (3,3) is dominated by (2,3) (a tie on one value, better on the other); (1,6) by (1,5); (9,9) by all
    assert pareto_front(points) == [0, 1, 2, 3]
    assert pareto_front([(4.0, 4.0)]) == [0] and pareto_front([]) == []
    assert pareto_front([(1.0, 1.0, 1.0), (0.5, 2.0, 2.0), (2.0, 2.0, 2.0)]) == [0, 1]


def test_failed_trials_and_trials_without_a_value_are_off_the_front() -> None:
    records = [record(0, {}, (1.0, 70.0, 10.0)), record(1, {"a": True}, None),
               TrialRecord(2, "k2", {"b": 2}, Measurement(Status.OK, latency_ms=1.0, speedup=2.0)),   # no peak MB
               record(3, {"b": 4}, (0.95, 80.0, 9.0))]
    assert [r.number for r in front(records, ("latency", "memory"))] == [0, 3]
    assert [r.number for r in front(records, ("latency",))] == [2]           # ratio 0.5, memory not asked


def test_the_finalists_follow_the_preference_and_stop_at_the_defaults() -> None:
    records = [record(i, dict(p), v) for i, (p, v) in enumerate(TABLE.items())]
    by_memory = front_finalists(records, ("latency", "memory"), "memory")
    assert [f.candidate.as_dict() for f in by_memory] == [{"b": 4}, {"b": 2}, {"a": True}]
    assert [f.label for f in by_memory][0] == "front #1 by memory"
    by_latency = front_finalists(records, ("latency", "memory"), "latency")
    assert [f.candidate.as_dict() for f in by_latency] == [{"a": True}, {"b": 2}]
    # the defaults on the front, between b=4 (now slower) and b=2 on memory: nothing after them is a finalist
    cheap_defaults = [record(0, {}, (1.0, 85.0, 10.0)), *records[1:3], record(3, {"b": 4}, (1.05, 80.0, 9.0))]
    assert [f.candidate.as_dict() for f in front_finalists(cheap_defaults, ("latency", "memory"), "memory")] == [
        {"b": 4}]
    # one objective: its front is its minimum
    by_compile = front_finalists(records, ("compile_time",), "compile_time")
    assert [f.candidate.as_dict() for f in by_compile] == [{"a": True, "b": 4}]
    ordered = preferred_order(front(records, ("latency", "memory", "compile_time")),
                              ("latency", "memory", "compile_time"), "compile_time")
    assert [r.params for r in ordered][:2] == [{"a": True, "b": 4}, {"b": 4}]


# ---------------------------------------------------------------- the search on a replay table


@pytest.mark.parametrize("sampler", ["grid", "tpe", "random"])
def test_a_search_over_the_whole_table_finds_exactly_the_known_front(sampler: str, store: Store) -> None:
    options, target = job(sampler), Target(workload=WORKLOAD, platform=PLATFORM, space=SPACE)
    executor = replay()
    study = open_study(options, target, store, user="tester")
    driver = Driver(options, target, store=store, executor=executor)
    outcome = driver.run(study)
    assert len(outcome.trials) == len(TABLE)
    assert {tuple(sorted(r.params.items())) for r in front(outcome.trials, options.objectives)} == FRONT
    assert len(driver.optuna.directions) == 2
    assert {SPACE.candidate(t.params).params for t in driver.optuna.best_trials} == FRONT
    assert all(request.pruning is None for request in executor.submitted)      # pruning is off
    stored = store.last_study(WORKLOAD.key, PLATFORM.key)
    assert (stored.objectives, stored.prefer) == (("latency", "memory"), "latency")


class _Quiet(SearchEvents):
    pass


@pytest.mark.parametrize(("prefer", "stored"), [("latency", {"a": True}), ("memory", {"b": 4}),
                                                (None, {"a": True})])
def test_the_preference_picks_the_point_confirmed_and_stored(prefer: str | None, stored: dict,
                                                              store: Store) -> None:
    options = job(prefer=prefer)
    executor = replay()
    result = tune(options, Target(workload=WORKLOAD, platform=PLATFORM, space=SPACE), store=store,
                  executor=executor, user="tester", events=_Quiet())
    assert result.stored and result.verdict.stored.candidate.as_dict() == stored
    assert store.best_config(WORKLOAD.graphs[0].key, PLATFORM.key).params == stored
    finalists = [dict(params or ()) for _, params in executor.confirmations[0].variants[2:]]
    assert all(tuple(sorted(f.items())) in FRONT for f in finalists)       # finalists come from the front
    assert store.last_study(WORKLOAD.key, PLATFORM.key).prefer == (prefer or "latency")


def test_preferring_memory_falls_back_to_eager_when_no_front_point_holds_up(store: Store) -> None:
    executor = replay()
    executor.rounds = {**{key: (BASE_MS,) * 4 for key in executor.rounds}, EAGER_KEY: (BASE_MS / 2,) * 4}
    result = tune(job(prefer="memory"), Target(workload=WORKLOAD, platform=PLATFORM, space=SPACE), store=store,
                  executor=executor, user="tester", events=_Quiet())
    assert result.verdict.eager and store.best_config(WORKLOAD.graphs[0].key, PLATFORM.key).eager


def test_resuming_with_other_objectives_is_refused(store: Store) -> None:
    target = Target(workload=WORKLOAD, platform=PLATFORM, space=SPACE)
    open_study(job(), target, store, user="tester")
    with pytest.raises(UsageError, match="--objective latency,memory --prefer latency"):
        open_study(job(resume=True, prefer="memory"), target, store, user="tester")


# ---------------------------------------------------------------- usage errors


@pytest.mark.parametrize(("flags", "message"), [
    (["--objective", "latency,speed"], "unknown --objective 'speed'; choose one or more of: latency, memory, "
                                       "compile_time (comma-separated)"),
    (["--objective", "memory,memory"], "--objective 'memory,memory' names an objective twice"),
    (["--objective", "latency,memory", "--sampler", "cmaes"],
     "--sampler cmaes cannot search several objectives; use one of: tpe, gp, qmc, random, grid"),
    (["--objective", "latency,memory", "--prefer", "compile_time"],
     "--prefer 'compile_time' is not among --objective latency,memory; prefer one of: latency, memory"),
])
def test_impossible_objectives_are_one_line_usage_errors(flags: list[str], message: str) -> None:
    done = run_main("search", str(MODELS / "tiny_mlp.py"), *flags)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and message in done.stderr


def test_one_objective_keeps_cmaes_and_the_names_parse_in_order() -> None:
    assert parse_objectives("compile_time, latency") == ("compile_time", "latency")
    assert SearchOptions(MeasureSpec("m.py"), trials=1, sampler="cmaes", objectives=("memory",)).preferred == "memory"


# ---------------------------------------------------------------- schema 0006


def test_0006_records_the_objectives_and_downgrades_without_them(db_url: str) -> None:
    make_fixtures.populate(db_url, "0005_failure_rules")
    upgrade(db_url)
    with Store.open(db_url, readonly=True) as opened:
        old = opened.last_study(make_fixtures.W2_KEY, "19088dd74ee65604c5512874")
    assert (old.objectives, old.prefer) == (("latency",), "latency")           # what every earlier study did
    downgrade(db_url, "0005_failure_rules")
    assert current_revision(db_url) == "0005_failure_rules"
    engine = make_engine(db_url)
    with engine.connect() as connection:
        columns = {c["name"] for c in inspect(connection).get_columns("studies")}
    engine.dispose()
    assert not columns & {"objectives", "prefer"}


def test_the_0006_fixture_reads_back_a_multi_objective_study(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'f.db'}"
    (tmp_path / "f.db").write_bytes(make_fixtures.fixture_path("0006_objectives").read_bytes())
    upgrade(url)        # a database written at 0006 reads back after the later migrations
    with Store.open(url, readonly=True) as opened:
        study = opened.last_study(make_fixtures.W2_KEY, "19088dd74ee65604c5512874")
    assert (study.objectives, study.prefer) == (("latency", "memory"), "memory")


# ---------------------------------------------------------------- tuner best and tuner report


def test_best_prints_the_front_of_a_multi_objective_study(tmp_path: Path) -> None:
    from tuner.search import prepare_target
    from tuner.storage import BestConfig

    tiny = str(MODELS / "tiny_mlp.py")
    target = prepare_target(tiny)
    w, p = target.workload, target.platform
    url = f"sqlite:///{tmp_path / 'best.db'}"
    upgrade(url)
    with Store.open(url) as opened:
        opened.ensure_platform(p)
        opened.ensure_workload(w)
        study = opened.create_study(workload_key=w.key, platform_key=p.key, space_hash="h", sampler="tpe", seed=0,
                                    trials_requested=6, user="alice", host="box", tuner_version="0.2.0",
                                    objectives=("latency", "memory"), prefer="memory")
        for number, (params, values) in enumerate(TABLE.items()):
            assert opened.record_trial(study.id, record(number, dict(params), values))
        assert opened.save_best(BestConfig(
            graph_key=w.graphs[0].key, platform_key=p.key, params={"b": 4}, is_default=False, speedup=1.05,
            ci_low=1.02, ci_high=1.08, rounds=4, latency_ms=9.5, baseline_ms=10.0, workload_key=w.key,
            study_id=study.id, user="alice", host="box", created_at=datetime(2026, 5, 18, tzinfo=timezone.utc)))
    done = run_main("best", tiny, "--db", url)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "config: b=4"
    head = lines.index(f"Pareto front of study {study.id} (objectives latency, memory; prefer memory): "
                       f"3 of 6 ok trials, best on memory first")
    assert lines[head + 1].split() == ["#", "latency", "ratio", "peak", "MB", "compile", "s", "knobs"]
    assert [line.split()[:4] for line in lines[head + 2:]] == [
        ["3", "0.950", "80", "9.0"], ["2", "0.900", "90", "11.0"], ["1", "0.800", "130", "12.0"]]
    assert lines[-1].endswith("a=True")


def test_the_report_draws_the_front_of_a_multi_objective_study(tmp_path: Path) -> None:
    from tuner.report import ReportData, write_report
    from tuner.report.data import pareto_points
    from tuner.storage import StudyInfo

    trials = tuple(record(i, dict(p), v) for i, (p, v) in enumerate(TABLE.items()))
    points, on_front = pareto_points(trials, ("latency", "memory"))
    assert len(points) == 6 and sorted(mb for _, mb in on_front) == [80.0, 90.0, 130.0]
    study = StudyInfo(id=1, workload_key="w", platform_key="p", space_hash="h", sampler="tpe", seed=0,
                      trials_requested=6, created_at=datetime(2026, 5, 18, tzinfo=timezone.utc), user="a", host="b",
                      objectives=("latency", "memory"), prefer="memory")
    data = ReportData(model="m.py", platform="cpu", graphs=1, study=study, studies=1, trials=trials, bests=())
    written = write_report(data, tmp_path / "out", profile="skipped")
    assert "pareto.png" in written.figures and (tmp_path / "out" / "pareto.png").read_bytes()[:4] == b"\x89PNG"
    assert "3 of 6 ok trials are on the front" in written.index.read_text()
    single = ReportData(model="m.py", platform="cpu", graphs=1, study=None, studies=1, trials=trials, bests=())
    assert "pareto.png" not in write_report(single, tmp_path / "out", profile="skipped").figures
    assert not (tmp_path / "out" / "pareto.png").exists()                  # a stale figure is removed
