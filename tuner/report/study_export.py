"""Stored trials as an Optuna study: what `tuner report` analyses and `tuner dashboard` serves.

The tuner's database is the source of truth and Optuna runs in memory during a search
(`tuner.search`), so nothing Optuna can read survives a search. `optuna_study` rebuilds one
from the stored `TrialRecord`s: in memory for analysis (parameter importances, Optuna's
plots), or in any Optuna storage (a journal file for optuna-dashboard).
"""
from __future__ import annotations

import datetime as dt
import warnings
from typing import Any, Sequence

import optuna
from optuna.distributions import (BaseDistribution, CategoricalDistribution, FloatDistribution,
                                  IntDistribution)
from optuna.trial import FrozenTrial, TrialState

from tuner.search_spaces import ALLOWED, knob_distribution
from tuner.storage import TrialRecord
from tuner.trial import Measurement, Status, measured_speedup

__all__ = ["OBJECTIVE_NAME", "knob_distributions", "optuna_study"]

OBJECTIVE_NAME = "latency ratio to default"   # the study's one value: candidate / default, lower is better


def optuna_study(records: Sequence[TrialRecord], *, name: str,
                 storage: str | optuna.storages.BaseStorage | None = None) -> optuna.Study:
    """A new study `name` (direction minimize) holding one finished trial per record, in order.

    Each trial's value is the record's objective (`Measurement.objective`: its paired latency
    ratio to Inductor's defaults, or its latency when unpaired); its state is COMPLETE for an
    ok trial, PRUNED (with its intermediate values) for a pruned one and FAIL otherwise,
    cancelled trials included. Its params are every knob any record sets: the record's value,
    or the knob's Inductor default where the record left it unpatched (as the search's own
    study fills them), so importances compare like with like; a knob outside the catalogue
    is only present where set. user_attrs: status, latency_ms, speedup (text, "-" unpaired),
    error (first line, "" when none), number and candidate_key (the stored ones).

    `storage` is None (in memory), an Optuna storage or its URL. A study of the same name
    already there raises optuna.exceptions.DuplicatedStudyError; write into a fresh storage.
    """
    study = optuna.create_study(storage=storage, study_name=name, direction="minimize")
    with warnings.catch_warnings():     # experimental since Optuna 3.2, unchanged since; the dashboard shows it
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names([OBJECTIVE_NAME])
    distributions = knob_distributions(records)
    defaults = {n: ALLOWED[n].default for n in distributions if n in ALLOWED}
    for record in records:
        study.add_trial(_frozen(record, {**defaults, **record.params}, distributions))
    return study


def knob_distributions(records: Sequence[TrialRecord]) -> dict[str, BaseDistribution]:
    """One Optuna distribution per knob that some record sets, by name, sorted.

    A catalogue knob (`tuner.search_spaces.ALLOWED`) gets the distribution its search uses when
    that holds every stored value and its default; otherwise, and for a knob the catalogue does
    not know, the distribution comes from the values seen: bools and strings (or a mix) are
    categorical, ints an int range, numbers a float range.
    """
    seen: dict[str, list[Any]] = {}
    for record in records:
        for knob, value in record.params.items():
            seen.setdefault(knob, []).append(value)
    found = {}
    for knob in sorted(seen):
        values = seen[knob]
        if knob in ALLOWED:
            catalogued = knob_distribution(ALLOWED[knob])
            if _holds(catalogued, [*values, ALLOWED[knob].default]):
                found[knob] = catalogued
                continue
            values = [*values, ALLOWED[knob].default]
        found[knob] = _from_values(values)
    return found


def _holds(distribution: BaseDistribution, values: list[Any]) -> bool:
    for value in values:
        try:
            if not distribution._contains(distribution.to_internal_repr(value)):
                return False
        except (ValueError, TypeError):     # a value of another type: not one of its choices
            return False
    return True


def _from_values(values: list[Any]) -> BaseDistribution:
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(numbers) < len(values):
        unique: list[Any] = []
        for value in values:
            if not any(type(value) is type(u) and value == u for u in unique):
                unique.append(value)
        return CategoricalDistribution(unique)
    if all(isinstance(v, int) for v in numbers):
        return IntDistribution(min(numbers), max(numbers))
    return FloatDistribution(float(min(numbers)), float(max(numbers)))


def _frozen(record: TrialRecord, params: dict[str, Any],
            distributions: dict[str, BaseDistribution]) -> FrozenTrial:
    m = record.measurement
    state, value = _state(m)
    finished = record.finished_at or record.started_at or dt.datetime.now(dt.timezone.utc)
    return FrozenTrial(
        number=record.number, state=state, value=value,
        datetime_start=record.started_at or finished, datetime_complete=finished,
        params=params, distributions={name: distributions[name] for name in params},
        user_attrs=_attrs(record), system_attrs={},
        intermediate_values=m.steps if state is TrialState.PRUNED else {}, trial_id=record.number)


def _state(m: Measurement) -> tuple[TrialState, float | None]:
    if m.objective is not None:
        return TrialState.COMPLETE, m.objective
    if m.status is Status.PRUNED:
        return TrialState.PRUNED, None
    return TrialState.FAIL, None


def _attrs(record: TrialRecord) -> dict[str, Any]:
    m = record.measurement
    paired = measured_speedup(m)
    return {"status": m.status.value, "latency_ms": m.latency_ms,
            "speedup": "-" if paired is None else paired.text(),
            "error": (m.error or "").partition("\n")[0], "number": record.number,
            "candidate_key": record.candidate_key}
