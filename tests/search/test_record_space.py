"""`tuner record-space`: every point of a small space measured once, for real, and replayed by a search;
`SearchSpace.points`, which enumerates those points."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import MODELS, run_main
from tuner.errors import SpaceError
from tuner.search import SearchOptions
from tuner.search.driver import Driver, open_study
from tuner.search.recording import MAX_POINTS, read_table
from tuner.search_spaces import Knob, SearchSpace, load_space
from tuner.storage import Store, ensure_schema
from tuner.trial import MeasureSpec, Status
from tuner.workers.replay import ReplayExecutor

TINY = str(MODELS / "tiny_mlp.py")


def space_file(tmp_path: Path, knobs: list[dict]) -> Path:
    path = tmp_path / "space.json"
    path.write_text(json.dumps({"name": "small", "knobs": knobs}))
    return path


def conditional_space() -> SearchSpace:
    return SearchSpace(name="conditional", device="cpu", knobs=(
        Knob("max_autotune", "bool", False, "autotune"),
        Knob("max_autotune_gemm_backends", "choice", "ATEN,TRITON,CPP", "autotune",
             choices=("ATEN,TRITON,CPP", "ATEN"), parent=("max_autotune", True)),
        Knob("max_fusion_size", "int", 64, "fusion", low=32, high=128, step=32)))


def test_points_are_every_distinct_candidate_defaults_first_children_only_where_active() -> None:
    points = conditional_space().points(100)
    labels = [p.label() for p in points]
    assert labels[0] == "defaults"
    assert len(labels) == len(set(labels)) == 3 * 4      # (off | on x 2 backends) x 4 fusion sizes
    assert "max_autotune_gemm_backends=ATEN, max_fusion_size=32" not in labels      # child without its parent
    assert "max_autotune=True, max_autotune_gemm_backends=ATEN, max_fusion_size=96" in labels


def test_points_stop_one_past_the_limit_and_a_continuous_range_is_refused() -> None:
    assert len(conditional_space().points(5)) == 6
    continuous = SearchSpace(name="c", device="cpu", knobs=(
        Knob("functorch.activation_memory_budget", "float", 1.0, "memory", low=0.1, high=1.0),))
    with pytest.raises(SpaceError, match="with no finite set of values; give it a \"step\""):
        continuous.points(10)


@pytest.mark.slow
def test_every_point_is_recorded_once_paired_and_a_search_replays_from_the_table(tmp_path: Path) -> None:
    space = space_file(tmp_path, [{"name": "cpp_wrapper", "kind": "bool"}])
    out = tmp_path / "table.json"
    ran = run_main("record-space", TINY, "--space", str(space), "--out", str(out), "--executor", "local",
                   "--repeat", "6")
    assert ran.returncode == 0, ran.stderr
    assert f"wrote {out}: 2 points, 0 failed" in ran.stdout

    table = read_table(out)
    expected = {c.key for c in load_space("cpu", path=space).points(10)}
    keys = [c.key for c, _ in table.rows]
    assert len(keys) == len(set(keys)) == 2 and set(keys) == expected
    for _, measurement in table.rows:        # paired against the defaults in its own process
        assert measurement.status is Status.OK and measurement.baseline_ms and measurement.speedup

    url = f"sqlite:///{tmp_path / 'replay.db'}"
    ensure_schema(url)
    store = Store.open(url)
    job = SearchOptions(measure=MeasureSpec("tiny_mlp.py"), trials=5)
    target = table.target()
    executor = ReplayExecutor.from_file(out)
    outcome = Driver(job, target, store=store, executor=executor).run(open_study(job, target, store, user="t"))
    store.close()
    assert outcome.exhausted and len(outcome.trials) == 2
    assert {r.candidate_key: r.measurement for r in outcome.trials} == {c.key: m for c, m in table.rows}


def test_an_oversized_space_is_refused_before_anything_is_measured(tmp_path: Path) -> None:
    space = space_file(tmp_path, [{"name": "max_fusion_size", "kind": "int", "low": 4, "high": 512}])
    out = tmp_path / "table.json"
    ran = run_main("record-space", TINY, "--space", str(space), "--out", str(out), "--executor", "local")
    assert ran.returncode == 2
    assert ran.stderr.strip().splitlines()[-1] == (
        f"error: space {space} has more than {MAX_POINTS} points and record-space measures every one; "
        f"pass a smaller --space file (fewer knobs, choices instead of ranges)")
    assert not out.exists() and "trials" not in ran.stderr          # no progress line: no trial ran


def test_the_help_says_the_database_is_not_written_and_names_the_limit() -> None:
    from tuner.cli.record_space import DESCRIPTION

    assert "does not write the database" in DESCRIPTION and f"more than {MAX_POINTS} points" in DESCRIPTION
