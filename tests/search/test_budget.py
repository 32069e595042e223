"""The wall-clock budget (`--budget`, tuner.search.budget) and the adaptive compile cap as the
driver computes them, on a replay executor whose trials take time on a fake clock."""
from __future__ import annotations

import pytest

from helpers.driving import (FakeClock, TimedReplay, store, target, timed_replay,  # noqa: F401 (fixtures)
                             wide_target)
from tuner.errors import UsageError
from tuner.search import MeasureSpec, SearchOptions, Target, format_duration, parse_duration
from tuner.search.budget import Budget, BudgetStop, confirmation_s
from tuner.search.driver import Driver, open_study
from tuner.search.verdict import Finalist
from tuner.storage import Store
from tuner.trial import Candidate, CompileCap, Measurement, Status


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("90s", 90), ("20m", 1200), ("1.5h", 5400),
                                               ("1h30m", 5400), ("1h 30m 15s", 5415), ("2M", 120), (".5m", 30)])
def test_durations_in_the_forms_users_write(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "20x", "m", "0", "0s", "-5m", "1h30", "twenty minutes", "1e3"])
def test_a_bad_duration_is_one_line_naming_the_forms(text: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_duration(text)
    assert str(info.value) == f"--budget {text!r} is not a duration above zero; write it like 90s, 20m, 1.5h or 1h30m"


def test_durations_read_back() -> None:
    assert [format_duration(s) for s in (4.6, 65, 1200, 5415)] == ["5s", "1m05s", "20m00s", "1h30m"]


def test_a_search_needs_a_count_or_a_budget() -> None:
    with pytest.raises(UsageError, match="--trials N, --budget DURATION or both"):
        SearchOptions(MeasureSpec("m.py"), trials=None)
    assert SearchOptions(MeasureSpec("m.py"), trials=None, budget_s=60).trials is None


def test_the_confirmation_is_expected_to_take_a_trial_per_run_and_a_sixth_per_variant_beyond_two() -> None:
    from tuner.trial import Speedup

    one = Finalist("tuned #1", Candidate.from_dict({"max_autotune": True}), Speedup(1.2, 1.1, 1.3, 10))
    two = Finalist("tuned #2", Candidate.from_dict({"max_autotune": True, "cpp_wrapper": True}),
                   Speedup(1.1, 1.0, 1.2, 10))
    frozen = Finalist("tuned #3", Candidate.from_dict({"freezing": True, "cpp_wrapper": True}),
                      Speedup(1.5, 1.3, 1.7, 10))
    assert confirmation_s([], 30.0) == 30.0                           # eager against the default, one run
    assert confirmation_s([one], 30.0) == 35.0 + 35.0                # selection of 3 variants, claim of 3
    assert confirmation_s([one, two], 30.0) == 40.0 + 35.0           # the choice (ahead) has one knob: no ablation
    # ahead: two knobs and freezing: two elimination steps (it and it minus each knob; then beside the
    # config before), a claim of eager, default, the minimal config, it without freezing and the two
    # finalists that do not freeze
    assert confirmation_s([one, two, frozen], 30.0) == pytest.approx(45.0 + (35.0 + 40.0) + 30.0 * (1 + 4 / 6))
    # the process stage: 6 rounds of each knob's arms (7 settings of 3 knobs: 10 arms), 20 claim rounds of
    # two arms, each a process of half a trial
    assert confirmation_s([], 30.0, runtime_choices=7, runtime_knobs=3) == pytest.approx(30.0 + (60 + 40) * 15.0)


def _run(job: SearchOptions, target: Target, store: Store, executor: TimedReplay, budget: Budget):
    study = open_study(job, target, store, user="tester")
    driver = Driver(job, target, store=store, executor=executor)
    return driver.run(study, budget=budget), driver


def test_the_budget_stops_new_trials_when_a_trial_and_the_confirmation_would_not_fit(
        wide_target: Target, store: Store) -> None:
    """Trials of 10 s, a budget of 200 s, no count: trials go on while the time left covers a trial
    and the confirmation expected after them, then stop; the next would have overrun."""
    clock = FakeClock()
    executor = TimedReplay({}, clock=clock, trial_s=10.0, every=Measurement(Status.OK, latency_ms=1.0, reps=5,
                                                                            speedup=1.1))
    job = SearchOptions(MeasureSpec("recorded.py"), trials=None, budget_s=200.0, runtime_knobs=False)
    budget = Budget(200.0, clock=clock)
    outcome, driver = _run(job, wide_target, store, executor, budget)
    stop = outcome.budget
    assert isinstance(stop, BudgetStop) and stop.budget_s == 200.0 and stop.trial_s == 10.0
    assert stop.trials == len(outcome.trials) == len(executor.submitted) and not outcome.exhausted
    # Every trial submitted fitted with the confirmation's reserve; one more would not have.
    assert stop.left_s < stop.trial_s + stop.confirm_s <= stop.left_s + stop.trial_s
    assert stop.confirm_s == confirmation_s(driver_finalists(outcome), 10.0) > 0
    assert 200.0 - stop.left_s == 10.0 * stop.trials           # the fake clock: one trial after another
    assert budget.left() + stop.confirm_s >= 0                # the confirmation's reserve is still there


def driver_finalists(outcome) -> list[Finalist]:
    from tuner.search.verdict import pick_finalists
    return list(pick_finalists(outcome.trials))


class Stalling(TimedReplay):
    """Trials in `stalls` never end by themselves: they come back TIMEOUT once their request's
    deadline has passed on the clock, as an executor kills a trial process at its `timeout_s`; a
    trial in `own_timeout` comes back TIMEOUT after `trial_s`, a timeout of its own (the compile cap's)."""

    def __init__(self, *args, stalls: set[int], own_timeout: set[int] = frozenset(), **kwargs):
        super().__init__(*args, **kwargs)
        self.stalls, self.own_timeout = stalls, own_timeout

    def next_result(self):
        request, measurement = super().next_result()        # the clock moved by trial_s
        if request.number in self.stalls:
            self.clock.advance(request.timeout_s - self.trial_s)
            return request, Measurement.failed(Status.TIMEOUT, f"timeout: no result within {request.timeout_s:g} s")
        if request.number in self.own_timeout:
            return request, Measurement.failed(Status.TIMEOUT, "compile stopped at the adaptive cap of 30 s")
        return request, measurement


def test_a_trial_in_flight_at_the_confirmations_reserve_is_stopped_and_recorded_cancelled(
        wide_target: Target, store: Store) -> None:
    """Trials of 10 s, a 200 s budget, a --timeout of 300 s; trial 3 stalls. It ran until its
    --timeout, 300 s, and the search ended 130 s past its budget with it recorded as a timeout of
    its config. Now every trial but the defaults' is handed the time until the confirmation's
    reserve as its deadline: trial 3 is stopped there, recorded as cancelled with why (not a
    result: not in the trials, never a failure of its config), and the reserve is left whole."""
    clock = FakeClock()
    executor = Stalling({}, clock=clock, trial_s=10.0, stalls={3}, own_timeout={2},
                        every=Measurement(Status.OK, latency_ms=1.0, reps=5, speedup=1.1))
    job = SearchOptions(MeasureSpec("recorded.py", timeout_s=300.0), trials=None, budget_s=200.0, runtime_knobs=False)
    budget = Budget(200.0, clock=clock)
    outcome, driver = _run(job, wide_target, store, executor, budget)
    deadlines = [r.timeout_s for r in executor.submitted]
    assert deadlines[0] == 300.0 and len(deadlines) == 4      # the defaults' trial is never cut
    assert all(d < 300.0 for d in deadlines[1:])               # the others end where the reserve begins
    assert [r.number for r in outcome.trials] == [0, 1, 2] and outcome.cut == (3,)
    own = next(r for r in outcome.trials if r.number == 2)     # a timeout of its own stays its config's
    assert own.measurement.status is Status.TIMEOUT
    (cancelled,) = outcome.cancelled
    assert cancelled.number == 3 and cancelled.measurement.status is Status.CANCELLED
    assert cancelled.measurement.error.startswith("cancelled at the --budget deadline: stopped after "), \
        cancelled.measurement.error
    assert "where the time left of this search's 3m20s was what the confirmation is expected to take (" \
        in cancelled.measurement.error
    assert "not a failure of this config" in cancelled.measurement.error
    stored = {r.number: r.measurement.status for r in store.trials(outcome.study.id)}
    assert stored == {0: Status.OK, 1: Status.OK, 2: Status.TIMEOUT, 3: Status.CANCELLED}
    # stopped where the time left was the confirmation's expected time, as reckoned when handed out
    assert budget.left() == pytest.approx(200.0 - 30.0 - deadlines[3]) and budget.left() > 0
    assert outcome.budget is not None and outcome.budget.trials == 3


def test_a_budget_never_stops_the_first_trial_and_once_stopped_stays_stopped(target: Target, store: Store) -> None:
    clock = FakeClock()
    executor = timed_replay(target, clock=clock, trial_s=30.0, took={1: 1.0})
    job = SearchOptions(MeasureSpec("recorded.py"), trials=None, budget_s=5.0)
    outcome, _ = _run(job, target, store, executor, Budget(5.0, clock=clock))
    # Trial 0 (the defaults) took 30 s of a 5 s budget: nothing more, so the defaults are what is confirmed.
    assert [r.number for r in outcome.trials] == [0] and outcome.budget.trials == 1 and outcome.budget.left_s < 0


def test_a_count_reached_first_leaves_the_budget_unspent(target: Target, store: Store) -> None:
    clock = FakeClock()
    job = SearchOptions(MeasureSpec("recorded.py"), trials=2, budget_s=3600.0)
    outcome, _ = _run(job, target, store, timed_replay(target, clock=clock, trial_s=10.0),
                      Budget(3600.0, clock=clock))
    assert len(outcome.trials) == 2 and outcome.budget is None


def test_the_driver_hands_each_trial_the_cap_from_the_compiles_so_far(wide_target: Target, store: Store) -> None:
    """No cap before five compiles were seen; then the p90 of the correct trials' compile times x 3, at
    least 30 s (the defaults' trial compiles nothing of its own and counts for nothing)."""
    clock = FakeClock()
    executor = TimedReplay({}, clock=clock, trial_s=1.0,
                           every=Measurement(Status.OK, latency_ms=1.0, reps=5, speedup=1.0, compile_s=20.0))
    job = SearchOptions(MeasureSpec("recorded.py"), trials=8)
    outcome, _ = _run(job, wide_target, store, executor, Budget(1e6, clock=clock))
    caps = [r.compile_cap for r in executor.submitted]
    assert caps[:6] == [None] * 6
    assert caps[6:] == [CompileCap(60.0, 20.0, 5), CompileCap(60.0, 20.0, 6)]
    assert outcome.compile_cap == caps[-1]


@pytest.mark.slow
def test_a_tiny_budget_still_confirms_and_stores_a_result_and_says_it_ran_over(tmp_path) -> None:
    """A real search of tiny_mlp with a 5 s budget and no --trials: the defaults' trial runs (it
    always does), nothing after it fits, the confirmation runs and stores its verdict, and the
    summary says where the budget stopped the trials and why the search took longer."""
    from helpers import MODELS, run_main
    from helpers.dbstate import dump

    url = f"sqlite:///{tmp_path / 'budget.db'}"
    done = run_main("search", str(MODELS / "tiny_mlp.py"), "--budget", "5s", "--executor", "local",
                    "--rounds", "12", "--repeat", "4", "--db", url)
    assert done.returncode == 0, done.stderr
    line = done.stdout.strip().splitlines()[-1]
    assert line.startswith("budget 5s: stopped handing out trials after 1 "), done.stdout
    assert "over the budget: the first trial and the confirmation" in line and "give --budget at least" in line
    rows = dump(url, {"best_configs": ["id"], "studies": ["trials_requested"], "trials": ["number"]})
    assert len(rows["best_configs"]) == 1                           # a confirmed verdict, stored
    assert rows["studies"] == [(0,)] and rows["trials"] == [(0,)]   # no count asked; the defaults' trial


@pytest.mark.slow
def test_stalled_trials_are_stopped_at_the_budgets_deadline_and_the_search_confirms(tmp_path) -> None:
    """A real search of stalling_mlp.py (every trial but the defaults' stalls while its process loads
    the model file) on the local executor, 2 workers, --budget 30s, --timeout 300. The trials in
    flight ran until their --timeout, the search ended minutes past its budget with them recorded
    as timeouts of their configs. Now each is stopped at its deadline (the first two, handed out
    before any result, at the budget's end; a later one where the time left is what the
    confirmation needs), recorded as cancelled, and the search confirms and stores; the summary
    says what the budget stopped."""
    import time

    from helpers import MODELS, run_main
    from helpers.dbstate import dump

    url = f"sqlite:///{tmp_path / 'budget.db'}"
    began = time.monotonic()
    done = run_main("search", str(MODELS / "stalling_mlp.py"), "--budget", "30s", "--timeout", "300",
                    "--executor", "local", "--workers", "2", "--rounds", "12", "--repeat", "4", "--db", url)
    took = time.monotonic() - began
    assert done.returncode == 0, done.stderr
    assert took < 300, done.stdout                  # the stalled trials' --timeout was not waited for
    rows = dump(url, {"trials": ["number", "status", "error"], "best_configs": ["id"]})
    rows["trials"].sort()           # by number (a cancelled trial may be recorded before trial 0)
    statuses = [status for _, status, _ in rows["trials"]]
    assert statuses[0] == "ok" and len(statuses) >= 2 and set(statuses[1:]) == {"cancelled"}, (rows, done)
    assert all(error.startswith("cancelled at the --budget deadline: stopped after ")
               for _, _, error in rows["trials"][1:]), rows["trials"]
    assert len(rows["best_configs"]) == 1                           # confirmed and stored
    line = done.stdout.strip().splitlines()[-1]
    cut = ", ".join(str(number) for number, _, _ in rows["trials"][1:])
    assert (f"stopped {len(statuses) - 1} trial(s) still running where the time left was what the confirmation "
            f"needs (trial {cut}: recorded as cancelled, not failed)") in line, line
