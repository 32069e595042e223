"""Recorded spaces: every point of a small space measured once, for real, as a replayable table.

`tuner record-space` plans (`plan_recording`: the model file is loaded, the space enumerated
and refused when it is too large) and then measures (`record`: each point through the same
executor and trial protocol as a search, TrialRequest -> Measurement, paired against the
default compile in its own process). The table is what `ReplayExecutor.from_file` answers
searches from, and what `bench/search_efficiency.py` scores samplers on:

    {"format": 1, "model": "mlp", "workload": KEY, "platform": {key, device, hardware, software,
     description}, "measure": {...MeasureSpec}, "tuner_version": "...", "space": SearchSpace.to_json(),
     "rows": [{"params": Candidate.as_dict(), "measurement": Measurement.to_json()}, ...]}

Nothing here writes the database.
"""
from __future__ import annotations

import datetime as dt
import json
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from tuner.errors import TunerError, UsageError
from tuner.keys import Platform, Workload, platform_from_parts
from tuner.search.options import Target
from tuner.search_spaces import MAX_RECORDED_POINTS, Knob, SearchSpace
from tuner.storage import TrialRecord
from tuner.trial import Candidate, MeasureSpec, Measurement, TrialRequest
from tuner.version import __version__
from tuner.workers import Executor

__all__ = ["MAX_POINTS", "TABLE_FORMAT", "RecordedTable", "RecordingPlan", "plan_recording", "read_table",
           "record", "space_from_json"]

MAX_POINTS = MAX_RECORDED_POINTS
TABLE_FORMAT = 1


