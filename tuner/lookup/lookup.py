"""Compile-time lookup: which stored config applies to one Dynamo graph on this machine.

Called by the `tuner` backend (`tuner.lookup.backend`) once per graph Dynamo hands it, and by
`tuner explain`. The tier rules (exact, then same-hardware, then the nearest tuned shape
bucket, else a miss) are the pure functions `decide_tier` and `decide_nearest_bucket` of
`tuner.lookup.decision`; this module feeds them the rows the store returns and guards them. A
miss is Inductor's defaults, one INFO line per graph on the `tuner.lookup` logger, and no
warning (a miss is not an error).

Never breaking the program: the guard is `Lookup` (`decide` for the database and the stored
configs, `decide_graph` for the fingerprint and the platform, `guarded` for the backend's
explanations). When the database is missing, unreachable, locked (past
`Settings.lookup_timeout_s`), corrupt, on another schema revision, or holds a config that
does not validate, the decision is Inductor's defaults and the process gets its single
`LookupWarning`. The store itself, read-only and given up on after one failure, is
`tuner.lookup.database.ReadOnlyDatabase`, which `Lookup` extends. Decisions are cached per
process by (graph key, platform key); the platform itself is cached by `tuner.platform`.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from tuner.errors import SpaceError, StorageError
from tuner.inductor import CompileConfig
from tuner.lookup.database import ReadOnlyDatabase
from tuner.lookup.decision import Decision, Tier, bucket_decisions, decide_nearest_bucket, decide_tier, short
from tuner.platform import current_platform
from tuner.settings import Settings
from tuner.text import printable
from tuner.workload import fingerprint_graph

if TYPE_CHECKING:
    import torch.fx

    from tuner.keys import GraphFingerprint, Platform
    from tuner.storage import BestConfig

__all__ = ["GraphLookup", "Lookup", "platform_for_inputs", "process_lookup", "reset_process_lookup"]

log = logging.getLogger("tuner.lookup")


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

    device = "cpu"
    for value in example_inputs:
        if isinstance(value, torch.Tensor) and value.device.type != "cpu":
            dev = value.device
            device = f"{dev.type}:{dev.index}" if dev.index is not None else dev.type
            break
    return current_platform(device)


class Lookup(ReadOnlyDatabase):
    """One process's decisions per graph, cached, over its read-only view of the tuning database.

    The store is opened at the first decision, not before; once opening or reading fails, the
    database is not touched again by this object (`ReadOnlyDatabase`). Thread-safe: Dynamo may
    compile from several threads.
    """

    def __init__(self, settings: Settings, *, warn: bool = True) -> None:
        super().__init__(settings, warn=warn)
        self._cache: dict[tuple[str, str], Decision] = {}
        self._buckets: dict[str, list[tuple[str, GraphFingerprint, BestConfig]]] = {}   # by platform key
        self._explained: set[tuple[str, str]] = set()

    # -- the guard -------------------------------------------------------------
    def decide_graph(self, gm: "torch.fx.GraphModule", example_inputs: Sequence[Any], *,
                     index: int = 0) -> "GraphLookup":
        """Fingerprint one Dynamo graph and decide its config. Never raises.

        Called from inside the backend, while Dynamo compiles. Expected failures (storage,
        invalid stored config) and unexpected ones (a bug in tuner) both end as Inductor's
        defaults with one warning per process.
        """
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
                decision = self._unavailable(graph_key, platform, f"database unusable: {exc}")
                self._give_up(exc)
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
                self._give_up(exc)
                self.warn_once(f"tuner: {exc}; compiling with Inductor's defaults "
                               f"(tuner will not read the database again in this process)")
            except SpaceError as exc:
                self.warn_once(f"tuner: a shape bucket's config for dynamic graph {short(fingerprint.key)} is "
                               f"invalid ({printable(exc)}); compiling that graph with Inductor's defaults; "
                               f"re-tune the model with: tuner search MODEL_FILE --shapes ...")
            except Exception as exc:  # noqa: BLE001 - the one guard: a bug must not break the user's program
                self._bug("look up the shape buckets of", 0, exc, consequence="compiling it with Inductor's "
                          "defaults. ")
            return []

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
        return Decision(graph_key=graph_key, platform=platform, tier=Tier.UNAVAILABLE,
                        config=CompileConfig(), reason=reason)

    def clear(self, *, keep_store: bool = False) -> None:
        """Forget every cached decision and, unless `keep_store`, the database state and the
        warning already given (tests and benchmarks)."""
        with self._lock:
            self._cache.clear()
            self._buckets.clear()
            super().clear(keep_store=keep_store)


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
