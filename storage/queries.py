"""Statements and row <-> record conversions used by `store.py` and the other table modules.
Internal to tuner.storage.

Functions here take a Session that `Store.session_scope()` opened; none opens its own.
"""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import Select, and_, delete, not_, or_, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from tuner.errors import StorageError
from tuner.keys import GraphFingerprint, Platform, Workload
from tuner.storage.models import (BestConfigRow, BestHistoryRow, GraphRow, PlatformRow, StudyRow,
                                  TrialRow, WorkloadRow, utcnow)
from tuner.storage.provenance import measurement_key
from tuner.storage.records import BestConfig, HistoryEntry, StudyInfo, TrialRecord
from tuner.storage.trust import holds_unsafe
from tuner.trial import Measurement, Status


def as_utc(value: datetime | None) -> datetime | None:
    """Refuse naive datetimes: a stored time must say which zone it is in."""
    if value is not None and value.tzinfo is None:
        raise ValueError(f"naive datetime {value.isoformat()}; pass an aware one, "
                         f"e.g. datetime.now(timezone.utc)")
    return None if value is None else value.astimezone(timezone.utc)


def insert(session: Session, model: type[Any]) -> Any:
    """An INSERT for the session's dialect that supports ON CONFLICT (SQLite and PostgreSQL)."""
    dialect = session.get_bind().dialect.name
    return (postgresql.insert if dialect == "postgresql" else sqlite.insert)(model)


def id_of(session: Session, model: type[PlatformRow] | type[WorkloadRow], key: str,
          *, fix: str) -> int:
    """The row id for a platform or workload key. Raises StorageError naming `fix` on a miss."""
    row_id = session.scalar(select(model.id).where(model.key == key))
    if row_id is None:
        raise StorageError(f"{model.__tablename__[:-1]} {key} is not stored; {fix}")
    return row_id


def platform_of(session: Session, key: str) -> PlatformRow:
    """The stored platform row for `key`. Raises StorageError on a miss."""
    row = session.scalars(select(PlatformRow).where(PlatformRow.key == key)).first()
    if row is None:
        raise StorageError(f"platform {key} is not stored; call Store.ensure_platform first")
    return row


def ensure_platform(session: Session, platform: Platform) -> bool:
    """Insert the platform unless its key is stored; returns whether it was inserted."""
    return session.execute(insert(session, PlatformRow).values(
        key=platform.key, hardware_key=platform.hardware_key, software_key=platform.software_key,
        device=platform.device, hardware=dict(platform.hardware),
        software=dict(platform.software), created_at=utcnow(),
    ).on_conflict_do_nothing(index_elements=[PlatformRow.key])
     .returning(PlatformRow.id)).first() is not None


def ensure_workload(session: Session, workload: Workload) -> bool:
    """Insert the workload and its graphs unless its key is stored (missing graphs of a stored
    workload are added; stored ones never change); returns whether the workload was new."""
    added = session.execute(insert(session, WorkloadRow).values(
        key=workload.key, name=workload.name, created_at=utcnow(),
    ).on_conflict_do_nothing(index_elements=[WorkloadRow.key])
     .returning(WorkloadRow.id)).first() is not None
    workload_id = session.scalar(select(WorkloadRow.id).where(WorkloadRow.key == workload.key))
    for graph in workload.graphs:
        session.execute(insert(session, GraphRow).values(
            workload_id=workload_id, index=graph.index, key=graph.key, num_nodes=graph.num_nodes,
            input_meta=graph.input_meta, code=graph.code,
        ).on_conflict_do_nothing(index_elements=[GraphRow.workload_id, GraphRow.index]))
    return added


def to_platform(row: PlatformRow) -> Platform:
    return Platform(key=row.key, hardware_key=row.hardware_key, software_key=row.software_key,
                    device=row.device, hardware=tuple(row.hardware.items()),
                    software=tuple(row.software.items()))


def studies() -> Select[tuple[StudyRow, str, str]]:
    """Studies joined with their workload and platform keys, oldest first."""
    return (select(StudyRow, WorkloadRow.key, PlatformRow.key)
            .join(WorkloadRow, StudyRow.workload_id == WorkloadRow.id)
            .join(PlatformRow, StudyRow.platform_id == PlatformRow.id)
            .order_by(StudyRow.id))


