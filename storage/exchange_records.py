"""The records of an exchange file: one best config, or one failure rule, as a JSON object.

`record_json` writes a BestConfig as a record of the current format (version 6: version 2's
keys, `unsafe`, `runtime` and `stability`); `record_best` checks one record of version 1 to 6 and
returns its BestConfig. A version-1 record lacks the verdict keys (`eager`, `unfrozen_params`,
`unfrozen_speedup`, `search_speedup`) and reads with BestConfig's defaults for them; a record
before version 5 lacks `unsafe` and reads as unsafe exactly where its knobs include an unsafe one;
a record before version 6 lacks `runtime` and `stability` and reads as {} and None.
Every record is then checked against what its own platform can apply (`tuner.storage.trust`).
`rule_json` and `record_rule` do the same for a learned failure rule (version 3), `kernel_json`
and `record_kernel` for a kernel config (version 4). The file
around the records, and the format's description, are tuner.storage.exchange's.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from tuner.errors import SpaceError
from tuner.jsoncheck import Invalid, check_fields, check_string, check_text_map, is_kind, show
from tuner.keys import Platform
from tuner.storage.failure_rows import MIN_FAILURES
from tuner.storage.provenance import utc_iso
from tuner.storage.records import BestConfig, FailureRule, KernelConfig
from tuner.storage.trust import best_problem, holds_unsafe, kernel_problem, rule_problem

MAX_STRING = 4096                       # bytes of UTF-8 of a knob's text value
_V1 = {"graph_key": str, "platform_key": str, "workload_key": str, "params": dict,
       "is_default": bool, "speedup": float, "ci_low": float, "ci_high": float,
       "rounds": int, "latency_ms": (float, None), "baseline_ms": (float, None),
       "user": str, "host": str, "tuner_version": str, "torch_version": str,
       "triton_version": str, "created_at": str}
KEYS: dict[int, dict[str, Any]] = {
    1: _V1,
    2: {**_V1, "eager": bool, "unfrozen_params": (dict, None), "unfrozen_speedup": (float, None),
        "unfrozen_eager": bool, "search_speedup": (float, None)},
}
KEYS[3] = KEYS[4] = KEYS[2]           # versions 3 and 4 added other objects, not record keys
KEYS[5] = {**KEYS[2], "unsafe": bool}  # version 5: the record's search ran with --unsafe
KEYS[6] = {**KEYS[5], "runtime": dict, "stability": (float, None)}   # version 6: runtime knobs, stability
MAX_RUNTIME_KNOBS = 16                  # entries of a record's runtime (the registry holds fewer)
RULE_KEYS = {"platform_key": str, "knobs": dict, "failures": int, "created_at": str}
# The database columns' limits, in bytes of UTF-8.
RECORD_LENGTHS = {"graph_key": 128, "platform_key": 128, "workload_key": 128, "user": 255,
                  "host": 255, "tuner_version": 64, "torch_version": 128, "triton_version": 128}
_FLOATS = ("speedup", "ci_low", "ci_high", "latency_ms", "baseline_ms", "unfrozen_speedup",
           "search_speedup", "stability")


def record_json(best: BestConfig) -> dict[str, Any]:
    """`best` as a record of the current version; `best.created_at` must be set."""
    assert best.created_at is not None
    floats = {name: None if getattr(best, name) is None else float(getattr(best, name))
              for name in _FLOATS}
    unfrozen = None if best.unfrozen_params is None else dict(best.unfrozen_params)
    return {**{name: getattr(best, name) for name in KEYS[max(KEYS)]}, **floats,
            "params": dict(best.params), "rounds": int(best.rounds), "eager": bool(best.eager),
            "unfrozen_eager": bool(best.unfrozen_eager), "unsafe": bool(best.unsafe), "runtime": dict(best.runtime),
            "unfrozen_params": unfrozen, "created_at": utc_iso(best.created_at)}


def record_best(record: Any, where: str, *, version: int,
                platforms: dict[str, Platform]) -> BestConfig:
    """The record (of format `version`, on one of `platforms`) as a BestConfig. Raises
    Invalid, one line starting with `where`, at the first problem."""
    spec = KEYS[version]
    check_fields(record, spec, where, lengths=RECORD_LENGTHS)
    where = f"{where} (graph {record['graph_key'][:12]})"
    if record["platform_key"] not in platforms:
        raise Invalid(f"{where}: platform {record['platform_key']} is not in the file's platforms")
    check_params(record["params"], where)
    if record["is_default"] and record["params"]:
        raise Invalid(f"{where}: a default-is-best record must have empty params")
    speedup, low, high = record["speedup"], record["ci_low"], record["ci_high"]
    if not (0 < low <= high and 0 < speedup) or record["rounds"] < 1:
        raise Invalid(f"{where}: evidence must have 0 < ci_low <= ci_high, speedup > 0 and "
                      f"rounds >= 1")
    for name in ("latency_ms", "baseline_ms"):
        if record[name] is not None and record[name] < 0:
            raise Invalid(f"{where}: {name} must not be negative")
    _check_verdict(record, where)
    if "runtime" in record:            # version 6: names and values from a fixed registry (trust below)
        check_text_map(record["runtime"], f"{where} runtime", max_entries=MAX_RUNTIME_KNOBS, max_string=128)
    created = _created(record["created_at"], where)
    fields = {name: record[name] for name in spec if name != "created_at"}
    for name in _FLOATS:
        if fields.get(name) is not None:
            fields[name] = float(fields[name])
    platform = platforms[record["platform_key"]]
    if "unsafe" not in fields:          # before version 5: unsafe exactly where its knobs are
        fields["unsafe"] = any(holds_unsafe(p, platform.device) for p in (record["params"], record.get("unfrozen_params")))
    best = BestConfig(**fields, created_at=created)
    problem = best_problem(best, platform)
    if problem is not None:
        raise Invalid(f"{where}: {problem} (on platform {platform.key}, a {platform.device} platform)")
    return best


def rule_json(rule: FailureRule) -> dict[str, Any]:
    """`rule` as a failure-rule record (version 3); `rule.created_at` must be set."""
    assert rule.created_at is not None
    return {"platform_key": rule.platform_key, "knobs": dict(rule.knobs), "failures": int(rule.failures),
            "created_at": utc_iso(rule.created_at)}


def record_rule(record: Any, where: str, *, platforms: dict[str, Platform]) -> FailureRule:
    """A failure-rule record (on one of `platforms`) as a FailureRule: one or two knobs of the
    allow-list, each a JSON scalar, and at least MIN_FAILURES failures. Raises Invalid, one
    line starting with `where`, at the first problem."""
    check_fields(record, RULE_KEYS, where, lengths=RECORD_LENGTHS)
    if record["platform_key"] not in platforms:
        raise Invalid(f"{where}: platform {record['platform_key']} is not in the file's platforms")
    knobs = record["knobs"]
    if not 1 <= len(knobs) <= 2:
        raise Invalid(f"{where}: a failure rule holds one or two knobs, not {len(knobs)}")
    check_params(knobs, where)
    if record["failures"] < MIN_FAILURES:
        raise Invalid(f"{where}: a failure rule needs at least {MIN_FAILURES} failures, "
                      f"got {record['failures']}")
    rule = FailureRule(platform_key=record["platform_key"], knobs=tuple(sorted(knobs.items())),
                       failures=record["failures"], created_at=_created(record["created_at"], where))
    problem = rule_problem(rule, platforms[record["platform_key"]])
    if problem is not None:
        raise Invalid(f"{where}: {problem}")
    return rule


def _created(text: str, where: str) -> datetime:
    try:
        created = datetime.fromisoformat(text)
    except ValueError:
        raise Invalid(f"{where}: created_at {show(text)} is not an ISO 8601 time") from None
    if created.tzinfo is None:
        raise Invalid(f"{where}: created_at must name its time zone (e.g. +00:00)")
    return created.astimezone(timezone.utc)


def _check_verdict(record: dict[str, Any], where: str) -> None:
    """The verdict keys (version 2) agree with the params: an eager record has none and is
    not default; `unfrozen_params` stands beside params that freeze, and does not freeze."""
    if record.get("eager") and (record["params"] or record["is_default"]):
        raise Invalid(f"{where}: an eager record must have empty params and is_default false")
    unfrozen = record.get("unfrozen_params")
    if unfrozen is not None:
        if record["params"].get("freezing") is not True:
            raise Invalid(f"{where}: unfrozen_params is only allowed when params turn freezing "
                          f"on (\"freezing\": true)")
        if unfrozen.get("freezing") is True:
            raise Invalid(f"{where}: unfrozen_params must not turn freezing on")
        check_params(unfrozen, f"{where} unfrozen_params")
        if record.get("unfrozen_eager") and unfrozen:
            raise Invalid(f"{where}: unfrozen_eager needs empty unfrozen_params")
    elif record.get("unfrozen_eager"):
        raise Invalid(f"{where}: unfrozen_eager needs unfrozen_params (empty)")
    elif record.get("unfrozen_speedup") is not None:
        raise Invalid(f"{where}: unfrozen_speedup needs unfrozen_params")
    for name in ("unfrozen_speedup", "search_speedup"):
        if record.get(name) is not None and record[name] <= 0:
            raise Invalid(f"{where}: {name} must be > 0")


def check_params(params: dict[str, Any], where: str) -> None:
    """Knob names and values of the allow-list (`tuner.search_spaces.validate_params`), each
    value a single JSON scalar; Invalid otherwise."""
    from tuner.search_spaces import validate_params

    for key, value in params.items():
        check_string(key, f"{where}: knob name", 128)
        if isinstance(value, str):
            check_string(value, f"{where}: {key}", MAX_STRING)
        elif not (value is None or isinstance(value, (bool, int, float))):
            raise Invalid(f"{where}: knob {show(key)} has a {type(value).__name__} value; "
                          f"knob values are single JSON scalars")
    try:
        validate_params(params)
    except SpaceError as exc:
        raise Invalid(f"{where}: {exc}") from None


# A kernel config record (version 4): `tuner.autotune`'s winners and Inductor's harvested choices.
KERNEL_KEYS = {"kernel_key": str, "kernel_name": str, "platform_key": str, "key_args": dict, "dtypes": str,
               "config": dict, "latency_ms": float, "spread_ms": float, "configs_tried": int, "space_size": int,
               "user": str, "host": str, "tuner_version": str, "torch_version": str, "triton_version": str,
               "created_at": str}
KERNEL_LENGTHS = {**RECORD_LENGTHS, "kernel_key": 64, "kernel_name": 255, "dtypes": 1024}
MAX_KERNEL_ENTRIES = 512                # key arguments or config entries of one kernel record


def kernel_json(kernel: KernelConfig) -> dict[str, Any]:
    """`kernel` as a kernel-config record (version 4); `kernel.created_at` must be set."""
    assert kernel.created_at is not None
    return {**{name: getattr(kernel, name) for name in KERNEL_KEYS if name not in ("key_args", "config")},
            "key_args": dict(kernel.key_args), "config": dict(kernel.config),
            "latency_ms": float(kernel.latency_ms), "spread_ms": float(kernel.spread_ms),
            "created_at": utc_iso(kernel.created_at)}


def record_kernel(record: Any, where: str, *, platforms: dict[str, Platform]) -> KernelConfig:
    """A kernel-config record (on one of `platforms`) as a KernelConfig: key arguments and config
    of JSON scalars (strings within MAX_STRING bytes), timings and counts not negative. Raises
    Invalid, one line starting with `where`, at the first problem."""
    check_fields(record, KERNEL_KEYS, where, lengths=KERNEL_LENGTHS)
    where = f"{where} ({record['kernel_name'][:40]})"
    if record["platform_key"] not in platforms:
        raise Invalid(f"{where}: platform {record['platform_key']} is not in the file's platforms")
    for name in ("key_args", "config"):
        entries = record[name]
        if len(entries) > MAX_KERNEL_ENTRIES:
            raise Invalid(f"{where}: {name} has {len(entries)} entries, over {MAX_KERNEL_ENTRIES}")
        for key, value in entries.items():
            check_string(key, f"{where} {name} key", 255)
            if isinstance(value, str):
                check_string(value, f"{where} {name} {show(key)}", MAX_STRING)
            elif not (type(value) in (bool, int) or is_kind(value, float)):
                raise Invalid(f"{where}: {name} {show(key)} is {show(value)}, not a JSON scalar")
    if min(record["latency_ms"], record["spread_ms"], record["configs_tried"], record["space_size"]) < 0:
        raise Invalid(f"{where}: timings and counts must not be negative")
    fields = {name: record[name] for name in KERNEL_KEYS if name not in ("key_args", "config", "created_at")}
    kernel = KernelConfig(**fields, key_args=tuple(record["key_args"].items()), config=tuple(record["config"].items()),
                          created_at=_created(record["created_at"], where), source="import")
    problem = kernel_problem(kernel)
    if problem is not None:
        raise Invalid(f"{where}: {problem}")
    return kernel
