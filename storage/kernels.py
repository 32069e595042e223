"""Triton kernel tile configs: the `kernel_configs` table, read and written through a Store.

`tuner.autotune` looks a kernel up here before it benchmarks anything, and saves the
winner of a search. Every function runs in one `Store.session_scope()`, so driver errors
leave as StorageError naming the database, and returns frozen `KernelConfig` records.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Union

from sqlalchemy import or_, select

from tuner.storage.models import KernelConfigRow, PlatformRow, utcnow
from tuner.storage.queries import as_utc, insert, platform_of
from tuner.storage.store import Store

Scalar = Union[bool, int, float, str]
SOURCES = ("search", "import", "merge")


@dataclass(frozen=True)
class KernelConfig:
    """One kernel's kept tile config on one platform, with its evidence and provenance."""

    kernel_key: str
    kernel_name: str
    platform_key: str
    key_args: tuple[tuple[str, Scalar], ...]     # the key arguments' values, for display
    dtypes: str                                  # the tensor arguments' dtypes, comma-separated
    config: tuple[tuple[str, Scalar], ...]       # block sizes and Triton launch options
    latency_ms: float
    spread_ms: float
    configs_tried: int
    space_size: int
    user: str
    host: str
    tuner_version: str
    torch_version: str
    triton_version: str
    created_at: datetime | None = None           # None: now, when saved
    source: str = "search"

    def config_dict(self) -> dict[str, Scalar]:
        return dict(self.config)


_FIELDS = ("kernel_key", "kernel_name", "dtypes", "latency_ms", "spread_ms", "configs_tried",
           "space_size", "user", "host", "tuner_version", "torch_version", "triton_version",
           "source")


def check_scalars(what: str, items: tuple[tuple[str, Any], ...]) -> None:
    """Raise ValueError unless every name is a string and every value a JSON scalar
    (a bool, an int, a finite float or a string)."""
    for name, value in items:
        ok = isinstance(value, (bool, int, str)) or (isinstance(value, float) and math.isfinite(value))
        if not isinstance(name, str) or not ok:
            raise ValueError(f"{what} {name!r}={value!r} is not a JSON scalar; kernel configs "
                             f"hold bools, ints, finite floats and strings only")


def find_kernel_config(store: Store, kernel_key: str, platform_key: str) -> KernelConfig | None:
    """The kept config for this kernel key on exactly this platform; None on a miss."""
    statement = (select(KernelConfigRow).join(PlatformRow)
                 .where(KernelConfigRow.kernel_key == kernel_key, PlatformRow.key == platform_key))
    with store.session_scope() as session:
        row = session.scalars(statement).first()
        return None if row is None else _to_record(row, platform_key)


def save_kernel_config(store: Store, record: KernelConfig) -> bool:
    """Keep the better config for (kernel key, platform) in one atomic statement; returns
    whether `record` was stored.

    A missing row is always filled. A stored row is replaced when it was measured under
    other (tuner, torch, triton) versions than `record`, or when `record` is faster (a lower
    median latency). The platform must be stored first (`Store.ensure_platform`). Raises
    ValueError for a config or key argument that is not a JSON scalar, or a non-finite timing.
    """
    check_scalars("config value", record.config)
    check_scalars("key argument", record.key_args)
    if not (math.isfinite(record.latency_ms) and math.isfinite(record.spread_ms)):
        raise ValueError(f"kernel timings must be finite, got {record.latency_ms!r} ms "
                         f"(spread {record.spread_ms!r} ms)")
    if record.source not in SOURCES:
        raise ValueError(f"source must be one of {', '.join(SOURCES)}, got {record.source!r}")
    values: dict[str, Any] = {name: getattr(record, name) for name in _FIELDS}
    values.update(config=dict(record.config), key_args=dict(record.key_args),
                  created_at=as_utc(record.created_at) or utcnow())
    with store.session_scope(write=True) as session:
        values["platform_id"] = platform_of(session, record.platform_key).id
        statement = insert(session, KernelConfigRow).values(**values)
        new, old = statement.excluded, KernelConfigRow
        wins = or_(new.latency_ms < old.latency_ms, old.tuner_version != new.tuner_version,
                   old.torch_version != new.torch_version,
                   old.triton_version != new.triton_version)
        statement = statement.on_conflict_do_update(
            index_elements=[KernelConfigRow.kernel_key, KernelConfigRow.platform_id],
            set_={name: new[name] for name in values}, where=wins,
        ).returning(KernelConfigRow.id)
        return session.execute(statement).first() is not None


def kernel_configs(store: Store, *, platform_key: str | None = None,
                   kernel_name: str | None = None) -> list[KernelConfig]:
    """Every kept kernel config (on one platform, of one kernel name, if given), by kernel
    name then age; empty when none match. What `tuner kernels` lists."""
    statement = (select(KernelConfigRow, PlatformRow.key).join(PlatformRow)
                 .order_by(KernelConfigRow.kernel_name, KernelConfigRow.id))
    if platform_key is not None:
        statement = statement.where(PlatformRow.key == platform_key)
    if kernel_name is not None:
        statement = statement.where(KernelConfigRow.kernel_name == kernel_name)
    with store.session_scope() as session:
        return [_to_record(row, key) for row, key in session.execute(statement)]


def _to_record(row: KernelConfigRow, platform_key: str) -> KernelConfig:
    fields = {name: getattr(row, name) for name in _FIELDS}
    return KernelConfig(platform_key=platform_key, created_at=row.created_at,
                        config=tuple(row.config.items()), key_args=tuple(row.key_args.items()),
                        **fields)
