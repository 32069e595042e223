"""What a search minimises (`--objective`), the Pareto front of its trials, and the picking of
the operating point to confirm (`--prefer`).

`latency` alone (the default) is the search as it always was: one Optuna direction, told the
paired latency ratio (`Measurement.objective`), finalists by `tuner.search.verdict.pick_finalists`.
Any other choice makes a study with one `minimize` direction per objective, told each ok trial's
values; a trial missing a value (not ok, or without a peak memory or a compile time) is told failed.
Pruning is then off: the pruners compare latency ratios round by round, and Optuna's pruners do not
support several objectives. The front is the ok trials that no other ok trial dominates
(`pareto_front`); the finalists come from it, ranked by the preferred objective (`front_finalists`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from tuner.errors import UsageError
from tuner.search.verdict import Finalist, pick_finalists
from tuner.storage import TrialRecord
from tuner.trial import Candidate, Measurement, measured_speedup

__all__ = ["LATENCY_ONLY", "MULTI_OBJECTIVE_SAMPLERS", "OBJECTIVES", "Objective", "check_objectives",
           "front", "front_finalists", "objective_values", "pareto_front", "parse_objectives",
           "preferred_order", "pruning_notice"]


@dataclass(frozen=True)
class Objective:
    """One thing a search can minimise: its `label` and unit as printed, and how to `read` it
    from an ok Measurement (None when the measurement lacks it)."""

    name: str
    label: str
    read: Callable[[Measurement], float | None]


OBJECTIVES: dict[str, Objective] = {
    "latency": Objective("latency", "latency ratio to default", lambda m: m.objective),
    "memory": Objective("memory", "peak memory MB", lambda m: m.peak_mem_mb),
    "compile_time": Objective("compile_time", "compile s", lambda m: m.compile_s),
}
LATENCY_ONLY = ("latency",)
# Optuna 5's samplers that take several directions; CmaEsSampler refuses a multi-objective study.
MULTI_OBJECTIVE_SAMPLERS = ("tpe", "gp", "qmc", "random", "grid")
FRONT_FINALISTS = 3           # front points confirmed when the preference is not latency


def parse_objectives(text: str) -> tuple[str, ...]:
    """`--objective` text ("latency,memory") as names in the order given; UsageError, in one line
    listing the choices, for an empty, unknown or repeated name."""
    names = tuple(part.strip() for part in text.split(","))
    choices = ", ".join(OBJECTIVES)
    for name in names:
        if name not in OBJECTIVES:
            raise UsageError(f"unknown --objective {name!r}; choose one or more of: {choices} (comma-separated)")
    if len(set(names)) != len(names):
        raise UsageError(f"--objective {text!r} names an objective twice; choose each of {choices} at most once")
    return names


def check_objectives(objectives: tuple[str, ...], prefer: str, sampler: str) -> None:
    """UsageError, naming the fix, when the objectives, the preference or the sampler do not fit together."""
    if not objectives:
        raise UsageError(f"--objective needs at least one of: {', '.join(OBJECTIVES)}")
    parse_objectives(",".join(objectives))
    if prefer not in objectives:
        raise UsageError(f"--prefer {prefer!r} is not among --objective {','.join(objectives)}; "
                         f"prefer one of: {', '.join(objectives)}")
    if len(objectives) > 1 and sampler not in MULTI_OBJECTIVE_SAMPLERS:
        raise UsageError(f"--sampler {sampler} cannot search several objectives; "
                         f"use one of: {', '.join(MULTI_OBJECTIVE_SAMPLERS)}")


def pruning_notice(objectives: tuple[str, ...], pruner: str) -> str | None:
    """The one-line notice that pruning is off, when the objectives turn off a pruner that was asked for."""
    if objectives == LATENCY_ONLY or pruner == "none":
        return None
    return (f"pruning is off with --objective {','.join(objectives)}: the pruners judge the latency ratio "
            f"alone and Optuna's pruners do not support several objectives (--pruner {pruner} ignored)")


def objective_values(m: Measurement, objectives: tuple[str, ...]) -> tuple[float, ...] | None:
    """The measurement's value for each objective, in order; None unless it is ok and has them all."""
    if not m.ok:
        return None
    values = tuple(OBJECTIVES[name].read(m) for name in objectives)
    return None if any(v is None for v in values) else tuple(float(v) for v in values)


def pareto_front(points: Sequence[Sequence[float]]) -> list[int]:
    """The indices, ascending, of the points no other point dominates (all minimised).

    A point dominates another when it is no worse on every value and better on one. Equal points
    do not dominate each other, so duplicates on the front are all kept.
    """
    def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
        return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))

    return [i for i, p in enumerate(points) if not any(dominates(q, p) for q in points)]


def front(records: Sequence[TrialRecord], objectives: tuple[str, ...]) -> tuple[TrialRecord, ...]:
    """The ok trials on the Pareto front of `objectives`, by trial number; empty when none has every value."""
    scored = [(r, v) for r in records if (v := objective_values(r.measurement, objectives)) is not None]
    on_front = pareto_front([v for _, v in scored])
    return tuple(sorted((scored[i][0] for i in on_front), key=lambda r: r.number))


def preferred_order(records: Sequence[TrialRecord], objectives: tuple[str, ...],
                    prefer: str) -> list[TrialRecord]:
    """`records` (each with every value) best first on `prefer`, ties broken by the other objectives
    in their order, then by trial number."""
    rest = [name for name in objectives if name != prefer]

    def rank(r: TrialRecord) -> tuple[float, ...]:
        read = r.measurement
        return (OBJECTIVES[prefer].read(read), *(OBJECTIVES[n].read(read) for n in rest), r.number)

    return sorted(records, key=rank)


def front_finalists(records: Sequence[TrialRecord], objectives: tuple[str, ...],
                    prefer: str) -> tuple[Finalist, ...]:
    """The finalists of a search over `objectives`, all from the Pareto front.

    Preferring latency: `pick_finalists` over the front (the fastest built-in mode and configs).
    Otherwise: up to FRONT_FINALISTS front points best first on `prefer`, and none ranked after
    Inductor's defaults (the defaults are better on `prefer` than those). `conclude(...,
    in_order=True)` then keeps the first of them that is confirmed faster than the defaults (else
    eager, if it is).
    """
    points = front(records, objectives)
    if prefer == "latency":
        return pick_finalists(points)
    picked = []
    for record in preferred_order(points, objectives, prefer):
        if not record.params or len(picked) == FRONT_FINALISTS:
            break
        picked.append(Finalist(f"front #{len(picked) + 1} by {prefer}", Candidate.from_dict(record.params),
                               measured_speedup(record.measurement)))
    return tuple(picked)
