"""Every stored trial of a device as a labelled example, for the cost model (`tuner.search.cost_model`).

A trial is knob values (its Candidate params) measured on one workload and platform; the cost
model encodes the params against the space being searched and weighs each example by how
near its workload and platform are. Every function runs in one `Store.session_scope()` and
returns frozen records.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import select

from tuner.storage.models import GraphRow, PlatformRow, StudyRow, TrialRow, WorkloadRow
from tuner.storage.queries import to_trial
from tuner.trial import Measurement

if TYPE_CHECKING:
    from tuner.storage.store import Store

# The newest trials only: encoding them costs about 1 ms each (the built-in CPU space), at search start.
MAX_EXAMPLES = 5_000


@dataclass(frozen=True)
class LabelledTrial:
    """One stored trial with the workload and platform it was measured on."""

    workload_key: str
    platform_key: str
    params: dict
    measurement: Measurement


def device_trials(store: "Store", device: str, *, limit: int = MAX_EXAMPLES) -> list[LabelledTrial]:
    """The newest `limit` trials of every study on a platform of `device` (oldest of them
    first), whatever their status; empty on a fresh database."""
    statement = (select(TrialRow, WorkloadRow.key, PlatformRow.key)
                 .join(StudyRow, TrialRow.study_id == StudyRow.id)
                 .join(WorkloadRow, StudyRow.workload_id == WorkloadRow.id)
                 .join(PlatformRow, StudyRow.platform_id == PlatformRow.id)
                 .where(PlatformRow.device == device)
                 .order_by(TrialRow.id.desc()).limit(limit))
    with store.session_scope() as session:
        found = [LabelledTrial(workload_key=wkey, platform_key=pkey, params=dict(row.params),
                               measurement=to_trial(row).measurement)
                 for row, wkey, pkey in session.execute(statement)]
    return found[::-1]


def workload_codes(store: "Store", keys: list[str]) -> dict[str, tuple[str, ...]]:
    """The canonical text of each workload's graphs (Dynamo order), by workload key; a workload
    stored without graphs (a replayed table) maps to ()."""
    statement = (select(WorkloadRow.key, GraphRow.code)
                 .outerjoin(GraphRow, GraphRow.workload_id == WorkloadRow.id)
                 .where(WorkloadRow.key.in_(keys)).order_by(WorkloadRow.id, GraphRow.index))
    codes: dict[str, list[str]] = {}
    with store.session_scope() as session:
        for key, code in session.execute(statement):
            codes.setdefault(key, [])
            if code is not None:
                codes[key].append(code)
    return {key: tuple(found) for key, found in codes.items()}
