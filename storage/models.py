"""SQLAlchemy 2.0 ORM models: the tables of a tuner database.

These rows never leave `tuner.storage`; `store.py` turns them into the frozen records
of `records.py`. Every JSON column holds plain JSON values (never pickles), and every
timestamp is timezone-aware UTC on the way in and on the way out.
Migrations under `alembic/versions` restate these tables by hand: change both together.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (JSON, Boolean, DateTime, Dialect, Float, ForeignKey, Index, Integer,
                        MetaData, String, Text, TypeDecorator, UniqueConstraint, false, text)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Deterministic constraint names, so migrations (and SQLite batch mode) can refer to them.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every backend.

    PostgreSQL stores `timestamptz`; SQLite has no time zones, so the value is stored as
    naive UTC and read back with `tzinfo=UTC`. Naive datetimes are refused before binding
    (see `queries.as_utc`).
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        value = value.astimezone(timezone.utc)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)


# None is SQL NULL, not the JSON text 'null' (JSON()'s default), in columns that may be empty.
NULLABLE_JSON = JSON(none_as_null=True)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {datetime: UTCDateTime(), dict[str, Any]: JSON()}


class PlatformRow(Base):
    __tablename__ = "platforms"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(128), unique=True)
    hardware_key: Mapped[str] = mapped_column(String(128), index=True)
    software_key: Mapped[str] = mapped_column(String(128))
    device: Mapped[str] = mapped_column(String(16))
    hardware: Mapped[dict[str, Any]]
    software: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class WorkloadRow(Base):
    __tablename__ = "workloads"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(128), unique=True)
    name: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class GraphRow(Base):
    """One Dynamo graph of one workload. The same graph key may recur across workloads."""

    __tablename__ = "graphs"
    __table_args__ = (UniqueConstraint("workload_id", "index"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id", ondelete="CASCADE"))
    index: Mapped[int] = mapped_column(Integer)
    key: Mapped[str] = mapped_column(String(128), index=True)
    num_nodes: Mapped[int] = mapped_column(Integer)
    input_meta: Mapped[str] = mapped_column(Text)
    code: Mapped[str] = mapped_column(Text)


class StudyRow(Base):
    __tablename__ = "studies"
    __table_args__ = (Index(None, "workload_id", "platform_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id", ondelete="CASCADE"))
    platform_id: Mapped[int] = mapped_column(ForeignKey("platforms.id", ondelete="CASCADE"))
    space_hash: Mapped[str] = mapped_column(String(128))
    sampler: Mapped[str] = mapped_column(String(64))
    seed: Mapped[int | None] = mapped_column(Integer)
    trials_requested: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    user: Mapped[str] = mapped_column(String(255))
    host: Mapped[str] = mapped_column(String(255))
    tuner_version: Mapped[str] = mapped_column(String(64))
    torch_version: Mapped[str] = mapped_column(String(128), server_default="")
    triton_version: Mapped[str] = mapped_column(String(128), server_default="")
    objectives: Mapped[str] = mapped_column(String(128), server_default="latency")   # comma-separated names
    prefer: Mapped[str] = mapped_column(String(64), server_default="latency")


class TrialRow(Base):
    """One measured candidate. A number, and a candidate, appear at most once per study."""

    __tablename__ = "trials"
    __table_args__ = (UniqueConstraint("study_id", "number"),
                      UniqueConstraint("study_id", "candidate_key"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    candidate_key: Mapped[str] = mapped_column(String(128))
    params: Mapped[dict[str, Any]]
    status: Mapped[str] = mapped_column(String(32))
    latency_ms: Mapped[float | None] = mapped_column(Float)
    spread_ms: Mapped[float | None] = mapped_column(Float)
    compile_s: Mapped[float | None] = mapped_column(Float)
    peak_mem_mb: Mapped[float | None] = mapped_column(Float)
    reps: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    worker: Mapped[str | None] = mapped_column(String(255))
    threads: Mapped[int | None] = mapped_column(Integer)
    # Paired against Inductor's defaults in the trial process (NULL for trials before 0004):
    baseline_ms: Mapped[float | None] = mapped_column(Float)
    speedup: Mapped[float | None] = mapped_column(Float)
    speedup_low: Mapped[float | None] = mapped_column(Float)
    speedup_high: Mapped[float | None] = mapped_column(Float)
    # Where the trial's time went, and whether its compile was a cache hit (NULL for trials before 0008):
    start_s: Mapped[float | None] = mapped_column(Float)
    load_s: Mapped[float | None] = mapped_column(Float)
    baseline_compile_s: Mapped[float | None] = mapped_column(Float)
    measure_s: Mapped[float | None] = mapped_column(Float)
    compile_cached: Mapped[bool | None] = mapped_column(Boolean)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]


class BestConfigRow(Base):
    """The kept best config per (graph, platform), with its evidence and provenance."""

    __tablename__ = "best_configs"
    __table_args__ = (UniqueConstraint("graph_key", "platform_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    graph_key: Mapped[str] = mapped_column(String(128))
    platform_id: Mapped[int] = mapped_column(ForeignKey("platforms.id", ondelete="CASCADE"),
                                             index=True)
    params: Mapped[dict[str, Any]]
    is_default: Mapped[bool]
    speedup: Mapped[float] = mapped_column(Float)
    ci_low: Mapped[float] = mapped_column(Float)
    ci_high: Mapped[float] = mapped_column(Float)
    rounds: Mapped[int] = mapped_column(Integer)
    latency_ms: Mapped[float | None] = mapped_column(Float)
    baseline_ms: Mapped[float | None] = mapped_column(Float)
    workload_key: Mapped[str] = mapped_column(String(128))
    study_id: Mapped[int | None] = mapped_column(ForeignKey("studies.id", ondelete="SET NULL"))
    user: Mapped[str] = mapped_column(String(255))
    host: Mapped[str] = mapped_column(String(255))
    tuner_version: Mapped[str] = mapped_column(String(64))
    torch_version: Mapped[str] = mapped_column(String(128))
    triton_version: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)      # when it was measured
    source: Mapped[str] = mapped_column(String(16), server_default="search")   # search|import|merge
    origin: Mapped[str] = mapped_column(String(512), server_default="")  # file name or safe URL
    eager: Mapped[bool] = mapped_column(Boolean, server_default=false())   # run uncompiled
    unfrozen_params: Mapped[dict[str, Any] | None] = mapped_column(NULLABLE_JSON)
    unfrozen_speedup: Mapped[float | None] = mapped_column(Float)
    unfrozen_eager: Mapped[bool] = mapped_column(Boolean, server_default=false())
    search_speedup: Mapped[float | None] = mapped_column(Float)
    unsafe: Mapped[bool] = mapped_column(Boolean, server_default=false())   # its search ran with --unsafe
    runtime: Mapped[dict[str, Any]] = mapped_column(server_default=text("'{}'"))   # runtime knobs (0009)
    stability: Mapped[float | None] = mapped_column(Float)   # share of resamples it won or tied (0009)


class BestHistoryRow(Base):
    """Every measurement offered as a best config (search, import, merge), kept or not.

    Written in the transaction of the best-config upsert; `kept` says whether it became the
    best. `measurement_key` identifies the measurement, so saving or importing it again adds
    nothing.
    """

    __tablename__ = "best_history"
    __table_args__ = (Index(None, "graph_key", "platform_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    measurement_key: Mapped[str] = mapped_column(String(64), unique=True)
    graph_key: Mapped[str] = mapped_column(String(128))
    platform_id: Mapped[int] = mapped_column(ForeignKey("platforms.id", ondelete="CASCADE"))
    workload_key: Mapped[str] = mapped_column(String(128))
    params: Mapped[dict[str, Any]]
    is_default: Mapped[bool]
    speedup: Mapped[float] = mapped_column(Float)
    ci_low: Mapped[float] = mapped_column(Float)
    ci_high: Mapped[float] = mapped_column(Float)
    rounds: Mapped[int] = mapped_column(Integer)
    latency_ms: Mapped[float | None] = mapped_column(Float)
    baseline_ms: Mapped[float | None] = mapped_column(Float)
    study_id: Mapped[int | None] = mapped_column(ForeignKey("studies.id", ondelete="SET NULL"))
    user: Mapped[str] = mapped_column(String(255))
    host: Mapped[str] = mapped_column(String(255))
    tuner_version: Mapped[str] = mapped_column(String(64))
    torch_version: Mapped[str] = mapped_column(String(128))
    triton_version: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime]                 # when it was measured
    recorded_at: Mapped[datetime] = mapped_column(default=utcnow)   # when this database got it
    source: Mapped[str] = mapped_column(String(16))
    origin: Mapped[str] = mapped_column(String(512))
    kept: Mapped[bool]
    eager: Mapped[bool] = mapped_column(Boolean, server_default=false())
    unfrozen_params: Mapped[dict[str, Any] | None] = mapped_column(NULLABLE_JSON)
    unfrozen_speedup: Mapped[float | None] = mapped_column(Float)
    unfrozen_eager: Mapped[bool] = mapped_column(Boolean, server_default=false())
    search_speedup: Mapped[float | None] = mapped_column(Float)
    unsafe: Mapped[bool] = mapped_column(Boolean, server_default=false())   # its search ran with --unsafe
    runtime: Mapped[dict[str, Any]] = mapped_column(server_default=text("'{}'"))   # runtime knobs (0009)
    stability: Mapped[float | None] = mapped_column(Float)   # share of resamples it won or tied (0009)


class KernelConfigRow(Base):
    """The kept tile config of one Triton kernel (`tuner.autotune`) per (kernel key, platform).

    The kernel key hashes the kernel's source, its declared space and its key arguments with
    the dtypes of its tensor arguments. `config` holds JSON scalars only, under names of that
    space or Triton's launch options. Replaced only by a faster measurement, or by one under
    other versions (see `tuner.storage.kernel_table.save_kernel_config`).
    """

    __tablename__ = "kernel_configs"
    __table_args__ = (UniqueConstraint("kernel_key", "platform_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kernel_key: Mapped[str] = mapped_column(String(64))
    platform_id: Mapped[int] = mapped_column(ForeignKey("platforms.id", ondelete="CASCADE"),
                                             index=True)
    kernel_name: Mapped[str] = mapped_column(String(255))
    key_args: Mapped[dict[str, Any]]                 # the key arguments' values, for display
    dtypes: Mapped[str] = mapped_column(String(1024))   # the tensor arguments' dtypes, in order
    config: Mapped[dict[str, Any]]
    latency_ms: Mapped[float] = mapped_column(Float)
    spread_ms: Mapped[float] = mapped_column(Float)
    configs_tried: Mapped[int] = mapped_column(Integer)
    space_size: Mapped[int] = mapped_column(Integer)
    source: Mapped[str] = mapped_column(String(16), server_default="search")
    user: Mapped[str] = mapped_column(String(255))
    host: Mapped[str] = mapped_column(String(255))
    tuner_version: Mapped[str] = mapped_column(String(64))
    torch_version: Mapped[str] = mapped_column(String(128))
    triton_version: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)      # when it was measured


class FailureRuleRow(Base):
    """A knob value, or a pair of them, that always failed to compile on one platform.

    `knobs` holds one or two knob -> value entries; `rule_key` hashes them (canonical JSON).
    `failures` counts the compile errors behind the rule (the larger count, after a merge).
    Rules learned here are recomputed from the trials (tuner.storage.failures.refresh_rules).
    """

    __tablename__ = "failure_rules"
    __table_args__ = (UniqueConstraint("platform_id", "rule_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    platform_id: Mapped[int] = mapped_column(ForeignKey("platforms.id", ondelete="CASCADE"))
    rule_key: Mapped[str] = mapped_column(String(64))
    knobs: Mapped[dict[str, Any]]
    failures: Mapped[int] = mapped_column(Integer)
    source: Mapped[str] = mapped_column(String(16), server_default="search")   # search|import|merge
    origin: Mapped[str] = mapped_column(String(512), server_default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
