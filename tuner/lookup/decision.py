"""Decisions: which stored config applies to one graph on one platform, as pure functions.

`decide_tier` holds the tier rules; it reads no database and keeps no state, so it is
tested with hand-made values. `tuner.lookup.Lookup` feeds it the rows the store returns
(and turns its failures into Inductor's defaults); `tuner.lookup.explanation` words its result.
Three tiers, in order:

1. **exact**: a config stored for this graph key on exactly this platform key;
2. **same-hardware**: a config stored for this graph key on a platform with the same
   hardware key but other software (torch, triton, CUDA, Python, tuner versions), used
   only after `compiler.compile_config` re-validates every knob name and value type
   against the allow-list and the installed torch. The same torch version is tried
   first, then the newest config.

3. **nearest-bucket** (`decide_nearest_bucket`, only for a graph with no config stored on any
   platform here): the graph is one of a shape-bucket search's graphs (`tuner search
   --shapes`) at a size no bucket has; it takes the config of the nearest bucket of the same
   graph on this platform, by `tuner.workload.nearest` (largest size ratio, ties to the larger
   bucket). A symbolic (dynamic) graph is never near a static one; `bucket_decisions` gives it
   one decision per bucket it binds instead, which the backend compiles and dispatches among
   (`tuner.lookup.dispatch`).

Anything else is a miss: Inductor's defaults.

What a backend then does with a decision is `tuner.lookup.choice.backend_choice`.

Every stored row is untrusted input: before a tier uses one, `tuner.storage.trust.best_problem`
checks it against what this platform can apply (knobs of this device's table, values in range,
evidence finite and within its cap, no control characters); a row that fails raises SpaceError
like a knob this torch lacks, so `Lookup` skips it with one warning and compiles with defaults.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Sequence

from tuner.errors import SpaceError
from tuner.inductor import CompileConfig, compile_config
from tuner.lookup.dispatch import bind
from tuner.text import key_values
from tuner.workload import nearest, size_distance

if TYPE_CHECKING:
    from tuner.keys import GraphFingerprint, Platform
    from tuner.storage import BestConfig


class Tier(str, enum.Enum):
    EXACT = "exact"                    # this graph on this platform
    SAME_HARDWARE = "same-hardware"    # this graph on this hardware, other software versions
    NEAREST_BUCKET = "nearest-bucket"  # this graph at another size: the nearest tuned --shapes bucket
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
    """Which stored config applies to one graph, and why.

    `config` is the stored config as measured (freezing included), re-validated; it is
    `CompileConfig()` (Inductor's defaults) on a miss, and on a hit whose stored verdict is
    "defaults won" or "eager won" (`eager`). `unfrozen` is the stored config measured without
    freezing beside a freezing `config` (re-validated too), None when none is stored. What a
    backend applies is `backend_choice(decision, ...)`. `source` is the platform the stored
    config was measured on.
    """

    graph_key: str
    platform: "Platform | None"        # None only when the platform itself could not be read
    tier: Tier
    config: CompileConfig
    reason: str                        # one line for logs and `tuner explain`
    best: "BestConfig | None" = None
    source: "Platform | None" = None
    elsewhere: tuple[StoredElsewhere, ...] = ()
    unfrozen: CompileConfig | None = None

    @property
    def hit(self) -> bool:
        return self.tier in (Tier.EXACT, Tier.SAME_HARDWARE, Tier.NEAREST_BUCKET)

    @property
    def eager(self) -> bool:
        """The stored verdict is "eager won": run this graph uncompiled."""
        return self.hit and self.best is not None and self.best.eager


def short(key: str) -> str:
    return key[:12]


def decide_tier(graph_key: str, platform: "Platform",
                stored_rows: Sequence[tuple["BestConfig", "Platform"]]) -> Decision:
    """The decision for `graph_key` on `platform`, given every (best config, its platform)
    stored for that graph key (`Store.best_configs_for_graph`). Reads nothing else.

    Raises SpaceError when the exact-tier config does not validate (the caller decides
    what that means; `Lookup` falls back to defaults). A same-hardware config that does not
    validate is skipped and named in `elsewhere`. A miss returns tier MISS.
    """
    exact = [(b, p) for b, p in stored_rows if p.key == platform.key]
    if exact:
        best, source = exact[0]
        others = tuple(StoredElsewhere(p, b, _why_not(p, platform)) for b, p in stored_rows if p.key != platform.key)
        return Decision(graph_key=graph_key, platform=platform, tier=Tier.EXACT, config=_config_of(best, platform),
                        reason=f"tuned for this graph on this platform ({_label(best)})",
                        best=best, source=source, elsewhere=others, unfrozen=_unfrozen_of(best))

    same_hw = [(b, p) for b, p in stored_rows if p.hardware_key == platform.hardware_key]
    mine = dict(platform.software)
    same_hw.sort(key=lambda bp: (dict(bp[1].software).get("torch") != mine.get("torch"), -_timestamp(bp[0])))
    rejected: dict[int, str] = {}
    for best, source in same_hw:
        try:
            config, unfrozen = _config_of(best, platform), _unfrozen_of(best)
        except SpaceError as exc:
            rejected[id(best)] = f"same hardware, {_software_diff(source, platform)}; rejected: {exc}"
            continue
        others = tuple(StoredElsewhere(p, b, rejected.get(id(b)) or _why_not(p, platform))
                       for b, p in stored_rows if b is not best)
        return Decision(graph_key=graph_key, platform=platform, tier=Tier.SAME_HARDWARE, config=config,
                        reason=(f"tuned for this graph on this hardware under "
                                f"{_software_diff(source, platform)}; knobs re-validated against "
                                f"this torch ({_label(best)})"),
                        best=best, source=source, elsewhere=others, unfrozen=unfrozen)
    elsewhere = tuple(StoredElsewhere(p, b, rejected.get(id(b)) or _why_not(p, platform)) for b, p in stored_rows)
    if not stored_rows:
        reason = "no config is stored for this graph on any platform"
    else:
        reason = f"this graph is tuned on {len(stored_rows)} other platform(s), none usable here"
    return Decision(graph_key=graph_key, platform=platform, tier=Tier.MISS, config=CompileConfig(),
                    reason=reason, elsewhere=elsewhere)


def decide_nearest_bucket(miss: Decision, code: str,
                          buckets: Sequence[tuple[str, "GraphFingerprint", "BestConfig"]]) -> Decision:
    """`miss` (a MISS for the graph whose canonical text is `code`) turned into a NEAREST_BUCKET
    hit on the config of the nearest of `buckets` (workload name, bucket graph, its config on
    `miss.platform`: `Store.bucket_configs`) by `tuner.workload.nearest`; `miss` itself when no
    bucket is the same graph at other sizes. Raises SpaceError when that config does not validate."""
    found = nearest(code, [graph.code for _, graph, _ in buckets])
    if found is None:
        return miss
    name, graph, best = buckets[found]
    ratio = math.exp(size_distance(code, graph.code) or 0.0)
    assert miss.platform is not None
    return replace(miss, tier=Tier.NEAREST_BUCKET, config=_config_of(best, miss.platform), best=best,
                   source=miss.platform,
                   unfrozen=_unfrozen_of(best),
                   reason=(f"a shape no bucket was tuned at: nearest tuned bucket {name} (graph {short(graph.key)}, "
                           f"sizes up to {ratio:.2f}x apart): {_label(best)}"))


def bucket_decisions(graph_key: str, platform: "Platform", code: str,
                     buckets: Sequence[tuple[str, "GraphFingerprint", "BestConfig"]],
                     ) -> list[tuple[dict[str, int], Decision]]:
    """For a graph with symbolic sizes (canonical text `code`), one NEAREST_BUCKET decision per
    bucket graph it is at fixed sizes (`tuner.lookup.dispatch.bind`), with that bucket's sizes by symbol:
    what the backend compiles a copy of the graph for and dispatches among. Empty when none binds.
    Raises SpaceError when a bucket's config does not validate."""
    found = []
    for name, graph, best in buckets:
        sizes = bind(code, graph.code)
        if sizes is not None:
            found.append((sizes, Decision(
                graph_key=graph_key, platform=platform, tier=Tier.NEAREST_BUCKET, config=_config_of(best, platform),
                best=best, source=platform, unfrozen=_unfrozen_of(best),
                reason=f"bucket {name} of this dynamic graph (graph {short(graph.key)}): {_label(best)}")))
    return found


def _config_of(best: "BestConfig", platform: "Platform") -> CompileConfig:
    """The stored config as a CompileConfig, checked against what `platform` (this one) can apply
    (`tuner.storage.trust.best_problem`, the row as a whole: evidence, text, both knob sets) and
    re-validated against this torch; SpaceError naming the problem if not. Call it before
    `_unfrozen_of`, which relies on the row check done here."""
    from tuner.storage import best_problem    # lazy: the storage's face loads SQLAlchemy

    problem = best_problem(best, platform)
    if problem is not None:
        raise SpaceError(f"the row is not one this {platform.device} platform can apply: {problem}")
    return CompileConfig() if best.is_default or best.eager else compile_config(dict(best.params))


def _unfrozen_of(best: "BestConfig") -> CompileConfig | None:
    """The config measured without freezing, re-validated like the params (SpaceError if not,
    or if it turns freezing on after all)."""
    if best.unfrozen_params is None:
        return None
    config = compile_config(dict(best.unfrozen_params))
    if config.freezing:
        raise SpaceError("the config stored as measured without freezing turns freezing on; "
                         "re-tune the model with: tuner search MODEL_FILE")
    return config


def _why_not(source: "Platform", platform: "Platform") -> str:
    if source.hardware_key != platform.hardware_key:
        return f"other hardware: {_hardware_diff(source, platform)}"
    return f"same hardware, {_software_diff(source, platform)}; another stored config was preferred"


def _label(best: "BestConfig") -> str:
    if best.is_default:
        return "Inductor's defaults won"
    if best.eager:
        return (f"eager won: runs uncompiled; speedup {best.speedup:.3f}x [{best.ci_low:.3f}, "
                f"{best.ci_high:.3f}] over the default compile")
    knobs = key_values(sorted(best.params.items()))
    unsafe = "; from a search run with --unsafe" if best.unsafe else ""
    return f"{knobs}; speedup {best.speedup:.3f}x [{best.ci_low:.3f}, {best.ci_high:.3f}]{unsafe}"


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
