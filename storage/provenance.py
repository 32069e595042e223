"""Where a best config came from, and which measurement it is.

`measurement_key` identifies one measurement across databases and exchange files: the same
graph, platform, knobs, evidence, author and time give the same key. History rows are
unique by it, so saving, importing or merging a measurement twice stores it once.
alembic/versions/0002_sharing.py restates this function for the rows it seeds: keep the two equal.

The fields added with schema 0004 (`eager`, `unfrozen_params`, `unfrozen_speedup`,
`unfrozen_eager`, `search_speedup`) enter the key only when set (the flags true, the others
not None), so every
measurement without them keeps the key it had before: history rows, 0002's seeded rows and
exchange files written earlier are still recognised when offered again. Schema 0007's `unsafe`
enters it only when true and not implied by the knobs (a row whose knobs include an unsafe one is
always unsafe: `tuner.storage.trust`), so the rows 0007 marks, and older files, keep their keys.
Schema 0009's `runtime` enters it only when not empty and `stability` only when not None, so every
row, history entry and exchange file from before them keeps its key.
"""
from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from typing import Any

from tuner.keys import canonical_json
from tuner.storage.records import BestConfig
from tuner.storage.trust import holds_unsafe

KEY_FIELDS = ("graph_key", "platform_key", "workload_key", "params", "is_default", "speedup",
              "ci_low", "ci_high", "rounds", "latency_ms", "baseline_ms", "user", "host",
              "tuner_version", "torch_version", "triton_version", "created_at")
_FLOATS = ("speedup", "ci_low", "ci_high", "latency_ms", "baseline_ms")


def measurement_key(best: BestConfig) -> str:
    """The hex sha256 of the measurement's canonical JSON. `best.created_at` must be set
    (and aware); `study_id`, `source` and `origin` are local to a database and not part of it;
    the fields of schemas 0004, 0007 and 0009 are part of it only when set (see the module docstring)."""
    if best.created_at is None or best.created_at.tzinfo is None:
        raise ValueError("measurement_key needs an aware created_at; set it before saving")
    data: dict[str, Any] = {name: getattr(best, name) for name in KEY_FIELDS}
    for name in _FLOATS:
        data[name] = None if data[name] is None else float(data[name])
    data["rounds"], data["is_default"] = int(data["rounds"]), bool(data["is_default"])
    data["params"] = dict(best.params)
    data["created_at"] = best.created_at.astimezone(timezone.utc).isoformat()
    if best.eager:
        data["eager"] = True
    if best.unfrozen_params is not None:
        data["unfrozen_params"] = dict(best.unfrozen_params)
    if best.unfrozen_eager:
        data["unfrozen_eager"] = True
    if best.unsafe and not any(holds_unsafe(p) for p in (best.params, best.unfrozen_params)):
        data["unsafe"] = True            # schema 0007: only when set and not implied by the knobs
    if best.runtime:
        data["runtime"] = dict(best.runtime)     # schema 0009: only when set
    for name in ("unfrozen_speedup", "search_speedup", "stability"):
        if getattr(best, name) is not None:
            data[name] = float(getattr(best, name))
    return hashlib.sha256(canonical_json(data).encode()).hexdigest()


def utc_iso(value: datetime) -> str:
    """An aware datetime as ISO 8601 in UTC, the form exchange files carry."""
    return value.astimezone(timezone.utc).isoformat()
