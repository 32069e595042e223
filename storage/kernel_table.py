"""The `kernel_configs` table through a Store: find, save and list, one transaction each.

The storage floor's part of the kernel database, and what the face exports for it:
`tuner.kernels.guarded_db` (what `tuner.autotune` and Inductor's hooks call) reads a kernel here
before it benchmarks anything and saves the winner of a search; the compile-time lookup and
`tuner kernels` read here too. Every function runs in one `Store.session_scope()`, so driver errors
leave as StorageError naming the database, and returns frozen `KernelConfig` records. The
statements themselves, which an import or an export also runs inside its own transaction, are in
`kernel_rows`.
"""
from __future__ import annotations

from sqlalchemy import select

from tuner.storage.kernel_rows import save_in, to_record
from tuner.storage.models import KernelConfigRow, PlatformRow
from tuner.storage.records import KernelConfig
from tuner.storage.store import Store


def find_kernel_config(store: Store, kernel_key: str, platform_key: str) -> KernelConfig | None:
    """The kept config for this kernel key on exactly this platform; None on a miss."""
    statement = (select(KernelConfigRow).join(PlatformRow)
                 .where(KernelConfigRow.kernel_key == kernel_key, PlatformRow.key == platform_key))
    with store.session_scope() as session:
        row = session.scalars(statement).first()
        return None if row is None else to_record(row, platform_key)


def save_kernel_config(store: Store, record: KernelConfig) -> bool:
    """Keep the better config for (kernel key, platform) in one atomic statement; returns
    whether `record` was stored.

    A missing row is always filled. A stored row is replaced when it was measured under
    other (tuner, torch, triton) versions than `record`, or when `record` is faster (a lower
    median latency); an imported or merged `record` (its `source`) replaces one only when
    faster. The platform must be stored first (`Store.ensure_platform`). Raises ValueError for a
    config or key argument that is not a JSON scalar, or a non-finite timing.
    """
    with store.session_scope(write=True) as session:
        return save_in(session, record)


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
        return [to_record(row, key) for row, key in session.execute(statement)]