def to_study(row: StudyRow, workload_key: str, platform_key: str) -> StudyInfo:
    return StudyInfo(id=row.id, workload_key=workload_key, platform_key=platform_key,
                     space_hash=row.space_hash, sampler=row.sampler, seed=row.seed,
                     trials_requested=row.trials_requested, created_at=row.created_at,
                     user=row.user, host=row.host, tuner_version=row.tuner_version,
                     torch_version=row.torch_version, triton_version=row.triton_version,
                     objectives=tuple(row.objectives.split(",")), prefer=row.prefer)


def trial_values(study_id: int, record: TrialRecord) -> dict[str, Any]:
    m = record.measurement
    return dict(study_id=study_id, number=record.number, candidate_key=record.candidate_key,
                params=dict(record.params), status=Status(m.status).value,
                latency_ms=m.latency_ms, spread_ms=m.spread_ms, compile_s=m.compile_s,
                peak_mem_mb=m.peak_mem_mb, reps=m.reps, error=m.error, worker=m.worker,
                threads=m.threads, baseline_ms=m.baseline_ms, speedup=m.speedup,
                speedup_low=m.speedup_low, speedup_high=m.speedup_high, start_s=m.start_s, load_s=m.load_s,
                baseline_compile_s=m.baseline_compile_s, measure_s=m.measure_s, compile_cached=m.compile_cached,
                started_at=as_utc(record.started_at), finished_at=as_utc(record.finished_at))


def drop_cancelled(session: Session, study_id: int, record: TrialRecord) -> None:
    """Delete the study's cancelled trials that `record` would collide with: the same
    number or the same candidate key."""
    session.execute(delete(TrialRow).where(
        TrialRow.study_id == study_id, TrialRow.status == Status.CANCELLED.value,
        or_(TrialRow.number == record.number, TrialRow.candidate_key == record.candidate_key)))


def to_trial(row: TrialRow) -> TrialRecord:
    measurement = Measurement(status=Status(row.status), latency_ms=row.latency_ms,
                              spread_ms=row.spread_ms, compile_s=row.compile_s,
                              peak_mem_mb=row.peak_mem_mb, reps=row.reps, error=row.error,
                              worker=row.worker, threads=row.threads, baseline_ms=row.baseline_ms,
                              speedup=row.speedup, speedup_low=row.speedup_low,
                              speedup_high=row.speedup_high, start_s=row.start_s, load_s=row.load_s,
                              baseline_compile_s=row.baseline_compile_s, measure_s=row.measure_s,
                              compile_cached=row.compile_cached)
    return TrialRecord(number=row.number, candidate_key=row.candidate_key, params=row.params,
                       measurement=measurement, started_at=row.started_at,
                       finished_at=row.finished_at)


_BEST_FIELDS = ("graph_key", "params", "is_default", "speedup", "ci_low", "ci_high", "rounds",
                "latency_ms", "baseline_ms", "workload_key", "study_id", "user", "host",
                "tuner_version", "torch_version", "triton_version", "source", "origin",
                "eager", "unfrozen_params", "unfrozen_speedup", "unfrozen_eager", "search_speedup", "unsafe",
                "runtime", "stability")


def _best_values(best: BestConfig) -> dict[str, Any]:
    """The columns of a best config shared by best_configs and best_history, as stored."""
    values = {name: getattr(best, name) for name in _BEST_FIELDS}
    values.update(params=dict(best.params), eager=bool(best.eager), unfrozen_eager=bool(best.unfrozen_eager),
                  unsafe=bool(best.unsafe), runtime=dict(best.runtime),
                  stability=None if best.stability is None else float(best.stability),
                  unfrozen_params=None if best.unfrozen_params is None else dict(best.unfrozen_params))
    return values


def versions_of(platform: PlatformRow | Platform) -> tuple[str, str]:
    """The (torch, triton) versions a platform's software records ("" when absent)."""
    software = dict(platform.software)
    return str(software.get("torch", "")), str(software.get("triton", ""))