@dataclass(frozen=True)
class RecordedTable:
    """A recorded space: one measurement per distinct candidate, in enumeration order (defaults first).

    `platform` is the platform the rows were measured on; `measure` the spec they shared.
    """

    model: str
    workload_key: str
    platform: Platform
    space: SearchSpace
    rows: tuple[tuple[Candidate, Measurement], ...]
    measure: Mapping[str, Any]
    tuner_version: str = __version__

    def objectives(self) -> dict[str, float | None]:
        """Candidate.key -> its true objective (`Measurement.objective`; None for a failure)."""
        return {candidate.key: measurement.objective for candidate, measurement in self.rows}

    def to_json(self) -> dict[str, Any]:
        platform = {"key": self.platform.key, "device": self.platform.device, "hardware": dict(self.platform.hardware),
                    "software": dict(self.platform.software), "description": self.platform.describe()}
        return {"format": TABLE_FORMAT, "model": self.model, "workload": self.workload_key, "platform": platform,
                "measure": dict(self.measure), "tuner_version": self.tuner_version, "space": self.space.to_json(),
                "rows": [{"params": c.as_dict(), "measurement": m.to_json()} for c, m in self.rows]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "RecordedTable":
        """Raises KeyError, TypeError or ValueError for a malformed table (`read_table` words it)."""
        if data["format"] != TABLE_FORMAT:
            raise ValueError(f"format {data['format']!r} is not {TABLE_FORMAT}")
        p = data["platform"]
        platform = platform_from_parts(p["device"], p["hardware"], p["software"])
        rows = tuple((Candidate.from_dict(r["params"]), Measurement.from_json(r["measurement"])) for r in data["rows"])
        return cls(model=data["model"], workload_key=data["workload"], platform=platform,
                   space=space_from_json(data["space"]), rows=rows, measure=dict(data.get("measure", {})),
                   tuner_version=data.get("tuner_version", ""))

    def target(self) -> Target:
        """What a search replayed from this table tunes: its workload (by key; no graphs, a
        replay compiles nothing), platform and space."""
        return Target(workload=Workload(key=self.workload_key, name=self.model, graphs=()),
                      platform=self.platform, space=self.space)

    def write(self, path: str | Path) -> None:
        """Write the table as JSON, one line per row (small, and diffs read point by point)."""
        data = self.to_json()
        rows = data.pop("rows")
        head = json.dumps(data, indent=1)[:-2]          # without its closing "\n}"
        body = ",\n".join("  " + json.dumps(row) for row in rows)
        Path(path).write_text(f'{head},\n "rows": [\n{body}\n ]\n}}\n')


def read_table(path: str | Path) -> RecordedTable:
    """The table at `path`; TunerError (one line, naming the fix) for a missing or malformed file."""
    try:
        return RecordedTable.from_json(json.loads(Path(path).read_text()))
    except FileNotFoundError:
        raise TunerError(f"recorded table {path} not found; record one with: tuner record-space MODEL "
                         f"--space FILE --out {path}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise TunerError(f"recorded table {path} is malformed ({type(exc).__name__}: {exc}); "
                         f"record it again with tuner record-space") from None


def space_from_json(data: Mapping[str, Any]) -> SearchSpace:
    """The SearchSpace that `SearchSpace.to_json` wrote, as it was (not re-resolved against this torch)."""
    knobs = []
    for entry in data["knobs"]:
        fields = dict(entry)
        fields["choices"] = tuple(fields.get("choices") or ())
        fields["parent"] = tuple(fields["parent"]) if fields.get("parent") is not None else None
        knobs.append(Knob(**fields))
    return SearchSpace(name=data["name"], device=data["device"], knobs=tuple(knobs),
                       notices=tuple(data.get("notices", ())))


@dataclass(frozen=True)
class RecordingPlan:
    """What `record` will measure: the target (workload, platform, space), its points, the spec."""

    target: Target
    points: tuple[Candidate, ...]
    spec: MeasureSpec


def plan_recording(spec: MeasureSpec, *, space_path: str, limit: int = MAX_POINTS) -> RecordingPlan:
    """Load and check the model file (`tuner.search.prepare_target`) and enumerate the space.

    Raises ModelFileError or SpaceError as a search would, and UsageError, before anything is
    measured, when the space has more than `limit` points.
    """
    from tuner.search.pipeline import prepare_target

    target = prepare_target(spec.model_path, space_path=space_path, threads=spec.threads, seed=spec.seed)
    points = target.space.points(limit)
    if len(points) > limit:
        raise UsageError(f"space {space_path} has more than {limit} points and record-space measures every one; "
                         f"pass a smaller --space file (fewer knobs, choices instead of ranges)")
    # Absolute: trial processes run in their own scratch folders (and Ray nodes elsewhere).
    spec = replace(spec, model_path=str(Path(spec.model_path).expanduser().resolve()),
                   platform_key=target.platform.key)
    return RecordingPlan(target=target, points=tuple(points), spec=spec)


def record(plan: RecordingPlan, *, executor: Executor,
           on_result: Callable[[TrialRecord], None] | None = None) -> RecordedTable:
    """Measure every point of `plan` once on `executor` (up to its capacity at once) and return
    the table, rows in the order of `plan.points`. `on_result` hears each trial as it finishes.
    Failures are rows like any other. The caller owns the executor (closing it stops whatever
    is still in flight)."""
    measured: dict[int, Measurement] = {}
    queue = deque(enumerate(plan.points))
    while queue or executor.pending():
        while queue and executor.pending() < executor.capacity:
            number, candidate = queue.popleft()
            executor.submit(TrialRequest(spec=plan.spec, params=candidate.params, number=number))
        request, measurement = executor.next_result()
        measured[request.number] = measurement
        if on_result is not None:
            on_result(TrialRecord(number=request.number, candidate_key=request.candidate.key,
                                  params=request.candidate.as_dict(), measurement=measurement,
                                  finished_at=dt.datetime.now(dt.timezone.utc)))
    spec = replace(plan.spec, model_path=Path(plan.spec.model_path).name, platform_key=None)
    return RecordedTable(model=plan.target.workload.name, workload_key=plan.target.workload.key,
                         platform=plan.target.platform, space=plan.target.space,
                         rows=tuple((c, measured[i]) for i, c in enumerate(plan.points)), measure=spec.to_json())
