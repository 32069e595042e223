"""The driver: a search from the model file to the stored verdict, on the driver's side.

`run_search(options, *, execution, settings, events)` (`pipeline.py`) is the one owner of a
search: it prepares the `Target`, opens the store, builds the executor, runs the driver
(`driver.py`: asks Optuna for candidates and hands each result to the steps of
`result_steps.py`; samplers, warm starts and learned failures, the cost model, objectives; the
`--budget` rule, `budget.py`),
confirms the finalists (`confirmation_retries.py`) and stores the verdict (`verdict.py`),
returning one `SearchResult` per platform. What it is asked and what it answers
(`SearchOptions`, `Target`, `SearchOutcome`, `SearchInterrupted`) are `options.py`'s values.
`run_bucket_search` runs one per shape bucket; `record` measures every point of a small space
for replay. It reaches measurement only through an `Executor`. Names load on first use: Optuna
and numpy load only when a search does.

Over 20 names: the face is the Python API of a search (`run_search`, `run_bucket_search`,
`record` and the values they take and give, `MeasureSpec` among them so that one import
writes a search) and the objectives' vocabulary that `tuner results` and the report read.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tuner.search.budget import format_duration, parse_duration
    from tuner.search.buckets import BucketSearch, run_bucket_search
    from tuner.search.objectives import (OBJECTIVES, front, objective_values, parse_objectives, preferred_order,
                                         pruning_notice)
    from tuner.search.options import SearchInterrupted, SearchOptions, SearchOutcome, Target
    from tuner.search.pipeline import Execution, SearchEvents, SearchResult, prepare_target, run_search
    from tuner.search.recording import plan_recording, record
    from tuner.search.verdict import Verdict
    from tuner.trial import MeasureSpec

# name -> the module that defines it, imported when the name is first used
_LAZY = {
    "BucketSearch": "tuner.search.buckets", "run_bucket_search": "tuner.search.buckets",
    "format_duration": "tuner.search.budget", "parse_duration": "tuner.search.budget",
    "OBJECTIVES": "tuner.search.objectives", "front": "tuner.search.objectives",
    "objective_values": "tuner.search.objectives", "parse_objectives": "tuner.search.objectives",
    "preferred_order": "tuner.search.objectives", "pruning_notice": "tuner.search.objectives",
    "SearchInterrupted": "tuner.search.options", "SearchOptions": "tuner.search.options",
    "SearchOutcome": "tuner.search.options", "Target": "tuner.search.options",
    "Execution": "tuner.search.pipeline", "SearchEvents": "tuner.search.pipeline",
    "SearchResult": "tuner.search.pipeline", "prepare_target": "tuner.search.pipeline",
    "run_search": "tuner.search.pipeline",
    "plan_recording": "tuner.search.recording", "record": "tuner.search.recording",
    "Verdict": "tuner.search.verdict",
    "MeasureSpec": "tuner.trial",
}

__all__ = [
    "OBJECTIVES",
    "BucketSearch",
    "Execution",
    "MeasureSpec",
    "SearchEvents",
    "SearchInterrupted",
    "SearchOptions",
    "SearchOutcome",
    "SearchResult",
    "Target",
    "Verdict",
    "format_duration",
    "front",
    "objective_values",
    "parse_duration",
    "parse_objectives",
    "plan_recording",
    "prepare_target",
    "preferred_order",
    "pruning_notice",
    "record",
    "run_bucket_search",
    "run_search",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tuner.search' has no attribute {name!r}")
