"""A search's wall-clock budget (`--budget 20m`): when to stop handing out trials.

The budget covers the whole search of a platform: the trials and the confirmation after them,
so what it stores is the best confirmed result of the trials that fitted (an anytime answer).
The driver asks `Budget.allows` before each submission: a new trial is submitted only while the
time left covers what a trial has been taking (`Pace.trial_s`: a high quantile of the wall times
of the last trials, from submission to result, so the contention of trials in flight at once is
in it) plus the confirmation's expected time (`confirmation_s`, from the median trial). Trials in flight when it stops
run to their end (each within its `--timeout`); Ctrl-C still stops everything at once.
Before the first result nothing is known, so the first trials (as many as run at once) are
always submitted: a search always has the defaults' trial to confirm.
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

__all__ = ["Budget", "BudgetStop", "Pace", "confirmation_s", "format_duration", "parse_duration", "share"]

WINDOW = 20             # the last trials whose wall times predict the next one's
QUANTILE = 0.9          # of those wall times: most trials end within it
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

    def finished(self, number: int) -> None:
        began = self.started.pop(number, None)
        if began is not None:
            self.took.append(self.clock() - began)

    def trial_s(self) -> float | None:
        """The QUANTILE of the last WINDOW trials' wall times; None before any finished."""
        recent = self.took[-WINDOW:]
        return _quantile(recent, QUANTILE) if recent else None

    def median_s(self) -> float | None:
        return statistics.median(self.took[-WINDOW:]) if self.took else None


def confirmation_s(finalists: Sequence[Finalist], trial_s: float) -> float:
    """The expected seconds of the confirmation of `finalists` (`tuner.search.verdict`), a trial
    taking `trial_s` (the median).

    Each confirmation run is one process, like a trial, that gets its variants ready one after
    another and times them together: a run of two variants costs about a trial, each variant
    beyond two a sixth of one more (a model load and a compile; measured on examples/mlp.py with
    --executor local on 2 cores: a selection run of five variants took 1.0 median trial alone and
    1.5 with other work on the machine). The runs mirror `conclude`, with the finalist
    ahead in the search standing for the choice: the selection run (eager, the default and the
    finalists), the ablation run when the choice has two or more knobs (it and it minus each
    knob), and the claim run (eager, the default, the choice, its minimal config beside it after an
    ablation, and with freezing the configs without it). No finalist: one run of eager against the default.
    """
    def run_s(variants: int) -> float:
        return trial_s * (1 + max(0, variants - 2) / 6)

    if not finalists:
        return run_s(2)
    choice = max(finalists, key=lambda f: f.search.median if f.search is not None else 0.0)
    knobs = len(choice.candidate.params)
    thawed = (knobs > 1) + sum(not f.freezes for f in finalists) if choice.freezes else 0
    claim = 3 + (knobs > 1) + thawed
    return run_s(2 + len(finalists)) + (run_s(1 + knobs) if knobs > 1 else 0.0) + run_s(claim)


@dataclass(frozen=True)
class BudgetStop:
    """Why and when a budgeted search stopped handing out trials: `left_s` of `budget_s` were left,
    a trial was taking `trial_s` and the confirmation was expected to take `confirm_s`."""

    budget_s: float
    left_s: float
    trial_s: float
    confirm_s: float
    trials: int                   # trials recorded when it stopped submitting (in flight ones finished after)


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
