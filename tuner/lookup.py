"""Compile-time lookup: which stored config applies to one Dynamo graph on this machine.

Called by the `tuner` backend (`tuner.backend`) once per graph Dynamo hands it, and by
`tuner explain`. Two tiers, in order:

1. **exact**: a config stored for this graph key on exactly this platform key;
2. **same-hardware**: a config stored for this graph key on a platform with the same
   hardware key but other software (torch, triton, CUDA, Python, tuner versions), used
   only after `compiler.compile_config` re-validates every knob name and value type
   against the allow-list and the installed torch. The same torch version is tried
   first, then the newest config.

Anything else is a miss: Inductor's defaults, one INFO line per graph on the
`tuner.lookup` logger, and no warning (a miss is not an error).

Never breaking the program: the guard is `Lookup` (`decide` for the database and the stored
configs, `decide_graph` for the fingerprint, the platform and explanations). When the database is
missing, unreachable, locked (past `Settings.lookup_timeout_s`), corrupt, on another
schema revision, or holds a config that does not validate, the decision is Inductor's
defaults and a single `LookupWarning` is issued through `warnings.warn` for the whole
process (later problems go to the `tuner.lookup` logger at INFO). A database that failed
once is not opened again in this process, so every later graph answers at once.

Reads only: the store is opened read-only (SQLite `mode=ro`, PostgreSQL read-only
sessions), never created, never migrated. Decisions are cached per process by
(graph key, platform key); the platform itself is cached by `tuner.platform`.
"""
from __future__ import annotations

import enum
import logging
import threading
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from tuner.errors import SpaceError, StorageError
from tuner.settings import Settings

if TYPE_CHECKING:
    import torch.fx

    from tuner.compiler import CompileConfig
    from tuner.platform import Platform
    from tuner.storage import BestConfig, Store
    from tuner.explanation import Explanation
    from tuner.workload import GraphFingerprint

log = logging.getLogger("tuner.lookup")


class LookupWarning(UserWarning):
    """The tuning database, or a config stored in it, could not be used; defaults were."""


class Tier(str, enum.Enum):
    EXACT = "exact"                    # this graph on this platform
    SAME_HARDWARE = "same-hardware"    # this graph on this hardware, other software versions
    MISS = "miss"                      # nothing stored that applies
    UNAVAILABLE = "unavailable"        # the database or the stored config could not be used


@dataclass(frozen=True)
class StoredElsewhere:
    """A config stored for the same graph on another platform, and why it was not used."""

    platform: "Platform"
    best: "BestConfig"
    why_not: str                       # one line, e.g. "other hardware: AMD EPYC ... (cpu)"


@dataclass(frozen=True)
class Decision:
    """What to compile one graph with, and why.

    `config` is `CompileConfig()` (Inductor's defaults) unless a stored config applies.
    A hit whose stored verdict is "defaults won" has tier EXACT/SAME_HARDWARE and a default
    `config`. `source` is the platform the applied config was measured on.
    """

    graph_key: str
    platform: "Platform | None"        # None only when the platform itself could not be read
    tier: Tier
    config: "CompileConfig"
    reason: str                        # one line for logs and `tuner explain`
    best: "BestConfig | None" = None
    source: "Platform | None" = None
    elsewhere: tuple[StoredElsewhere, ...] = ()

    @property
    def hit(self) -> bool:
        return self.tier in (Tier.EXACT, Tier.SAME_HARDWARE)


@dataclass(frozen=True)
class GraphLookup:
    """What the backend learns about one graph: its fingerprint (None only when fingerprinting
    failed), the decision, and with TUNER_EXPLAIN the explanation to print (first time only)."""

    fingerprint: "GraphFingerprint | None"
    decision: Decision
    explanation: "Explanation | None" = None


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


