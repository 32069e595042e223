"""The lookup's read-only database: the store behind one guard, and the kernel rows read from it.

`ReadOnlyDatabase` is what every compile-time read goes through (`tuner.lookup.Lookup` builds
its decisions on it). The store is opened at the first read, not before (`import tuner` and
`torch.compile(...)` stay cheap), read-only (SQLite `mode=ro`, PostgreSQL read-only sessions),
never created, never migrated, and every read runs within `Settings.lookup_timeout_s`. When the
database is missing, unreachable, locked, corrupt or on another schema revision, the reader gives
up on it for the process (`_give_up`): it is not opened again, so every later graph answers at
once. Whatever goes wrong, the process gets a single `LookupWarning` through `warnings.warn`
(`warn_once`; later problems go to the `tuner.lookup` logger at INFO).

The kernel rows are read here too, straight from the store with no tiers: the GEMM winners
(`gemm_winner`, `tuner.inductor.gemm_choices`) and the Triton tile configs (`triton_table`,
`tuner.inductor.triton_choices`) stored on exactly this platform, each row checked as untrusted
input first (`tuner.storage.kernel_problem`). `tuner.lookup.kernel_feed` hands them to Inductor.
"""
from __future__ import annotations

import logging
import threading
import warnings
from typing import TYPE_CHECKING, Callable, TypeVar

from tuner.errors import StorageError
from tuner.inductor import gemm_choices, triton_choices
from tuner.lookup.decision import short
from tuner.settings import Settings
from tuner.text import printable

if TYPE_CHECKING:
    from tuner.storage import KernelConfig, Store

__all__ = ["LookupWarning", "ReadOnlyDatabase"]

T = TypeVar("T")

log = logging.getLogger("tuner.lookup")


class LookupWarning(UserWarning):
    """The tuning database, or a config stored in it, could not be used; defaults were."""


