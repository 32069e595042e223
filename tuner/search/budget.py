"""A search's wall-clock budget (`--budget 20m`): when to stop handing out trials, and when to
stop the trials in flight.

The budget covers the whole search of a platform: the trials and the confirmation after them,
so what it stores is the best confirmed result of the trials that fitted (an anytime answer).
The driver asks `Budget.allows` before each submission: a new trial is submitted only while the
time left covers what a trial has been taking (`Pace.trial_s`: a high quantile of the wall times
of the last trials, from submission to result, so the contention of trials in flight at once is
in it) plus the confirmation's expected time (`confirmation_s`, from the median trial). Each trial
it hands out gets a deadline (`Budget.trial_deadline`): its `--timeout`, shortened to the point
where the time left is what the confirmation needs (as expected when it is handed out), so a
trial that stalls cannot run the search past its budget. A trial stopped there is recorded as
cancelled (`cancelled_error`), not as a failure of its config. Ctrl-C still stops everything at once.
Before the first result nothing is known, so the first trials (as many as run at once) are
always submitted, with the whole time left as their deadline, and the defaults' trial is never
cut: a search always has it to confirm.
"""
from __future__ import annotations

import math
import re
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from tuner.errors import UsageError
from tuner.search.verdict import Finalist

__all__ = ["Budget", "BudgetStop", "Pace", "cancelled_error", "confirmation_s", "elimination_s", "format_duration",
           "parse_duration", "share"]

WINDOW = 20             # the last trials whose wall times predict the next one's
QUANTILE = 0.9          # of those wall times: most trials end within it
MIN_DEADLINE_S = 1.0    # the shortest deadline a trial is handed (allows() leaves it at least a trial's time)
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([hms])", re.IGNORECASE)
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0}


def parse_duration(text: str, *, flag: str = "--budget") -> float:
    """Seconds from `90`, `90s`, `20m`, `1.5h` or `1h30m`; UsageError (naming `flag` and the forms) otherwise."""
    spelled = text.strip().replace(" ", "")
    seconds = None
    if re.fullmatch(r"\d+(?:\.\d*)?|\.\d+", spelled):
        seconds = float(spelled)
    elif spelled and re.fullmatch(rf"(?:{_PART.pattern})+", spelled, re.IGNORECASE):
        seconds = sum(float(n) * _UNIT_S[unit.lower()] for n, unit in _PART.findall(spelled))
    if seconds is None or not math.isfinite(seconds) or seconds <= 0:
        raise UsageError(f"{flag} {text!r} is not a duration above zero; write it like 90s, 20m, 1.5h or 1h30m")
    return seconds


def format_duration(seconds: float) -> str:
    """`45s`, `3m05s` or `1h02m`."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def share(budget_s: float | None, began: float, parts: int, *,
          clock: Callable[[], float] = time.monotonic) -> float | None:
    """The budget of the next of `parts` searches left (platforms, shape buckets): the time left of
    `budget_s` since `began` (on `clock`), shared equally; None without a budget. Never zero: a search
    past its budget still runs its first trials and confirms them."""
    if budget_s is None:
        return None
    return max((budget_s - (clock() - began)) / max(1, parts), 0.001)


def _quantile(values: Sequence[float], q: float) -> float:
    ranked = sorted(values)
    return ranked[max(0, math.ceil(q * len(ranked)) - 1)]


@dataclass
class Pace:
    """How long trials take here: each one's wall time, submission to result (the driver's clock)."""

    clock: Callable[[], float] = time.monotonic
    started: dict[int, float] = field(default_factory=dict)
    took: list[float] = field(default_factory=list)

    def submitted(self, number: int) -> None:
        self.started[number] = self.clock()

    def finished(self, number: int) -> float | None:
        """Trial `number` came back: its wall time, now among `took` (None: not submitted here)."""
        began = self.started.pop(number, None)
        if began is None:
            return None
        self.took.append(self.clock() - began)
        return self.took[-1]

    def trial_s(self) -> float | None:
        """The QUANTILE of the last WINDOW trials' wall times; None before any finished."""
        recent = self.took[-WINDOW:]
        return _quantile(recent, QUANTILE) if recent else None

    def median_s(self) -> float | None:
        return statistics.median(self.took[-WINDOW:]) if self.took else None