def short(key: str) -> str:
    return key[:12]


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
        self._explained: set[tuple[str, str]] = set()
        self._lock = threading.RLock()

    # -- the guard -------------------------------------------------------------
    def decide_graph(self, gm: "torch.fx.GraphModule", example_inputs: Sequence[Any], *,
                     index: int = 0, explain: bool = False) -> "GraphLookup":
        """Fingerprint one Dynamo graph and decide its config. Never raises.

        Called from inside the backend, while Dynamo compiles. Expected failures (storage,
        invalid stored config) and unexpected ones (a bug in tuner) both end as Inductor's
        defaults with one warning per process. With `explain`, the result also carries the
        explanation the first time this process meets the graph on this platform.
        """
        from tuner.compiler import CompileConfig
        from tuner.explanation import explain_graph
        from tuner.workload import fingerprint_graph

        fingerprint: GraphFingerprint | None = None
        decision: Decision | None = None
        explanation: Explanation | None = None
        try:
            fingerprint = fingerprint_graph(gm, list(example_inputs), index=index)
            platform = platform_for_inputs(example_inputs)
            decision = self.decide(fingerprint.key, platform)          # guarded for the database
            if explain and self._first_explanation(decision):
                explanation = explain_graph(self, fingerprint, platform)
        except Exception as exc:  # noqa: BLE001 - the one guard: a bug must not break the user's program
            log.debug("tuner lookup failed", exc_info=True)
            what = "explain" if decision is not None else "fingerprint"
            consequence = "compiling it with Inductor's defaults. " if decision is None else ""
            self.warn_once(f"tuner: could not {what} graph {index} ({type(exc).__name__}: {exc}); "
                           f"{consequence}This is a bug in tuner: please report it (the traceback is logged "
                           f"at DEBUG on the tuner.lookup logger)")
            if decision is None:
                decision = Decision(graph_key=fingerprint.key if fingerprint is not None else "", platform=None,
                                    tier=Tier.UNAVAILABLE, config=CompileConfig(),
                                    reason=f"{what} failed: {type(exc).__name__}: {exc}")
        return GraphLookup(fingerprint=fingerprint, decision=decision, explanation=explanation)

    def _first_explanation(self, decision: Decision) -> bool:
        """True once per (graph, platform): TUNER_EXPLAIN prints each graph once per process."""
        if decision.platform is None:
            return False
        key = (decision.graph_key, decision.platform.key)
        with self._lock:
            first = key not in self._explained
            self._explained.add(key)
        return first

    def decide(self, graph_key: str, platform: "Platform") -> Decision:
        """The decision for `graph_key` on `platform`; cached; never raises.

        See the module docstring for the tiers and the fault handling.
        """
        cache_key = (graph_key, platform.key)
        with self._lock:
            found = self._cache.get(cache_key)
            if found is not None:
                return found
            try:
                decision = self._decide(graph_key, platform)
            except StorageError as exc:
                self._unusable = str(exc)
                self._close_store()
                decision = self._unavailable(graph_key, platform, f"database unusable: {exc}")
                self.warn_once(f"tuner: {exc}; compiling with Inductor's defaults "
                               f"(tuner will not read the database again in this process)")
            except SpaceError as exc:
                decision = self._unavailable(graph_key, platform, f"stored config is invalid: {exc}")
                self.warn_once(f"tuner: the config stored for graph {short(graph_key)} on this platform "
                               f"is invalid ({exc}); compiling that graph with Inductor's defaults; "
                               f"re-tune the model with: tuner search MODEL_FILE")
            except Exception as exc:  # noqa: BLE001 - the one guard: a bug must not break the user's program
                log.debug("tuner lookup failed", exc_info=True)
                decision = self._unavailable(graph_key, platform, f"lookup failed: {type(exc).__name__}: {exc}")
                self.warn_once(f"tuner: lookup failed for graph {short(graph_key)} ({type(exc).__name__}: "
                               f"{exc}); compiling it with Inductor's defaults. This is a bug in tuner: please "
                               f"report it (the traceback is logged at DEBUG on the tuner.lookup logger)")
            self._cache[cache_key] = decision
            return decision

    def warn_once(self, message: str) -> None:
        """The process's single LookupWarning; later problems are logged at INFO."""
        if self._warn_enabled and not self._warned:
            self._warned = True
            warnings.warn(message, LookupWarning, stacklevel=2)
        else:
            log.info("%s", message)

    # -- the tiers -------------------------------------------------------------
    def _decide(self, graph_key: str, platform: "Platform") -> Decision:
        """Raises StorageError (database) or SpaceError (an exact-tier config that does not validate)."""
        from tuner.compiler import CompileConfig, compile_config

        if self._unusable is not None:
            return self._unavailable(graph_key, platform, f"database unusable: {self._unusable}")
        stored = self.store().best_configs_for_graph(graph_key)
        exact = [(b, p) for b, p in stored if p.key == platform.key]
        if exact:
            best, source = exact[0]
            config = CompileConfig() if best.is_default else compile_config(dict(best.params))
            others = tuple(StoredElsewhere(p, b, self._why_not(p, platform))
                           for b, p in stored if p.key != platform.key)
            return Decision(graph_key=graph_key, platform=platform, tier=Tier.EXACT, config=config,
                            reason=f"tuned for this graph on this platform ({_label(best)})",
                            best=best, source=source, elsewhere=others)

        same_hw = [(b, p) for b, p in stored if p.hardware_key == platform.hardware_key]
        mine = dict(platform.software)
        same_hw.sort(key=lambda bp: (dict(bp[1].software).get("torch") != mine.get("torch"),
                                     -_timestamp(bp[0])))
        rejected: dict[int, str] = {}
        for best, source in same_hw:
            try:
                config = CompileConfig() if best.is_default else compile_config(dict(best.params))
            except SpaceError as exc:
                rejected[id(best)] = f"same hardware, {_software_diff(source, platform)}; rejected: {exc}"
                continue
            others = tuple(StoredElsewhere(p, b, rejected.get(id(b)) or self._why_not(p, platform))
                           for b, p in stored if b is not best)
            return Decision(graph_key=graph_key, platform=platform, tier=Tier.SAME_HARDWARE, config=config,
                            reason=(f"tuned for this graph on this hardware under "
                                    f"{_software_diff(source, platform)}; knobs re-validated against "
                                    f"this torch ({_label(best)})"),
                            best=best, source=source, elsewhere=others)
        elsewhere = tuple(StoredElsewhere(p, b, rejected.get(id(b)) or self._why_not(p, platform))
                          for b, p in stored)
        if not stored:
            reason = "no config is stored for this graph on any platform"
        else:
            reason = f"this graph is tuned on {len(stored)} other platform(s), none usable here"
        return Decision(graph_key=graph_key, platform=platform, tier=Tier.MISS, config=CompileConfig(),
                        reason=reason, elsewhere=elsewhere)

    @staticmethod
    def _why_not(source: "Platform", platform: "Platform") -> str:
        if source.hardware_key != platform.hardware_key:
            return f"other hardware: {_hardware_diff(source, platform)}"
        return f"same hardware, {_software_diff(source, platform)}; another stored config was preferred"

    def _unavailable(self, graph_key: str, platform: "Platform", reason: str) -> Decision:
        from tuner.compiler import CompileConfig

        return Decision(graph_key=graph_key, platform=platform, tier=Tier.UNAVAILABLE,
                        config=CompileConfig(), reason=reason)

    # -- the store -------------------------------------------------------------
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
            if not keep_store:
                self._close_store()
                self._unusable = None
                self._warned = False