class ReadOnlyDatabase:
    """One process's read-only view of the tuning database, behind one guard.

    Thread-safe: Dynamo may compile from several threads; reads hold `_lock`. Once opening or
    reading fails, the database is not touched again by this object.
    """

    def __init__(self, settings: Settings, *, warn: bool = True) -> None:
        self.settings = settings
        self._warn_enabled = warn
        self._store: Store | None = None
        self._unusable: str | None = None          # why the database cannot be used
        self._warned = False
        self._lock = threading.RLock()

    # -- the guard -------------------------------------------------------------
    def warn_once(self, message: str) -> None:
        """The process's single LookupWarning; later problems are logged at INFO."""
        if self._warn_enabled and not self._warned:
            self._warned = True
            warnings.warn(message, LookupWarning, stacklevel=2)
        else:
            log.info("%s", message)

    def guarded(self, what: str, index: int, call: Callable[[], T]) -> T | None:
        """`call()`, or None when it raises: the backend's extras for graph `index` (what
        TUNER_EXPLAIN prints) must not break the user's program either. A failure is a bug
        in tuner, reported like one in `Lookup.decide_graph` ("could not {what} graph {index}")."""
        try:
            return call()
        except Exception as exc:  # noqa: BLE001 - the one guard: a bug must not break the user's program
            self._bug(what, index, exc)
            return None

    def _bug(self, what: str, index: int, exc: Exception, *, consequence: str = "") -> None:
        log.debug("tuner lookup failed", exc_info=exc)
        self.warn_once(f"tuner: could not {what} graph {index} ({type(exc).__name__}: {exc}); "
                       f"{consequence}This is a bug in tuner: please report it (the traceback is logged "
                       f"at DEBUG on the tuner.lookup logger)")

    def _give_up(self, exc: StorageError) -> None:
        """The database cannot be used (`exc`): never read it again in this process (the caller says so
        once, naming what happens instead)."""
        self._unusable = str(exc)
        self._close_store()

    # -- the kernel rows ---------------------------------------------------------
    def gemm_winner(self, gemm_key: str, platform_key: str) -> str | None:
        """The stored winning choice of one Inductor GEMM (`tuner.inductor.gemm_choices`, kept in
        `kernel_configs`) on exactly this platform; None on a miss, on a row that cannot be read or
        launched, and on a database that cannot be used (`_kernel_rows`: one warning; never raises)."""
        from tuner.storage import find_kernel_config    # lazy: the storage's face loads SQLAlchemy

        def read(store: "Store") -> "list[KernelConfig]":
            record = find_kernel_config(store, gemm_key, platform_key)
            return [] if record is None else [record]

        def winner(records: "list[KernelConfig]") -> str | None:
            found = records[0].config_dict().get(gemm_choices.WINNER) if records else None
            return found if isinstance(found, str) else None

        return self._kernel_rows(read, winner, None, what=f"GEMM {short(gemm_key)}", tuner="the GEMMs")

    def triton_table(self, graph_key: str, platform_key: str) -> dict[str, dict[str, int]]:
        """The tile configs stored for graph `graph_key`'s generated Triton kernels on exactly this
        platform (`tuner.inductor.triton_choices`) as Inductor's `autotune_lookup_table`; empty on a
        miss, on rows that cannot be read, and on a database that cannot be used (`_kernel_rows`)."""
        from tuner.storage import kernel_configs        # lazy: the storage's face loads SQLAlchemy

        name = (triton_choices.KERNEL_PREFIX + graph_key)[:255]
        return self._kernel_rows(lambda store: kernel_configs(store, platform_key=platform_key, kernel_name=name),
                                 triton_choices.table, {}, what=f"graph {short(graph_key)}'s Triton kernels",
                                 tuner="its Triton kernels")

    def _kernel_rows(self, read: "Callable[[Store], list[KernelConfig]]", use: "Callable[[list[KernelConfig]], T]",
                     empty: T, *, what: str, tuner: str) -> T:
        """`use(rows)` for the launchable kernel rows `read` returns (`_trusted_kernels`); never raises.
        A database that cannot be used (StorageError): `empty`, one warning, and the database is not
        read again (`_give_up`). A row that cannot even be read as a KernelConfig (a `config`
        column holding a JSON list, text where a number belongs: anyone with write access can put
        it there): `empty` for this lookup, one warning; Inductor tunes those kernels itself."""
        with self._lock:
            if self._unusable is not None:
                return empty
            try:
                records = self._read(read)
            except StorageError as exc:
                self._give_up(exc)
                self.warn_once(f"tuner: {exc}; Inductor tunes {tuner} itself "
                               f"(tuner will not read the database again in this process)")
                return empty
            except Exception as exc:  # noqa: BLE001 - a row anyone can write must not break the user's compile
                log.debug("tuner kernel lookup failed", exc_info=True)
                self.warn_once(f"tuner: skipped the stored kernel config of {what}: a row could not be read "
                               f"({type(exc).__name__}: {printable(str(exc)[:200])}); Inductor tunes {tuner} itself. "
                               f"Remove the row, or re-tune: tuner search MODEL_FILE")
                return empty
        try:
            return use(self._trusted_kernels(records))
        except Exception as exc:  # noqa: BLE001 - as above: a stored row, not the user's program, is at fault
            log.debug("tuner kernel lookup failed", exc_info=True)
            self.warn_once(f"tuner: skipped the stored kernel config of {what} ({type(exc).__name__}: "
                           f"{printable(str(exc)[:200])}); Inductor tunes {tuner} itself. Remove the row, or "
                           f"re-tune: tuner search MODEL_FILE")
            return empty

    def _trusted_kernels(self, records: "list[KernelConfig]") -> "list[KernelConfig]":
        """The kernel configs Inductor can launch as stored (`tuner.storage.trust.kernel_problem`); the
        first one skipped is warned about once, naming it and why (the kernel autotunes as usual)."""
        from tuner.storage import kernel_problem        # lazy: the storage's face loads SQLAlchemy

        kept = []
        for record in records:
            problem = kernel_problem(record)
            if problem is None:
                kept.append(record)
            else:
                self.warn_once(f"tuner: skipped the stored kernel config {short(record.kernel_key)} "
                               f"({printable(record.kernel_name[:60])}): {printable(problem)}; Inductor tunes that "
                               f"kernel itself. Remove the row, or re-tune: tuner search MODEL_FILE")
        return kept

    # -- the store -------------------------------------------------------------
    def _read(self, call: "Callable[[Store], T]") -> T:
        """`call(store)` within `Settings.lookup_timeout_s`, opening the store first if needed:
        StorageError past the deadline, even from a server that accepts and then never answers
        (`tuner.storage.within`). Call with `self._lock` held."""
        from tuner.storage import within                # lazy: the storage's face loads SQLAlchemy

        return within(self.settings.lookup_timeout_s, lambda: call(self.store()), url=self.settings.db_url)

    def store(self) -> "Store":
        """The read-only store, opened on first use within the lookup timeout.

        Raises StorageError (including SchemaOutdated / SchemaTooNew) when it cannot be used.
        """
        if self._store is None:
            from tuner.storage import Store             # lazy: the storage's face loads SQLAlchemy

            self._store = Store.open(self.settings.db_url, readonly=True, check_schema=True,
                                     connect_timeout_s=self.settings.lookup_timeout_s)
        return self._store

    @property
    def unusable(self) -> str | None:
        """Why the database cannot be used in this process, or None."""
        return self._unusable

    def _close_store(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def clear(self, *, keep_store: bool = False) -> None:
        """Unless `keep_store`, forget the database state and the warning already given (tests and
        benchmarks)."""
        with self._lock:
            if not keep_store:
                self._close_store()
                self._unusable = None
                self._warned = False
