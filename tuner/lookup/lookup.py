"""Compile-time lookup: which stored config applies to one Dynamo graph on this machine.

Called by the `tuner` backend (`tuner.lookup.backend`) once per graph Dynamo hands it, and by
`tuner explain`. The tier rules (exact, then same-hardware, then the nearest tuned shape
bucket, else a miss) are the pure functions `tuner.lookup.decide_tier` and
`decide_nearest_bucket`; this module feeds them the rows the store returns and guards them. A miss is Inductor's defaults, one INFO line per graph on the `tuner.lookup`
logger, and no warning (a miss is not an error).

Never breaking the program: the guard is `Lookup` (`decide` for the database and the stored
configs, `decide_graph` for the fingerprint and the platform, `guarded` for the backend's
explanations). When the database is missing, unreachable, locked (past
`Settings.lookup_timeout_s`), corrupt, on another schema revision, or holds a config that
does not validate, the decision is Inductor's
defaults and a single `LookupWarning` is issued through `warnings.warn` for the whole
process (later problems go to the `tuner.lookup` logger at INFO). A database that failed
once is not opened again in this process, so every later graph answers at once.

Reads only: the store is opened read-only (SQLite `mode=ro`, PostgreSQL read-only
sessions), never created, never migrated. Decisions are cached per process by
(graph key, platform key); the platform itself is cached by `tuner.platform`.
"""
from __future__ import annotations

import logging
import threading
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar

from tuner.errors import SpaceError, StorageError
from tuner.lookup.decision import (Decision, StoredElsewhere, Tier, bucket_decisions, decide_nearest_bucket,
                                   decide_tier, short)
from tuner.settings import Settings
from tuner.text import printable

if TYPE_CHECKING:
    import torch.fx

    from tuner.keys import GraphFingerprint, Platform
    from tuner.storage import BestConfig, KernelConfig, Store

__all__ = ["Decision", "GraphLookup", "Lookup", "LookupWarning", "StoredElsewhere", "Tier", "decide_tier",
           "platform_for_inputs", "process_lookup", "reset_process_lookup", "short"]

T = TypeVar("T")

log = logging.getLogger("tuner.lookup")


class LookupWarning(UserWarning):
    """The tuning database, or a config stored in it, could not be used; defaults were."""


@dataclass(frozen=True)
class GraphLookup:
    """What the backend learns about one graph: its fingerprint (None only when fingerprinting
    failed) and the decision."""

    fingerprint: "GraphFingerprint | None"
    decision: Decision


def platform_for_inputs(example_inputs: Sequence[Any]) -> "Platform":
    """This machine's platform for the device the graph runs on.

    The first non-CPU tensor input decides the device (a CUDA graph may also take CPU
    scalars); a graph with only CPU tensors, or none, is a CPU graph.
    """
    import torch

    from tuner.platform import current_platform

    device = "cpu"
    for value in example_inputs:
        if isinstance(value, torch.Tensor) and value.device.type != "cpu":
            dev = value.device
            device = f"{dev.type}:{dev.index}" if dev.index is not None else dev.type
            break
    return current_platform(device)