def upsert_best(session: Session, best: BestConfig, platform_id: int, *,
                installed: tuple[str, str] | None = None) -> bool:
    """Insert, or replace the stored row when `best` wins; one atomic statement.

    Versions first: when `best` and the stored row were measured under different
    (torch, triton) versions, a row that matches `installed` is never replaced by one that
    does not, and one that does not is replaced by one that does. Otherwise evidence
    decides: a higher `ci_low`; on an equal `ci_low`, a higher `speedup`; and a
    default-is-best row refreshes an older default-is-best row. `installed=None` compares
    versions on evidence alone. Returns whether `best` was stored.
    """
    values = _best_values(best)
    values.update(platform_id=platform_id,
                  created_at=as_utc(best.created_at) or utcnow())
    statement = insert(session, BestConfigRow).values(**values)
    new, old = statement.excluded, BestConfigRow
    evidence = or_(new.ci_low > old.ci_low,
                   and_(new.ci_low == old.ci_low, new.speedup > old.speedup),
                   and_(new.is_default, old.is_default, new.created_at > old.created_at))
    same_versions = and_(old.torch_version == best.torch_version,
                         old.triton_version == best.triton_version)
    if installed is None:
        wins = evidence
    elif (best.torch_version, best.triton_version) == tuple(installed):
        wins = or_(not_(same_versions), evidence)
    else:
        old_installed = and_(old.torch_version == installed[0], old.triton_version == installed[1])
        wins = and_(evidence, or_(same_versions, not_(old_installed)))
    statement = statement.on_conflict_do_update(
        index_elements=[BestConfigRow.graph_key, BestConfigRow.platform_id],
        set_={name: new[name] for name in values}, where=wins,
    ).returning(BestConfigRow.id)
    return session.execute(statement).first() is not None


def save_best(session: Session, best: BestConfig, platform: PlatformRow, *,
              installed: tuple[str, str] | None) -> tuple[bool, bool]:
    """Offer `best` for its graph on `platform`, and record the offer in history, in the
    caller's transaction. Returns (stored as the best, new to this database's history)."""
    # A row whose knobs include an unsafe one is unsafe whatever its search said (tuner.storage.trust).
    unsafe = best.unsafe or any(holds_unsafe(p, platform.device) for p in (best.params, best.unfrozen_params))
    best = replace(best, platform_key=platform.key, created_at=as_utc(best.created_at) or utcnow(), unsafe=unsafe)
    key = measurement_key(best)
    if session.scalar(select(BestHistoryRow.id).where(BestHistoryRow.measurement_key == key)):
        return False, False          # this measurement was offered before: nothing changes
    stored = upsert_best(session, best, platform.id, installed=installed)
    fields = _best_values(best)
    session.execute(insert(session, BestHistoryRow).values(
        **fields, platform_id=platform.id, created_at=best.created_at,
        recorded_at=utcnow(), measurement_key=key, kept=stored,
    ).on_conflict_do_nothing(index_elements=[BestHistoryRow.measurement_key]))
    return stored, True


def to_best(row: BestConfigRow | BestHistoryRow, platform_key: str) -> BestConfig:
    fields = {name: getattr(row, name) for name in _BEST_FIELDS}
    return BestConfig(platform_key=platform_key, created_at=row.created_at, **fields)


def to_history(row: BestHistoryRow, platform_key: str) -> HistoryEntry:
    return HistoryEntry(best=to_best(row, platform_key), kept=row.kept,
                        recorded_at=row.recorded_at, measurement_key=row.measurement_key)


def bucket_configs(session: Session, platform_key: str) -> list[tuple[str, GraphFingerprint, BestConfig]]:
    """`Store.bucket_configs`: one row per graph key, oldest workload first."""
    statement = (select(WorkloadRow.name, GraphRow, BestConfigRow)
                 .join(GraphRow, GraphRow.workload_id == WorkloadRow.id)
                 .join(BestConfigRow, BestConfigRow.graph_key == GraphRow.key)
                 .join(PlatformRow, BestConfigRow.platform_id == PlatformRow.id)
                 .where(PlatformRow.key == platform_key, WorkloadRow.name.like("%]"))
                 .order_by(WorkloadRow.id, GraphRow.index))
    found: dict[str, tuple[str, GraphFingerprint, BestConfig]] = {}
    for name, graph, best in session.execute(statement):
        found.setdefault(graph.key, (name, to_graph(graph), to_best(best, platform_key)))
    return list(found.values())


def to_graph(row: GraphRow) -> GraphFingerprint:
    return GraphFingerprint(key=row.key, index=row.index, num_nodes=row.num_nodes,
                            input_meta=row.input_meta, code=row.code)
