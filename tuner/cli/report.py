"""What `tuner search`, `tuner best` and `tuner trials` print: the live progress line, the
summary table (or, after an interrupt, the trials so far), trial and best listings."""
from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, TextIO

from tuner.cli.common import format_table
from tuner.confirm import DEFAULT, EAGER
from tuner.storage.records import BestConfig, TrialRecord
from tuner.text import key_values
from tuner.verdict import Verdict

if TYPE_CHECKING:
    from tuner.search import SearchOutcome


def _fmt(value: float | None, spec: str = ".3f", none: str = "-") -> str:
    return none if value is None else format(value, spec)


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s"


class Progress:
    """A live progress line on a terminal; one line per trial otherwise (logs, CI)."""

    def __init__(self, total: int, *, done: int = 0, stream: TextIO | None = None):
        self.total, self.done, self.failed = total, done, 0
        self.start_done, self.started = done, time.monotonic()
        self.baseline_ms: float | None = None
        self.best_ms: float | None = None
        self.stream = stream or sys.stderr        # looked up now: tests and callers may redirect it
        self.live = hasattr(self.stream, "isatty") and self.stream.isatty()

    def update(self, record: TrialRecord) -> None:
        m = record.measurement
        self.done += 1
        if not m.ok:
            self.failed += 1
        elif not record.params and self.baseline_ms is None:
            self.baseline_ms = m.latency_ms
        elif m.latency_ms is not None and (self.best_ms is None or m.latency_ms < self.best_ms):
            self.best_ms = m.latency_ms
        self._draw(record)

    def _draw(self, record: TrialRecord) -> None:
        width = 20
        filled = int(width * self.done / max(1, self.total))
        best = "-"
        if self.baseline_ms and self.best_ms:
            best = f"{self.baseline_ms / self.best_ms:.2f}x"
        ran = self.done - self.start_done
        eta = (time.monotonic() - self.started) / ran * (self.total - self.done) if ran else 0.0
        line = (f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} trials, "
                f"{self.failed} failed, best verified {best} vs default, ETA {_duration(eta)}")
        if self.live:
            self.stream.write("\r" + line + "\033[K")
        else:
            m = record.measurement
            self.stream.write(f"{line} | trial {record.number}: {m.status.value} "
                              f"{_fmt(m.latency_ms)} ms ({record_label(record)})\n")
        self.stream.flush()

    def close(self) -> None:
        if self.live:
            self.stream.write("\n")
            self.stream.flush()


def record_label(record: TrialRecord) -> str:
    return key_values(sorted(record.params.items())) or "defaults"


def summary_table(verdict: Verdict) -> str:
    """Eager, default compile, the best built-in mode and tuned: latency, speedup vs default, compile time."""
    rows = [("", "latency ms", "speedup vs default [95% interval]", "compile s")]
    for variant in verdict.result.variants:
        name = {EAGER: "eager", DEFAULT: "default compile"}.get(variant.label, variant.label)
        if verdict.winner and variant.label == verdict.winner.label:
            name += " *"
        sp = verdict.speedup_of(variant.label)
        if variant.label == DEFAULT:
            speed = "1.00x"
        elif sp is None:
            speed = f"{variant.status.value}: {variant.error or ''}"[:60]
        else:
            speed = f"{sp.median:.2f}x [{sp.low:.2f}, {sp.high:.2f}]"
        rows.append((name, _fmt(variant.latency_ms), speed, _fmt(variant.compile_s, ".1f")))
    return format_table(rows, rule=True) + "\n" + verdict_line(verdict)


def interrupted_summary(outcome: SearchOutcome, *, total: int, confirming: bool = False, shown: int = 5) -> str:
    """What an interrupted search measured: counts, then its `shown` fastest verified trials
    with their speedup over the defaults' trial. Nothing was confirmed, so nothing is stored."""
    ok = [r for r in outcome.trials if r.measurement.ok and r.measurement.latency_ms is not None]
    when = "during the confirmation" if confirming else f"after {len(outcome.trials)} of {total} trials"
    head = (f"interrupted {when} ({len(ok)} ok, {len(outcome.trials) - len(ok)} failed, "
            f"{len(outcome.cancelled)} cancelled); nothing was confirmed or stored as best")
    if not ok:
        return head
    default = next((r.measurement.latency_ms for r in ok if not r.params), None)
    rows = [("#", "latency ms", "vs defaults", "params")]
    for r in sorted(ok, key=lambda r: r.measurement.latency_ms)[:shown]:
        speed = f"{default / r.measurement.latency_ms:.2f}x" if default else "-"
        rows.append((str(r.number), _fmt(r.measurement.latency_ms), speed, record_label(r)))
    return head + "\n" + format_table(rows)


def verdict_line(verdict: Verdict) -> str:
    if verdict.winner is None:
        tried = [(f.label, verdict.speedup_of(f.label)) for f in verdict.finalists]
        tried = [f"{label} {sp.median:.2f}x [{sp.low:.2f}, {sp.high:.2f}]" for label, sp in tried if sp]
        why = "; ".join(tried) or "no finalist ran correctly"
        return f"stored: Inductor's defaults (no finalist's gain cleared the noise: {why})"
    sp = verdict.speedup_of(verdict.winner.label)
    return (f"stored: {verdict.winner.candidate.label()} "
            f"(* confirmed {sp.median:.2f}x [{sp.low:.2f}, {sp.high:.2f}] over {sp.rounds} paired rounds)")


def trials_table(records: list[TrialRecord]) -> str:
    rows = [("#", "status", "latency ms", "spread ms", "compile s", "peak MB", "params / error")]
    for r in records:
        m = r.measurement
        detail = record_label(r) if m.ok else f"{record_label(r)} | {(m.error or '').splitlines()[0][:100] if m.error else ''}"
        rows.append((str(r.number), m.status.value, _fmt(m.latency_ms), _fmt(m.spread_ms),
                     _fmt(m.compile_s, ".1f"), _fmt(m.peak_mem_mb, ".0f"), detail))
    return format_table(rows)


def best_text(best: BestConfig) -> str:
    config = key_values(sorted(best.params.items())) or "Inductor's defaults"
    when = best.created_at.strftime("%Y-%m-%d %H:%M UTC") if best.created_at else "?"
    return (f"config: {config}\n"
            f"confirmed speedup over default compile: {best.speedup:.2f}x "
            f"[{best.ci_low:.2f}, {best.ci_high:.2f}] over {best.rounds} paired rounds\n"
            f"latency: {_fmt(best.latency_ms)} ms tuned, {_fmt(best.baseline_ms)} ms default\n"
            f"provenance: {best.user}@{best.host}, {when}, tuner {best.tuner_version}, torch {best.torch_version}")
