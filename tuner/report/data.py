"""What `tuner report` reads from the store, and the plain values its figures and tables show.

`load_report_data` reads only (a read-only store suffices). The other functions are pure: they
turn the stored records into the points, rows and counts the page draws, so they are tested
without matplotlib or a browser.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tuner.errors import TunerError
from tuner.trial import Status

if TYPE_CHECKING:
    from tuner.search import Target
    from tuner.storage import BestConfig, Store, StudyInfo, TrialRecord

# Not failures: a pruned trial was stopped early on purpose, a cancelled one by an interrupt.
NOT_FAILURES = (Status.OK, Status.PRUNED, Status.CANCELLED)
TOP_ERRORS = 3          # most common error lines shown per failure status


@dataclass(frozen=True)
class ReportData:
    """Everything stored about one model file on this platform that the report shows.

    `trials` are the newest study's (the one `study` describes) without its cancelled trials;
    `studies` counts every study of the workload here. `bests` holds one kept config per
    tuned graph, in graph order.
    """

    model: str
    platform: str
    graphs: int
    study: StudyInfo | None
    studies: int
    trials: tuple[TrialRecord, ...]
    bests: tuple[BestConfig, ...]


def load_report_data(model: str, target: Target, store: Store) -> ReportData:
    """Read the newest study with results and the kept best configs of `target` here.

    Raises TunerError (naming what to run) when neither a trial nor a best config is stored.
    """
    rows = store.trials_for_workload(target.workload.key, target.platform.key)
    bests = store.workload_best(target.workload.key, target.platform.key)
    kept = [(study, r) for study, r in rows if r.measurement.status is not Status.CANCELLED]
    if not kept and not bests:
        raise TunerError(f"no stored trials or config for {model} on {target.platform.describe()}; "
                         f"run: tuner search {model}")
    newest = max((study.id for study, _ in kept), default=None)
    study = next((s for s, _ in kept if s.id == newest), None)
    return ReportData(model=model, platform=target.platform.describe(), graphs=len(target.workload.graphs),
                      study=study, studies=len({s.id for s, _ in rows}),
                      trials=tuple(r for s, r in kept if s.id == newest), bests=tuple(bests))


@dataclass(frozen=True)
class HistoryPoint:
    """One trial in the optimization history: its paired speedup over the defaults with that
    median's interval (`low`, `high`; None when the trial stored none), and its `seed` label
    ("defaults" or "mode=<name>") when it is one of the search's built-in seeds."""

    number: int
    speedup: float
    ok: bool
    seed: str | None = None
    low: float | None = None
    high: float | None = None


def seed_label(params: dict[str, Any]) -> str | None:
    """"defaults" for Inductor's defaults, "mode=NAME" for a built-in mode preset alone, else None."""
    if not params:
        return "defaults"
    if set(params) == {"mode"}:
        return f"mode={params['mode']}"
    return None


def history_points(trials: tuple[TrialRecord, ...]) -> list[HistoryPoint]:
    """The ok and pruned trials that were paired with the defaults, by trial number.

    A trial recorded without a pairing has no speedup to plot and is left out.
    """
    points = []
    for r in sorted(trials, key=lambda t: t.number):
        m = r.measurement
        if m.speedup is not None and m.status in (Status.OK, Status.PRUNED):
            points.append(HistoryPoint(r.number, m.speedup, m.ok, seed_label(r.params), m.speedup_low,
                                       m.speedup_high))
    return points


def running_best(points: list[HistoryPoint]) -> list[tuple[int, float]]:
    """(number, best speedup so far) after each ok point; pruned trials never count."""
    best, out = None, []
    for p in points:
        if p.ok:
            best = p.speedup if best is None else max(best, p.speedup)
            out.append((p.number, best))
    return out


def pareto_points(trials: tuple[TrialRecord, ...], objectives: tuple[str, ...]
                  ) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """(every ok trial, the Pareto front on all `objectives`) as points of the first two
    objectives' values (`tuner.search.objectives`); both empty for fewer than two objectives."""
    from tuner.search import front, objective_values

    if len(objectives) < 2:
        return [], []
    found = [v[:2] for r in trials if (v := objective_values(r.measurement, objectives)) is not None]
    on_front = [objective_values(r.measurement, objectives)[:2] for r in front(trials, objectives)]
    return found, on_front


def ok_latencies(trials: tuple[TrialRecord, ...]) -> list[float]:
    """The median latency (ms) of every ok trial that has one."""
    return [r.measurement.latency_ms for r in trials if r.measurement.ok and r.measurement.latency_ms is not None]


@dataclass(frozen=True)
class FailureRow:
    """One failure status: how many trials ended with it and its most common error lines."""

    status: str
    count: int
    errors: tuple[tuple[str, int], ...]     # (first line of the error, trials), most common first


def failure_rows(trials: tuple[TrialRecord, ...]) -> list[FailureRow]:
    """Failures grouped by status, most frequent status first; empty when nothing failed."""
    by_status: dict[str, Counter[str]] = {}
    for r in trials:
        m = r.measurement
        if m.status in NOT_FAILURES:
            continue
        line = (m.error or "(no error text)").partition("\n")[0].strip() or "(no error text)"
        by_status.setdefault(m.status.value, Counter())[line] += 1
    rows = [FailureRow(status, sum(c.values()), tuple(c.most_common(TOP_ERRORS))) for status, c in by_status.items()]
    return sorted(rows, key=lambda row: (-row.count, row.status))


def status_counts(trials: tuple[TrialRecord, ...]) -> dict[str, int]:
    """Trials per status, in the order of `Status`, statuses with none left out."""
    counts = Counter(r.measurement.status for r in trials)
    return {s.value: counts[s] for s in Status if counts[s]}


@dataclass(frozen=True)
class KnobChange:
    """A knob the kept config sets away from Inductor's default on this torch."""

    knob: str
    default: str
    best: str


def knob_changes(best: BestConfig) -> list[KnobChange]:
    """The knobs where `best` differs from the defaults, sorted; empty for a default or eager verdict.

    A knob this torch no longer has shows its default as "?" (the lookup refuses such a config;
    the page says so through the profile's lookup lines).
    """
    from tuner.search_spaces import installed_default, installed_has

    rows = []
    for name in sorted(best.params):
        if name == "mode":
            default: Any = "default"
        else:
            default = installed_default(name) if installed_has(name) else "?"
        rows.append(KnobChange(name, repr(default), repr(best.params[name])))
    return rows


def verdict_text(best: BestConfig) -> str:
    """What the kept config is, in a few words."""
    if best.eager:
        return "eager (run uncompiled)"
    if best.is_default or not best.params:
        return "Inductor's defaults (no config beat them beyond the noise)"
    return f"{len(best.params)} knob(s) away from Inductor's defaults"