def _label(best: "BestConfig") -> str:
    if best.is_default:
        return "Inductor's defaults won"
    knobs = ", ".join(f"{k}={v}" for k, v in sorted(best.params.items()))
    return f"{knobs}; speedup {best.speedup:.3f}x [{best.ci_low:.3f}, {best.ci_high:.3f}]"


def _timestamp(best: "BestConfig") -> float:
    return best.created_at.timestamp() if best.created_at is not None else 0.0


def _hardware_diff(other: "Platform", mine: "Platform") -> str:
    """What differs in hardware, e.g. "threads 4 here, 2 there"."""
    a, b = dict(mine.hardware), dict(other.hardware)
    diffs = [f"{k} {a.get(k, '-')!s} here, {b.get(k, '-')!s} there" for k in sorted(set(a) | set(b))
             if a.get(k) != b.get(k)]
    if other.device != mine.device:
        diffs.insert(0, f"device {mine.device} here, {other.device} there")
    return "; ".join(diffs) or "same hardware fields, other hardware key"


def _software_diff(other: "Platform", mine: "Platform") -> str:
    a, b = dict(mine.software), dict(other.software)
    diffs = [f"{k} {b.get(k, '-')}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    return "other software (" + ", ".join(diffs) + ")" if diffs else "other software"


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
