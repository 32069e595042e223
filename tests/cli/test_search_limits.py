"""What `tuner search` says about what bounded it: the compiles the adaptive cap stopped, and
where `--budget` stopped the trials (tuner.cli.search), and its progress without a trial count."""
from __future__ import annotations

import io
import re
from datetime import datetime, timezone

from tuner.cli.progress import Progress
from tuner.cli.search import budget_line, cap_line
from tuner.search import SearchOutcome
from tuner.search.budget import BudgetStop
from tuner.storage import StudyInfo, TrialRecord
from tuner.trial import CompileCap, Measurement, Status

AT = datetime(2026, 5, 10, 12, 0, tzinfo=timezone.utc)
STUDY = StudyInfo(1, "w", "p", "s", "tpe", 0, 0, AT, "u", "h")
CAP = CompileCap(seconds=41.0, p90_s=13.7, compiles=12)


def _record(number: int, measurement: Measurement) -> TrialRecord:
    return TrialRecord(number, f"k{number}", {"max_fusion_size": number}, measurement, finished_at=AT)


def test_the_compiles_stopped_at_the_cap_are_counted_with_the_cap() -> None:
    trials = (_record(0, Measurement(Status.OK, 1.0)),
              _record(3, Measurement.failed(Status.TIMEOUT, CAP.reason() + "\ntraceback")),
              _record(4, Measurement.failed(Status.TIMEOUT, "timeout: no result within 300 s")),
              _record(7, Measurement.failed(Status.TIMEOUT, CAP.reason())))
    line = cap_line(SearchOutcome(study=STUDY, trials=trials, compile_cap=CAP))
    assert line == ("2 compile(s) stopped at the adaptive cap (41 s: p90 of 12 compiles 13.7 s x 3): trial(s) 3, 7, "
                    "recorded as timeout; see `tuner trials`")
    assert cap_line(SearchOutcome(study=STUDY, trials=trials[:1] + trials[2:3], compile_cap=CAP)) is None


def test_the_budget_line_says_where_it_stopped_and_how_long_the_search_took() -> None:
    stop = BudgetStop(budget_s=1200.0, left_s=95.0, trial_s=25.0, confirm_s=80.0, trials=41)
    outcome = SearchOutcome(study=STUDY, trials=(), budget=stop)
    assert budget_line(outcome, 1200.0, 1188.0) == (
        "budget 20m00s: stopped handing out trials after 41 with 1m35s left (a trial takes up to 25s here, the "
        "confirmation about 1m20s); the search took 19m48s")
    assert budget_line(outcome, 1200.0, 1230.0).endswith(
        "the search took 20m30s, 30s over the budget (the last trials or the confirmation took longer than the "
        "trials before them)")
    first = SearchOutcome(study=STUDY, trials=(), budget=BudgetStop(5.0, -6.0, 11.0, 11.0, 1))
    assert budget_line(first, 5.0, 39.0) == (
        "budget 5s: stopped handing out trials after 1 6s past it (a trial takes up to 11s here, the confirmation "
        "about 11s); the search took 39s, over the budget: the first trial and the confirmation, which always run "
        "so that a result is confirmed, take longer here; give --budget at least 47s")
    assert budget_line(SearchOutcome(study=STUDY, trials=()), 3600.0, 300.0) == (
        "budget 1h00m: not reached: the trials asked for were done first; the search took 5m00s")


def test_the_budget_line_names_the_trials_it_stopped_in_flight() -> None:
    stop = BudgetStop(budget_s=1200.0, left_s=110.0, trial_s=25.0, confirm_s=80.0, trials=40)
    assert budget_line(SearchOutcome(study=STUDY, trials=(), budget=stop, cut=(41, 43)), 1200.0, 1192.0) == (
        "budget 20m00s: stopped handing out trials after 40 with 1m50s left (a trial takes up to 25s here, the "
        "confirmation about 1m20s); stopped 2 trial(s) still running where the time left was what the confirmation "
        "needs (trial 41, 43: recorded as cancelled, not failed); the search took 19m52s")
    # a count reached first, but a trial was still running at its deadline
    assert budget_line(SearchOutcome(study=STUDY, trials=(), cut=(7,)), 600.0, 590.0).startswith(
        "budget 10m00s: reached while the last trials ran; stopped 1 trial(s) still running")


def test_progress_without_a_trial_count_shows_the_count_and_no_eta() -> None:
    stream = io.StringIO()
    progress = Progress(None, stream=stream)
    progress.started(0, {})
    progress.update(TrialRecord(0, "k0", {}, Measurement(Status.OK, 1.0, speedup=1.0), finished_at=AT))
    line = stream.getvalue().splitlines()[1]
    # the rate is whatever this instant update makes it; the count is bare and no ETA is guessed
    assert re.fullmatch(r"1 trials, 0 failed, 0 running, (>999|\d+\.\d)/min \| trial 0: 1\.000 ms, 1\.00x \(defaults\)",
                        line), line
