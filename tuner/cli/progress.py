"""The live progress of `tuner search` and `tuner record-space`, on stderr.

On a terminal (`stream.isatty()`) it is a `rich` Live panel, redrawn twice a second: a bar with
done/total and the ETA; "best so far (unconfirmed)", the best paired trial speedup over the
defaults among trials whose output matched eager (the confirmation has not re-measured it yet);
the failures by status and the pruned count; the running trials with their elapsed time; the
last finished trial with its knobs, folded to the terminal's width.

Anywhere else (CI, pipes, `ray job submit`) it writes plain lines: no ANSI codes, none longer
than `WIDTH` characters (knobs are cut with "..."), one or more per event, each in one of
these forms (`[...]` parts appear only when they apply):

    trial N started: KNOBS
    D/T trials, F failed[, P pruned][, R running], RATE/min, ETA XmYYs | trial N: RESULT (KNOBS)
    D trials, F failed[, P pruned][, R running], RATE/min | trial N: RESULT (KNOBS)   (--budget, no --trials)
    time per trial: start A s, load B s, compile C s, measure D s
    best so far (unconfirmed): S [LOW, HIGH] vs default, trial N
    failures: STATUS COUNT[, STATUS COUNT ...]

KNOBS is `name=value, ...` sorted by name, as many whole knobs as fit followed by `, +K more`
(or just `K knob(s)` when none fits), or `defaults`. RESULT is `L ms, Sx` for a trial that ran
correctly (L its median latency in ms, S its paired speedup over the defaults, or `-` without a
pairing) and its status otherwise (`crashed`, `timeout`, `compile_error`, `pruned`, ...).
`R running` shows once a start was heard (a record-space run has none). RATE is the trials
finished per minute since the progress began (`>999` beyond). After a trial that recorded where its time went,
`time per trial` gives the mean seconds over the trials so far of each phase (`-` where none
recorded it): start (from the job handed over to the trial code's start: process start and
imports), load (model loads and eager references), compile (the candidate's and the default's it
is paired with), measure (the timed section). After a finished
trial, a `best so far` line follows when it is a new best (its speedup with the interval), and
a `failures` line (every failure status so far, most frequent first) when it failed.
"""
from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any, TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.padding import Padding
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from tuner.cli.summary import pruned_text, record_label, speedup_text
from tuner.storage import TrialRecord
from tuner.text import key_values
from tuner.trial import Measurement, Status, measured_speedup

__all__ = ["WIDTH", "Progress"]

WIDTH = 100             # the longest plain line
SHOWN_RUNNING = 8       # running trials listed on a terminal; the rest are counted


