"""The report never dresses noise as signal (issue 26): a 12-trial study of tiny_mlp where nothing
beat the defaults, every trial within ±4% of them, the machine's own noise (the defaults' trial,
the default against itself, read 0.99x [0.96, 1.04]), and Inductor's defaults kept.

The history shades that noise floor and bars each trial's interval; the importance section says
the trials lie within the noise instead of ranking knobs; the kept config explains the verdict
(the floor, the closest candidates, what to try next). A 3-trial study draws every figure it can
and says in one line why the importances cannot be drawn. Stored in real SQLite, rendered by
`tuner report --no-profile`, opened in headless Chromium.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from helpers import MODELS, run_main
from helpers.browser import ARTIFACTS, browse
from tuner.report.data import history_points
from tuner.report.noise import advice, closest, noise_floor, within_noise
from tuner.storage import BestConfig, Store, StudyInfo, TrialRecord, upgrade
from tuner.trial import Candidate, Measurement, Status

TINY = str(MODELS / "tiny_mlp.py")
AT = datetime(2026, 5, 14, 9, 30, tzinfo=timezone.utc)
# (params, speedup, interval low, high): the defaults first, then 11 candidates within ±4% of 1.0
NOISE = [({}, 0.99, 0.96, 1.04), ({"mode": "max-autotune-no-cudagraphs"}, 0.97, 0.93, 1.01),
         ({"freezing": True}, 1.03, 0.99, 1.07), ({"epilogue_fusion": False}, 0.98, 0.95, 1.02),
         ({"max_fusion_size": 8}, 1.02, 0.98, 1.05), ({"aggressive_fusion": True}, 0.99, 0.95, 1.03),
         ({"split_reductions": False}, 1.01, 0.97, 1.05), ({"cpp.min_chunk_size": 2048}, 1.04, 0.99, 1.09),
         ({"cpp.min_chunk_size": 4096}, 0.96, 0.92, 1.00), ({"max_fusion_size": 32}, 1.00, 0.97, 1.04),
         ({"freezing": True, "max_fusion_size": 8}, 1.02, 0.98, 1.06), ({"cpp_wrapper": True}, 0.98, 0.94, 1.02)]
FEW = NOISE[:2] + [({"freezing": True}, 1.25, 1.2, 1.3)]


def _record(number: int, params: dict, speedup: float, low: float, high: float) -> TrialRecord:
    m = Measurement(Status.OK, latency_ms=0.3 / speedup, spread_ms=0.01, compile_s=2.0, reps=10, threads=2,
                    baseline_ms=0.3, speedup=speedup, speedup_low=low, speedup_high=high)
    start = AT + timedelta(seconds=10 * number)
    return TrialRecord(number, Candidate.from_dict(params).key, params, m, start, start + timedelta(seconds=8))


@pytest.fixture(scope="module")
def target():
    from tuner.search import prepare_target

    return prepare_target(TINY)


def _store(path: Path, target, rows: list, *, default_kept: bool) -> str:
    url = f"sqlite:///{path}"
    upgrade(url)
    w, p = target.workload, target.platform
    with Store.open(url) as store:
        store.ensure_platform(p)
        store.ensure_workload(w)
        study = store.create_study(workload_key=w.key, platform_key=p.key, space_hash=target.space.hash,
                                   sampler="tpe", seed=0, trials_requested=len(rows), user="alice", host="box",
                                   tuner_version="0.2.0")
        for number, row in enumerate(rows):
            assert target.space.candidate(row[0]).as_dict() == row[0]    # real knobs of the CPU space
            assert store.record_trial(study.id, _record(number, *row))
        params = {} if default_kept else {"freezing": True}
        assert store.save_best(BestConfig(
            graph_key=w.graphs[0].key, platform_key=p.key, params=params, is_default=default_kept,
            speedup=1.0 if default_kept else 1.22, ci_low=1.0 if default_kept else 1.18,
            ci_high=1.0 if default_kept else 1.27, rounds=10, latency_ms=0.3, baseline_ms=0.3,
            workload_key=w.key, study_id=study.id, user="alice", host="box", tuner_version="0.2.0",
            torch_version=dict(p.software)["torch"], created_at=AT))
    return url


def test_a_search_within_the_noise_is_reported_as_noise(target, tmp_path: Path) -> None:
    url = _store(tmp_path / "noise.db", target, NOISE, default_kept=True)
    out = tmp_path / "report"
    done = run_main("report", TINY, "--out", str(out), "--db", url, "--no-profile")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["history.png", "index.html", "latencies.png"]
    page = (out / "index.html").read_text()
    for shown in ("grey band: the noise floor, the default compile against itself (0.99x [0.96, 1.04] (trial 0), "
                  "about ±4%)", "bars: each trial&#x27;s interval",
                  "every ok trial lies within the noise floor", "knobs are not ranked",
                  "Why Inductor's defaults were kept", "at 0.300 ms per call",
                  "trial 7: <b>1.04x</b> [0.99, 1.09] <code>cpp.min_chunk_size=2048</code>, within the noise",
                  "--trials 30", "--rounds 40", "a larger batch (get_inputs)", "a GPU"):
        assert shown in page, shown
    assert "cpp.min_chunk_size</" not in page        # no importance bar, no knob ranked
    browse(out / "index.html", ARTIFACTS / "report-noise.png", images=2)


def test_a_short_search_draws_what_it_can_and_says_why_not_in_one_line(target, tmp_path: Path) -> None:
    url = _store(tmp_path / "few.db", target, FEW, default_kept=False)
    out = tmp_path / "report"
    done = run_main("report", TINY, "--out", str(out), "--db", url, "--no-profile")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["history.png", "index.html", "latencies.png"]
    page = (out / "index.html").read_text()
    importances = page.split("<h2>Parameter importances</h2>")[1].split("</section>")[0]
    assert importances == ('<p class="note">parameter importances need at least 5 ok trials; '
                           'this study has 3</p>')
    assert "Why Inductor" not in page           # freezing cleared the noise: nothing to explain
    browse(out / "index.html", ARTIFACTS / "report-few.png", images=2)


def test_the_history_draws_each_interval_and_the_noise_band() -> None:
    from tuner.report.figures import history_plot

    records = tuple(_record(n, *row) for n, row in enumerate(NOISE))
    floor = noise_floor(records)
    assert (floor.number, floor.low, floor.high) == (0, 0.96, 1.04) and floor.band == pytest.approx((0.96, 1.04))
    fig = history_plot(history_points(records), floor.band)
    ax = fig.axes[0]
    bands = [p for p in ax.patches if p.get_label().startswith("noise: default vs itself")]
    assert len(bands) == 1
    corners = bands[0].get_patch_transform().transform(bands[0].get_path().vertices)
    assert sorted({round(y, 6) for _, y in corners}) == [0.96, 1.04]
    bars = ax.containers[0]
    segments = bars.lines[2][0].get_segments()
    assert [(round(s[0][1], 6), round(s[1][1], 6)) for s in segments] == [(low, high) for _, _, low, high in NOISE]


def test_within_noise_judges_candidates_against_the_floor_or_their_own_intervals() -> None:
    records = tuple(_record(n, *row) for n, row in enumerate(NOISE))
    floor = noise_floor(records)
    assert within_noise(records, floor)
    louder = records + (_record(12, {"freezing": True}, 1.06, 1.02, 1.1),)
    assert not within_noise(louder, floor)
    assert within_noise(records[1:], None)               # no floor: every interval includes 1.0
    assert not within_noise(louder[1:], None) and not within_noise(records[:1], floor)
    assert [c.number for c in closest(records)] == [7, 2, 4]
    tips = advice(study=None, trials=3, rounds=10, platform="AMD EPYC (cuda), torch 2.13", baseline_ms=None)
    assert [t.split(":")[0] for t in tips] == ["more trials", "more rounds", "a larger batch (get_inputs)"]


def test_the_advice_on_a_budget_search_without_a_count_names_the_budget() -> None:
    study = StudyInfo(1, "w", "p", "s", "tpe", 0, 0, datetime(2026, 5, 10, tzinfo=timezone.utc), "u", "h")
    tips = advice(study=study, trials=7, rounds=20, platform="AMD EPYC (cpu)", baseline_ms=None)
    assert tips[0].startswith("more trials: this search measured 7 that fitted in its --budget, a small part of "
                              "the space; run it with --trials 30")
