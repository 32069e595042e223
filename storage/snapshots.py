"""A Snapshot inside a Store's session: the selection an export or merge reads, and applying one.

What `tuner db export` writes and `tuner db merge` reads is `read`; what `tuner db import` and
`tuner db merge` write is `apply`, in the caller's one transaction, so an import is all or
nothing. Each table keeps its own rules: best configs go through `queries.save_best`, failure
rules through `failure_rows`, kernel configs through `kernel_rows`. Validation is the caller's
(`tuner.storage.exchange`).
"""
from __future__ import annotations

from dataclasses import replace

from sqlalchemy import select
from sqlalchemy.orm import Session

from tuner.keys import Workload
from tuner.storage import failure_rows, kernel_rows, queries as q
from tuner.storage.models import BestConfigRow, GraphRow, PlatformRow, WorkloadRow
from tuner.storage.records import ApplyReport, Snapshot


def read(session: Session, *, workload_keys: list[str] | None,
           platform_keys: list[str] | None) -> Snapshot:
    """`Store.snapshot` in an open session: the best configs, then the selection's failure
    rules and kernel configs (`failure_rows.with_rules`, `kernel_rows.with_kernels`)."""
    found = _bests(session, workload_keys=workload_keys, platform_keys=platform_keys)
    for add in (failure_rows.with_rules, kernel_rows.with_kernels):
        found = add(session, found, workload_keys=workload_keys, platform_keys=platform_keys)
    return found


def _bests(session: Session, *, workload_keys: list[str] | None,
           platform_keys: list[str] | None) -> Snapshot:
    """Best configs on the platforms, of graphs of the workloads (None: all), with their
    platforms and the workloads (of the selection) that contain their graphs."""
    workload_rows = select(WorkloadRow).order_by(WorkloadRow.id)
    if workload_keys is not None:
        workload_rows = workload_rows.where(WorkloadRow.key.in_(workload_keys))
    workloads = list(session.scalars(workload_rows))
    graphs: dict[int, list[GraphRow]] = {w.id: [] for w in workloads}
    for graph in session.scalars(select(GraphRow).where(GraphRow.workload_id.in_(list(graphs)))
                                 .order_by(GraphRow.workload_id, GraphRow.index)):
        graphs[graph.workload_id].append(graph)
    statement = (select(BestConfigRow, PlatformRow).join(PlatformRow)
                 .order_by(PlatformRow.id, BestConfigRow.graph_key))
    if platform_keys is not None:
        statement = statement.where(PlatformRow.key.in_(platform_keys))
    if workload_keys is not None:
        wanted = {g.key for rows in graphs.values() for g in rows}
        statement = statement.where(BestConfigRow.graph_key.in_(wanted))
    bests, platforms = [], {}
    for best, platform in session.execute(statement):
        bests.append(q.to_best(best, platform.key))
        platforms.setdefault(platform.key, platform)
    tuned = {b.graph_key for b in bests}
    chosen = [w for w in workloads if any(g.key in tuned for g in graphs[w.id])]
    return Snapshot(
        platforms=tuple(q.to_platform(p) for p in platforms.values()),
        workloads=tuple(Workload(key=w.key, name=w.name,
                                 graphs=tuple(q.to_graph(g) for g in graphs[w.id])) for w in chosen),
        bests=tuple(bests))


def apply(session: Session, snapshot: Snapshot, *, source: str, origin: str) -> ApplyReport:
    """`Store.apply_snapshot` in an open write transaction (its contract is there; the caller
    checked `source`)."""
    platforms_added = sum(q.ensure_platform(session, p) for p in snapshot.platforms)
    workloads_added = sum(q.ensure_workload(session, w) for w in snapshot.workloads)
    rows: dict[str, PlatformRow] = {}
    stored = new = 0
    for best in snapshot.bests:
        platform = rows.get(best.platform_key) or q.platform_of(session, best.platform_key)
        rows[best.platform_key] = platform
        best = replace(best, study_id=None, source=source, origin=origin[:512])
        won, fresh = q.save_best(session, best, platform, installed=q.versions_of(platform))
        stored, new = stored + won, new + fresh
    rules = failure_rows.apply_rules(session, snapshot.rules, source=source, origin=origin)
    kernels = sum(kernel_rows.save_in(session, replace(k, source=source)) for k in snapshot.kernels)
    return ApplyReport(records=len(snapshot.bests), stored=stored,
                       not_better=new - stored, already_present=len(snapshot.bests) - new,
                       platforms_added=platforms_added, workloads_added=workloads_added,
                       rules=len(snapshot.rules), rules_stored=rules,
                       kernels=len(snapshot.kernels), kernels_stored=kernels)