class Progress:
    """What a search has done so far, drawn as it changes: `started` when a trial is handed to
    the executor, `update` when one is recorded, `close` once (ends the live panel).

    The display mode is decided from `stream` (default: stderr as it is now) when made: the
    live panel on a terminal (not TERM=dumb), plain lines otherwise.
    A `Progress` is also a rich renderable (the panel), whatever the mode.
    """

    def __init__(self, total: int | None, *, done: int = 0, stream: TextIO | None = None):
        self.total, self.done, self.start_done = total, done, done
        self.began = time.monotonic()
        self.failures: Counter[str] = Counter()
        self.pruned = 0
        self.best: TrialRecord | None = None
        self.last: TrialRecord | None = None
        self.running: dict[int, tuple[str, float]] = {}     # trial number -> (knobs, monotonic start)
        self.heard_starts = False
        self.phases: dict[str, list[float]] = {name: [] for name in PHASES}   # each phase's seconds, per trial
        self.stream = stream or sys.stderr        # looked up now: tests and callers may redirect it
        self._lock = threading.Lock()             # the live panel redraws from rich's own thread
        self._live: Live | None = None
        if hasattr(self.stream, "isatty") and self.stream.isatty():
            console = Console(file=self.stream)
            if not console.is_dumb_terminal:      # TERM=dumb moves no cursor: plain lines there
                self._live = Live(self, console=console, refresh_per_second=2)
                self._live.start()

    def started(self, number: int, params: Mapping[str, Any]) -> None:
        """Trial `number` was handed to the executor with these non-default knobs."""
        with self._lock:
            self.heard_starts = True
            self.running[number] = (key_values(sorted(params.items())) or "defaults", time.monotonic())
        self._emit(_fit(f"trial {number} started:", params, parens=False))

    def update(self, record: TrialRecord) -> None:
        """One trial was recorded: count it, keep it if it is the best paired one so far."""
        m = record.measurement
        new_best = False
        with self._lock:
            self.done += 1
            self.running.pop(record.number, None)
            self.last = record
            if m.status is Status.PRUNED:     # stopped early by the pruner: slow, not broken
                self.pruned += 1
            elif not m.ok:
                self.failures[m.status.value] += 1
            elif record.params and m.objective is not None and (
                    self.best is None or m.objective < self.best.measurement.objective):
                self.best, new_best = record, True
            timed = _phases(m)
            for name, value in timed.items():
                self.phases[name].append(value)
        lines = [self._done_line(record)]
        if timed:
            lines.append(f"time per trial: {self._phases_text()}")
        if new_best:
            lines.append(f"best so far (unconfirmed): {self._best_text()}")
        if not m.ok and m.status is not Status.PRUNED:
            lines.append(f"failures: {self._failures_text()}")
        self._emit(*lines)

    def close(self) -> None:
        """Stop redrawing; the last panel stays on the terminal. Idempotent."""
        if self._live is not None:
            self._live.stop()
            self._live = None

    # -- plain lines -------------------------------------------------------------------------

    def _emit(self, *lines: str) -> None:
        """Write the plain lines of one event, or redraw the panel at once on a terminal."""
        if self._live is not None:
            self._live.refresh()
            return
        self.stream.write("".join(line + "\n" for line in lines))
        self.stream.flush()

    def _done_line(self, record: TrialRecord) -> str:
        running = f", {len(self.running)} running" if self.heard_starts else ""
        head = (f"{self._count()} trials, {sum(self.failures.values())} failed{pruned_text(self.pruned)}"
                f"{running}, {self._rate_text()}/min{self._eta_text()} | trial {record.number}: "
                f"{_result(record, short=True)}")
        return _fit(head, record.params)

    def _count(self) -> str:
        """`done/total`, or `done` when the trials are not counted (a --budget search without --trials)."""
        return str(self.done) if self.total is None else f"{self.done}/{self.total}"

    def _eta_text(self) -> str:
        return "" if self.total is None else f", ETA {_duration(self._eta())}"

    def _eta(self) -> float:
        if self.total is None:
            return 0.0
        ran = self.done - self.start_done
        return (time.monotonic() - self.began) / ran * max(0, self.total - self.done) if ran else 0.0

    def _rate(self) -> float:
        """Trials finished per minute since the progress began (`>999` beyond)."""
        return (self.done - self.start_done) / max(time.monotonic() - self.began, 1e-9) * 60.0

    def _rate_text(self) -> str:
        rate = self._rate()
        return f"{rate:.1f}" if rate < 1000 else ">999"

    def _phases_text(self) -> str:
        means = {name: sum(v) / len(v) if v else None for name, v in self.phases.items()}
        return ", ".join(f"{name} {'-' if mean is None else f'{mean:.1f}'} s" for name, mean in means.items())

    def _best_text(self) -> str:
        if self.best is None:
            return "-"
        return f"{speedup_text(self.best.measurement)} vs default, trial {self.best.number}"

    def _failures_text(self) -> str:
        return ", ".join(f"{status} {count}" for status, count in self.failures.most_common()) or "none"

    # -- the terminal panel ------------------------------------------------------------------

    def __rich__(self) -> RenderableType:
        """The panel: bar and ETA, best so far, failures, running trials, the last finished one."""
        with self._lock:
            now = time.monotonic()
            eta = f"ETA {_duration(self._eta())}" if self.done > self.start_done else "ETA -"
            bar = Table.grid(padding=(0, 1), expand=True)
            bar.add_column(ratio=1)
            bar.add_column(no_wrap=True)
            rate = f"{self._rate_text()}/min  " if self.done > self.start_done else ""
            if self.total is None:      # not counted (--budget without --trials): a pulsing bar
                bar.add_row(ProgressBar(total=None), f"{self.done} trials  {rate}".rstrip())
            else:
                bar.add_row(ProgressBar(total=max(1, self.total), completed=min(self.done, self.total)),
                            f"{self.done}/{self.total} trials  {rate}{eta}")
            failed = sum(self.failures.values())
            failures = (f"{failed} failed" + (f" ({self._failures_text()})" if failed else "")
                        + f", {self.pruned} pruned")
            parts: list[RenderableType] = [bar, Text(f"best so far (unconfirmed): {self._best_text()}"),
                                           Text(f"failures: {failures}")]
            if any(self.phases.values()):
                parts.append(Text(f"time per trial: {self._phases_text()}"))
            if self.heard_starts:
                parts.append(self._running_rows(now))
            if self.last is not None:
                parts.append(_last_text(self.last))
        return Panel(Group(*parts), title="trials", title_align="left")

    def _running_rows(self, now: float) -> RenderableType:
        """One line per running trial (number, elapsed, knobs cut to the width), the first few."""
        running = sorted(self.running.items())
        rows: list[RenderableType] = [Text(f"running: {len(running)}")]
        for number, (label, since) in running[:SHOWN_RUNNING]:
            rows.append(Text(f"  trial {number}  {_duration(now - since)}  {label}", no_wrap=True, overflow="ellipsis"))
        if len(running) > SHOWN_RUNNING:
            rows.append(Text(f"  and {len(running) - SHOWN_RUNNING} more"))
        return Group(*rows)


