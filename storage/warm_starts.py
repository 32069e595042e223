"""Stored best configs a new search may start from (warm starts), read through a Store.

`tuner.search.priors` chooses among them: the configs of the same workload on other platforms,
and those of the nearest other workloads on this platform. A default-is-best or eager
verdict carries no knobs to try, so neither is returned. Every function runs in one
`Store.session_scope()` and returns frozen records.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import select

from tuner.storage.models import BestConfigRow, GraphRow, PlatformRow, WorkloadRow
from tuner.storage.queries import to_best
from tuner.storage.records import BestConfig

if TYPE_CHECKING:
    from tuner.storage.store import Store

# Strongest evidence first: the interval's lower bound, then the speedup, then the newest.
_STRONGEST = (BestConfigRow.ci_low.desc(), BestConfigRow.speedup.desc(), BestConfigRow.created_at.desc(),
              BestConfigRow.id)


@dataclass(frozen=True)
class TunedWorkload:
    """A workload with a kept config on one platform: its graphs' canonical text (in Dynamo
    order) and its strongest kept config there."""

    key: str
    name: str
    codes: tuple[str, ...]
    best: BestConfig


def other_platform_bests(store: "Store", workload_key: str, platform_key: str, *,
                         device: str) -> list[BestConfig]:
    """The kept configs of this workload's graphs on the other platforms of `device`,
    strongest first (ci_low, then speedup, then newest); empty when there are none."""
    statement = (select(BestConfigRow, PlatformRow.key).join(PlatformRow)
                 .where(BestConfigRow.workload_key == workload_key, PlatformRow.key != platform_key,
                        PlatformRow.device == device, BestConfigRow.is_default.is_(False),
                        BestConfigRow.eager.is_(False))
                 .order_by(*_STRONGEST))
    with store.session_scope() as session:
        return [to_best(row, key) for row, key in session.execute(statement)]


def tuned_workloads(store: "Store", platform_key: str, *, exclude: str) -> list[TunedWorkload]:
    """Every stored workload but `exclude` with a kept config on this platform, each with its
    graphs and its strongest config there, oldest workload first; empty when there are none."""
    statement = (select(BestConfigRow).join(PlatformRow)
                 .where(PlatformRow.key == platform_key, BestConfigRow.workload_key != exclude,
                        BestConfigRow.is_default.is_(False), BestConfigRow.eager.is_(False))
                 .order_by(*_STRONGEST))
    with store.session_scope() as session:
        strongest: dict[str, BestConfig] = {}
        for row in session.scalars(statement):
            strongest.setdefault(row.workload_key, to_best(row, platform_key))
        graphs = (select(WorkloadRow.key, WorkloadRow.name, GraphRow.code)
                  .join(GraphRow, GraphRow.workload_id == WorkloadRow.id)
                  .where(WorkloadRow.key.in_(list(strongest)))
                  .order_by(WorkloadRow.id, GraphRow.index))
        found: dict[str, tuple[str, list[str]]] = {}
        for key, name, code in session.execute(graphs):
            found.setdefault(key, (name, []))[1].append(code)
    return [TunedWorkload(key=key, name=name, codes=tuple(codes), best=strongest[key])
            for key, (name, codes) in found.items()]
