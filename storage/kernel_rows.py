"""The `kernel_configs` table inside a caller's open session: the checks a row must pass, the
keep-the-better write, the rows of an export's selection, row to record.

`kernel_table` runs these in a Store's transactions, one per call (what the face exports);
`snapshots` runs them inside an import's, merge's or export's one transaction.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

from tuner.storage.models import KernelConfigRow, PlatformRow, utcnow
from tuner.storage.queries import as_utc, insert, platform_of, to_platform
from tuner.storage.records import KernelConfig, Snapshot

SOURCES = ("search", "import", "merge")
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


def save_in(session: Session, record: KernelConfig) -> bool:
    """`save_kernel_config` inside an open write transaction (an import applies many at once)."""
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
    values["platform_id"] = platform_of(session, record.platform_key).id
    statement = insert(session, KernelConfigRow).values(**values)
    new, old = statement.excluded, KernelConfigRow
    # 0 is "not reported" (a harvested Triton config: tuner.storage.trust), never a time to beat
    wins = or_(new.latency_ms < old.latency_ms, and_(old.latency_ms <= 0, new.latency_ms > 0))
    if record.source == "search":       # a fresh measurement here also replaces one made under other versions
        wins = or_(wins, old.tuner_version != new.tuner_version, old.torch_version != new.torch_version,
                   old.triton_version != new.triton_version)
    statement = statement.on_conflict_do_update(
        index_elements=[KernelConfigRow.kernel_key, KernelConfigRow.platform_id],
        set_={name: new[name] for name in values}, where=wins,
    ).returning(KernelConfigRow.id)
    return session.execute(statement).first() is not None


def with_kernels(session: Session, snapshot: Snapshot, *, workload_keys: list[str] | None,
                 platform_keys: list[str] | None) -> Snapshot:
    """`snapshot` with the kernel configs of the selection: the platforms named, else those of
    the selected best configs when workloads are named, else every platform; the platforms of
    the kernels join the snapshot's (as `failure_rows.with_rules` does for rules)."""
    if platform_keys is None and workload_keys is not None:
        platform_keys = [p.key for p in snapshot.platforms]
    statement = (select(KernelConfigRow, PlatformRow.key).join(PlatformRow)
                 .order_by(PlatformRow.id, KernelConfigRow.kernel_name, KernelConfigRow.id))
    if platform_keys is not None:
        statement = statement.where(PlatformRow.key.in_(platform_keys))
    kernels = tuple(to_record(row, key) for row, key in session.execute(statement))
    have = {p.key for p in snapshot.platforms}
    wanted = sorted({k.platform_key for k in kernels} - have)
    extra = session.scalars(select(PlatformRow).where(PlatformRow.key.in_(wanted)).order_by(PlatformRow.id))
    return replace(snapshot, kernels=kernels,
                   platforms=snapshot.platforms + tuple(to_platform(row) for row in extra))


def to_record(row: KernelConfigRow, platform_key: str) -> KernelConfig:
    """One stored row (of the platform whose key is `platform_key`) as a frozen record."""
    fields = {name: getattr(row, name) for name in _FIELDS}
    return KernelConfig(platform_key=platform_key, created_at=row.created_at,
                        config=tuple(row.config.items()), key_args=tuple(row.key_args.items()),
                        **fields)