PHASES = ("start", "load", "compile", "measure")


def _phases(m: Measurement) -> dict[str, float]:
    """The phases a trial recorded, in seconds: compile is the candidate's and the paired default's."""
    compile_s = None if m.compile_s is None else m.compile_s + (m.baseline_compile_s or 0.0)
    values = dict(zip(PHASES, (m.start_s, m.load_s, compile_s, m.measure_s)))
    if m.start_s is None and m.load_s is None:      # no phases recorded (an older or replayed trial)
        return {}
    return {name: value for name, value in values.items() if value is not None}


def _result(record: TrialRecord, *, short: bool = False) -> str:
    """`L ms, S` for a trial that ran correctly (S with its interval unless `short`), its status otherwise."""
    m = record.measurement
    if not m.ok:
        return m.status.value
    paired = measured_speedup(m)
    speedup = speedup_text(m) if not short else "-" if paired is None else f"{paired.median:.2f}x"
    return f"{_fmt_ms(m.latency_ms)} ms, {speedup}"


def _last_text(record: TrialRecord) -> RenderableType:
    """The last finished trial (a failure with its error's first line), then its knobs, indented
    and folded to the panel's width, long values too."""
    error = record.measurement.error if not record.measurement.ok else None
    headline = f": {error.strip().splitlines()[0]}" if error and error.strip() else ""
    return Group(Text(f"last finished: trial {record.number}, {_result(record)}{headline}", overflow="fold"),
                 Padding(Text(record_label(record), overflow="fold"), (0, 0, 0, 2)))


def _fmt_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s"


def _fit(head: str, params: Mapping[str, Any], *, parens: bool = True, width: int = WIDTH) -> str:
    """`head (KNOBS)` (or `head KNOBS`) within `width`: as many whole knobs as fit, sorted by
    name, then `+K more`; `K knob(s)` when not even one fits; `defaults` for none."""
    items = [f"{k}={v}" for k, v in sorted(params.items())]
    room = width - len(head) - (3 if parens else 1)
    knobs = "defaults" if not items else f"{len(items)} knob{'s' if len(items) > 1 else ''}"
    for shown in range(len(items), 0, -1):
        rest = len(items) - shown
        text = ", ".join(items[:shown]) + (f", +{rest} more" if rest else "")
        if len(text) <= room:
            knobs = text
            break
    return f"{head} ({knobs})" if parens else f"{head} {knobs}"