def confirmation_s(finalists: Sequence[Finalist], trial_s: float, *, runtime_choices: int = 0,
                   runtime_knobs: int = 0) -> float:
    """The expected seconds of the confirmation of `finalists` (`tuner.search.verdict`), a trial
    taking `trial_s` (the median), and of the process stage after it (`tuner.search.process_stage`)
    where `runtime_choices` settings of `runtime_knobs` knobs can run here.

    Each confirmation run is one process, like a trial, that gets its variants ready one after
    another and times them together: a run of two variants costs about a trial, each variant
    beyond two a sixth of one more (a model load and a compile; measured on examples/mlp.py with
    --executor local on 2 cores: a selection run of five variants took 1.0 median trial alone and
    1.5 with other work on the machine). The runs mirror `conclude`, with the finalist
    ahead in the search standing for the choice: the selection run (eager, the default and the
    finalists), two steps of the backward elimination when the choice has two or more knobs (it
    and it minus each knob, then the smaller config beside it), and the claim run (eager, the
    default, the minimal config, and with freezing the configs without it). No finalist: one run
    of eager against the default. A timing process of the process stage loads, compiles and times
    one config where a trial does two: half a trial; the stage takes at least MIN_ROUNDS rounds of
    each knob's arms (the settings before it and each value) and CLAIM_ROUNDS rounds of two arms.
    """
    from tuner.search.process_stage import CLAIM_ROUNDS, MIN_ROUNDS

    def run_s(variants: int) -> float:
        return trial_s * (1 + max(0, variants - 2) / 6)

    process = (MIN_ROUNDS * (runtime_choices + runtime_knobs) + 2 * CLAIM_ROUNDS) * trial_s / 2 if runtime_knobs else 0.0
    if not finalists:
        return run_s(2) + process
    choice = max(finalists, key=lambda f: f.search.median if f.search is not None else 0.0)
    knobs = len(choice.candidate.params)
    thawed = (knobs > 1) + sum(not f.freezes for f in finalists) if choice.freezes else 0
    claim = 3 + thawed
    return run_s(2 + len(finalists)) + elimination_s(knobs, trial_s) + run_s(claim) + process


def elimination_s(knobs: int, trial_s: float) -> float:
    """The expected seconds of the backward elimination of a config of `knobs` knobs: its first two
    steps (it and it minus each knob; then the smaller config and the one before it beside those)."""
    if knobs < 2:
        return 0.0
    return trial_s * (2 + (knobs - 1 + knobs) / 6)


@dataclass(frozen=True)
class BudgetStop:
    """Why and when a budgeted search stopped handing out trials: `left_s` of `budget_s` were left,
    a trial was taking `trial_s` and the confirmation was expected to take `confirm_s`."""

    budget_s: float
    left_s: float
    trial_s: float
    confirm_s: float
    trials: int                   # trials recorded when it stopped submitting (those in flight came back
    #                               after, or were stopped at their deadline: `SearchOutcome.cancelled`)


class Budget:
    """`seconds` of wall clock from its making (`clock`, default time.monotonic), for one platform's
    search and confirmation. `stop` is set the first time `allows` refuses; it refuses from then on."""

    def __init__(self, seconds: float, *, clock: Callable[[], float] = time.monotonic):
        self.seconds, self.clock = seconds, clock
        self.began = clock()
        self.stop: BudgetStop | None = None

    def left(self) -> float:
        return self.seconds - (self.clock() - self.began)

    def allows(self, pace: Pace, *, confirm_s: float, recorded: int) -> bool:
        """Whether another trial fits: always before any trial finished (nothing is known), then
        while the time left covers a trial (`Pace.trial_s`) and the confirmation (`confirm_s`)."""
        if self.stop is not None:     # once stopped, stopped: a fast trial after it changes nothing
            return False
        trial_s = pace.trial_s()
        if trial_s is None:
            return True
        left = self.left()
        if left >= trial_s + confirm_s:
            return True
        if self.stop is None:
            self.stop = BudgetStop(self.seconds, left, trial_s, confirm_s, recorded)
        return False

    def trial_deadline(self, *, confirm_s: float) -> float:
        """The seconds a trial handed out now may run: until the time left is `confirm_s`, what the
        confirmation is expected to take (at least MIN_DEADLINE_S)."""
        return max(self.left() - confirm_s, MIN_DEADLINE_S)


def cancelled_error(budget_s: float, ran_s: float, confirm_s: float) -> str:
    """The error of a trial stopped at its budget deadline after `ran_s`, leaving `confirm_s` of
    this search's `budget_s` for the confirmation (0: handed out before any trial finished, so
    at the budget's end): why, and that its config did not fail."""
    where = (f"where the time left of this search's {format_duration(budget_s)} was what the confirmation is "
             f"expected to take ({format_duration(confirm_s)})" if confirm_s > 0 else
             f"at the end of this search's {format_duration(budget_s)} (handed out before any trial finished)")
    return (f"cancelled at the --budget deadline: stopped after {format_duration(ran_s)}, {where}; not a failure "
            f"of this config, which `tuner search MODEL --resume` may measure again")