class Lookup:
    """One process's read-only view of the tuning database, with its decision cache.

    The store is opened at the first decision, not before (`import tuner` and
    `torch.compile(...)` stay cheap); once opening or reading fails, the database is not
    touched again by this object. Thread-safe: Dynamo may compile from several threads.
    """

    def __init__(self, settings: Settings, *, warn: bool = True) -> None:
        self.settings = settings
        self._warn_enabled = warn
        self._store: Store | None = None
        self._unusable: str | None = None          # why the database cannot be used
        self._warned = False
        self._cache: dict[tuple[str, str], Decision] = {}
        self._buckets: dict[str, list[tuple[str, GraphFingerprint, BestConfig]]] = {}   # by platform key
        self._explained: set[tuple[str, str]] = set()
        self._lock = threading.RLock()

    # -- the guard -------------------------------------------------------------
    def decide_graph(self, gm: "torch.fx.GraphModule", example_inputs: Sequence[Any], *,
                     index: int = 0) -> "GraphLookup":
        """Fingerprint one Dynamo graph and decide its config. Never raises.

        Called from inside the backend, while Dynamo compiles. Expected failures (storage,
        invalid stored config) and unexpected ones (a bug in tuner) both end as Inductor's
        defaults with one warning per process.
        """
        from tuner.inductor import CompileConfig
        from tuner.workload import fingerprint_graph

        fingerprint: GraphFingerprint | None = None
        try:
            fingerprint = fingerprint_graph(gm, list(example_inputs), index=index)
            platform = platform_for_inputs(example_inputs)
            decision = self.decide(fingerprint.key, platform, code=fingerprint.code)   # guarded
        except Exception as exc:  # noqa: BLE001 - the one guard: a bug must not break the user's program
            self._bug("fingerprint", index, exc, consequence="compiling it with Inductor's defaults. ")
            decision = Decision(graph_key=fingerprint.key if fingerprint is not None else "", platform=None,
                                tier=Tier.UNAVAILABLE, config=CompileConfig(),
                                reason=f"fingerprint failed: {type(exc).__name__}: {exc}")
        return GraphLookup(fingerprint=fingerprint, decision=decision)

    def guarded(self, what: str, index: int, call: Callable[[], T]) -> T | None:
        """`call()`, or None when it raises: the backend's extras for graph `index` (what
        TUNER_EXPLAIN prints) must not break the user's program either. A failure is a bug
        in tuner, reported like one in `decide_graph` ("could not {what} graph {index}")."""
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

    def first_explanation(self, decision: Decision) -> bool:
        """True once per (graph, platform) and lookup: TUNER_EXPLAIN prints each graph once per process."""
        if decision.platform is None:
            return False
        key = (decision.graph_key, decision.platform.key)
        with self._lock:
            first = key not in self._explained
            self._explained.add(key)
        return first

    def decide(self, graph_key: str, platform: "Platform", *, code: str | None = None) -> Decision:
        """The decision for `graph_key` on `platform`; cached; never raises.

        `code` is the graph's canonical text (`GraphFingerprint.code`, whose hash is the key);
        with it, a miss may become a nearest-bucket hit. See `tuner.lookup.decision` for the tiers and
        the module docstring for the fault handling.
        """
        cache_key = (graph_key, platform.key)
        with self._lock:
            found = self._cache.get(cache_key)
            if found is not None:
                return found
            try:
                decision = self._decide(graph_key, platform, code)
            except StorageError as exc:
                self._unusable = str(exc)
                self._close_store()
                decision = self._unavailable(graph_key, platform, f"database unusable: {exc}")
                self.warn_once(f"tuner: {exc}; compiling with Inductor's defaults "
                               f"(tuner will not read the database again in this process)")
            except SpaceError as exc:
                decision = self._unavailable(graph_key, platform, f"stored config is invalid: {exc}")
                self.warn_once(f"tuner: the config stored for graph {short(graph_key)} on this platform "
                               f"is invalid ({printable(exc)}); compiling that graph with Inductor's defaults; "
                               f"re-tune the model with: tuner search MODEL_FILE")
            except Exception as exc:  # noqa: BLE001 - the one guard: a bug must not break the user's program
                log.debug("tuner lookup failed", exc_info=True)
                decision = self._unavailable(graph_key, platform, f"lookup failed: {type(exc).__name__}: {exc}")
                self.warn_once(f"tuner: lookup failed for graph {short(graph_key)} ({type(exc).__name__}: "
                               f"{exc}); compiling it with Inductor's defaults. This is a bug in tuner: please "
                               f"report it (the traceback is logged at DEBUG on the tuner.lookup logger)")
            self._cache[cache_key] = decision
            return decision

    def bucket_decisions(self, fingerprint: "GraphFingerprint",
                         platform: "Platform") -> list[tuple[dict[str, int], Decision]]:
        """For a graph with symbolic sizes: the shape buckets tuned on this platform that it is at
        fixed sizes, each with its sizes by symbol and its decision (`tuner.lookup.decision.bucket_decisions`);
        [] on none and, never raising, on any problem (then one warning, as in `decide`)."""
        with self._lock:
            if self._unusable is not None:
                return []
            try:
                return bucket_decisions(fingerprint.key, platform, fingerprint.code,
                                        self._bucket_configs(platform.key))
            except StorageError as exc:
                self._unusable = str(exc)
                self._close_store()
                self.warn_once(f"tuner: {exc}; compiling with Inductor's defaults "
                               f"(tuner will not read the database again in this process)")
            except SpaceError as exc:
                self.warn_once(f"tuner: a shape bucket's config for dynamic graph {short(fingerprint.key)} is "
                               f"invalid ({printable(exc)}); compiling that graph with Inductor's defaults; re-tune the "
                               f"model with: tuner search MODEL_FILE --shapes ...")
            except Exception as exc:  # noqa: BLE001 - the one guard: a bug must not break the user's program
                self._bug("look up the shape buckets of", 0, exc, consequence="compiling it with Inductor's "
                          "defaults. ")
            return []

    def gemm_winner(self, gemm_key: str, platform_key: str) -> str | None:
        """The stored winning choice of one Inductor GEMM (`tuner.inductor.gemm_choices`, kept in
        `kernel_configs`) on exactly this platform; None on a miss, on a row that cannot be read or
        launched, and on a database that cannot be used (`_kernel_rows`: one warning; never raises)."""
        from tuner.inductor import gemm_choices
        from tuner.storage import find_kernel_config

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
        from tuner.inductor import triton_choices
        from tuner.storage import kernel_configs

        name = (triton_choices.KERNEL_PREFIX + graph_key)[:255]
        return self._kernel_rows(lambda store: kernel_configs(store, platform_key=platform_key, kernel_name=name),
                                 triton_choices.table, {}, what=f"graph {short(graph_key)}'s Triton kernels",
                                 tuner="its Triton kernels")

    def _kernel_rows(self, read: "Callable[[Store], list[KernelConfig]]", use: "Callable[[list[KernelConfig]], T]",
                     empty: T, *, what: str, tuner: str) -> T:
        """`use(rows)` for the launchable kernel rows `read` returns (`_trusted_kernels`); never raises.
        A database that cannot be used (StorageError): `empty`, one warning, and the database is not
        read again (as in `decide`). A row that cannot even be read as a KernelConfig (a `config`
        column holding a JSON list, text where a number belongs: anyone with write access can put
        it there): `empty` for this lookup, one warning; Inductor tunes those kernels itself."""
        with self._lock:
            if self._unusable is not None:
                return empty
            try:
                records = self._read(read)
            except StorageError as exc:
                self._unusable = str(exc)
                self._close_store()
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
        from tuner.storage import kernel_problem

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

    def warn_once(self, message: str) -> None:
        """The process's single LookupWarning; later problems are logged at INFO."""
        if self._warn_enabled and not self._warned:
            self._warned = True
            warnings.warn(message, LookupWarning, stacklevel=2)
        else:
            log.info("%s", message)

    # -- the tiers -------------------------------------------------------------
    def _decide(self, graph_key: str, platform: "Platform", code: str | None) -> Decision:
        """Raises StorageError (database) or SpaceError (a config that does not validate)."""
        if self._unusable is not None:
            return self._unavailable(graph_key, platform, f"database unusable: {self._unusable}")
        stored = self._read(lambda store: store.best_configs_for_graph(graph_key))
        decision = decide_tier(graph_key, platform, stored)
        if decision.tier is Tier.MISS and not stored and code is not None:   # a shape no bucket has
            decision = decide_nearest_bucket(decision, code, self._bucket_configs(platform.key))
        return decision

    def _bucket_configs(self, platform_key: str) -> "list[tuple[str, GraphFingerprint, BestConfig]]":
        """Every shape bucket's config on this platform, read once per process: each miss of a
        dynamic model would otherwise re-read every bucket graph's full code."""
        found = self._buckets.get(platform_key)
        if found is None:
            found = self._buckets[platform_key] = self._read(lambda store: store.bucket_configs(platform_key))
        return found

    def _unavailable(self, graph_key: str, platform: "Platform", reason: str) -> Decision:
        from tuner.inductor import CompileConfig

        return Decision(graph_key=graph_key, platform=platform, tier=Tier.UNAVAILABLE,
                        config=CompileConfig(), reason=reason)

    # -- the store -------------------------------------------------------------
    def _read(self, call: "Callable[[Store], T]") -> T:
        """`call(store)` within `Settings.lookup_timeout_s`, opening the store first if needed:
        StorageError past the deadline, even from a server that accepts and then never answers
        (`tuner.storage.within`). Call with `self._lock` held."""
        from tuner.storage import within

        return within(self.settings.lookup_timeout_s, lambda: call(self.store()), url=self.settings.db_url)

    def store(self) -> "Store":
        """The read-only store, opened on first use within the lookup timeout.

        Raises StorageError (including SchemaOutdated / SchemaTooNew) when it cannot be used.
        """
        if self._store is None:
            from tuner.storage import Store

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
        """Forget every cached decision and, unless `keep_store`, the database state and the
        warning already given (tests and benchmarks)."""
        with self._lock:
            self._cache.clear()
            self._buckets.clear()
            if not keep_store:
                self._close_store()
                self._unusable = None
                self._warned = False


# -- the process-wide lookup ---------------------------------------------------------

_process_lookup: Lookup | None = None
_process_lock = threading.Lock()


def process_lookup() -> Lookup:
    """The lookup every `tuner` backend in this process shares; reads Settings.from_env() once."""
    global _process_lookup
    with _process_lock:
        if _process_lookup is None:
            _process_lookup = Lookup(Settings.from_env())
        return _process_lookup


def reset_process_lookup(settings: Settings | None = None) -> Lookup:
    """Replace the process-wide lookup (tests and benchmarks): new settings, empty cache."""
    global _process_lookup
    with _process_lock:
        if _process_lookup is not None:
            _process_lookup.clear()
        _process_lookup = Lookup(settings if settings is not None else Settings.from_env())
        return _process_lookup
