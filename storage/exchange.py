"""Exchange files: best configs as versioned JSON with a checksum; import, export and merge.

The format (version 6), one JSON object and nothing else (never pickle):

    {"format": "tuner-exchange", "version": 6, "checksum": "sha256:<hex>",
     "exported_at": "<ISO 8601 UTC>", "exported_by": {"user", "host", "tuner_version"},
     "platforms": [{"key", "hardware_key", "software_key", "device", "hardware", "software"}],
     "workloads": [{"key", "name", "graphs": [{"index", "key", "num_nodes", "input_meta", "code"}]}],
     "records":   [{"graph_key", "platform_key", "workload_key", "params", "is_default",
                    "speedup", "ci_low", "ci_high", "rounds", "latency_ms", "baseline_ms",
                    "user", "host", "tuner_version", "torch_version", "triton_version",
                    "created_at", "eager", "unfrozen_params", "unfrozen_speedup",
                    "unfrozen_eager", "search_speedup", "unsafe", "runtime": {knob: value},
                    "stability"}],
     "failure_rules": [{"platform_key", "knobs": {knob: value}, "failures", "created_at"}],
     "kernel_configs": [{"kernel_key", "kernel_name", "platform_key", "key_args": {name: scalar},
                         "dtypes", "config": {name: scalar}, "latency_ms", "spread_ms",
                         "configs_tried", "space_size", "user", "host", "tuner_version",
                         "torch_version", "triton_version", "created_at"}]}

Version 2 added the last five record keys (`BestConfig`'s fields of the same names: an eager
verdict, the config without freezing beside a freezing winner, its speedup, whether eager beat
every config without freezing, the winner's speedup during the search); `unfrozen_params`, `unfrozen_speedup` and `search_speedup` may be
null. Version 3 added "failure_rules": learned failures (tuner.storage.failures), each one or
two knob values that always failed to compile on a platform of the file, with the number of
compile errors behind it. Version 4 added "kernel_configs": the `kernel_configs` rows of the
file's platforms (`tuner.autotune` winners, Inductor's harvested GEMM choices and Triton kernel
configs), so a teammate importing the file launches those kernels without benchmarking. Version 5
added the record key "unsafe" (the record's search ran with `--unsafe`; lookup applies it only
where the compile call opts in); an older record reads as unsafe exactly where its knobs include
one the platform's table marks unsafe. Version 6 added the record keys "runtime" (the verdict's
runtime knobs, `tuner.runtime`, by name: {} where none apply) and "stability" (the share of
bootstrap resamples of the confirmation's held-out rounds the config won or tied; null where not
measured); an older record reads as {} and null. This tuner writes version 6 and reads versions 1
to 6: a version-1 record has exactly the other keys and reads as eager and unfrozen_eager false
with the three others null; files before version 3 have no "failure_rules" and carry none, files
before version 4 no "kernel_configs". A tuner that knows an older version refuses a newer file by
name ("upgrade tuner") instead of dropping what it cannot apply.

The checksum is the sha256 of the canonical JSON (sorted keys, no spaces) of the object
without its "checksum" member, so it does not depend on the file's layout.

An import is validated whole before anything is written: size, JSON, format and version,
checksum, then every object (required keys, no unknown keys, types, string sizes, finite
numbers), every platform, graph and workload key against a hash of its content, every
knob (in `params` and `unfrozen_params`) against the allow-list
(`tuner.search_spaces.validate_params`), and the verdict's consistency: an eager record has
empty params and is not default; `unfrozen_params` only beside params that turn freezing on,
and without freezing itself; `unfrozen_speedup` only with `unfrozen_params`; `unfrozen_eager`
only with empty `unfrozen_params`; speedups > 0. A failure rule holds one or two knobs of the
allow-list and at least 2 failures, on a platform of the file. A kernel config holds JSON
scalars in `key_args` and `config`, timings and counts not negative, on a platform of the file;
an imported one is kept where it is new or faster than the stored one. Last, every record,
rule and kernel config is checked against what its own platform can apply
(`tuner.storage.trust`: knobs of that device's table, runtime knobs of the registry that apply on
that device, evidence finite and within its cap, stability in [0, 1], kernel configs within
Inductor's limits, no control characters in any text).
Then `Store.apply_snapshot` writes everything in one transaction. Any problem raises
ExchangeError and writes nothing. The records (their keys per version, how they are written
and checked) live in `tuner.storage.exchange_records`.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tuner.errors import ExchangeError
from tuner.jsoncheck import Invalid, check_fields, check_text_map, loads_strict, show
from tuner.keys import (GraphFingerprint, Platform, Workload, canonical_json, graph_key, platform_from_parts,
                        workload_key)
from tuner.storage.exchange_records import (RECORD_LENGTHS, kernel_json, record_best, record_json, record_kernel,
                                           record_rule, rule_json)
from tuner.storage.provenance import utc_iso
from tuner.storage.records import ApplyReport, Snapshot
from tuner.storage.store import Store
from tuner.storage.urls import safe_url

FORMAT = "tuner-exchange"
VERSION = 6
MAX_FILE_BYTES = 64 * 2**20
MAX_GRAPH_CODE = 2**20                  # a graph's canonical text
MAX_INPUT_META = 256 * 2**10
MAX_ENTRIES = 64                        # keys of a platform's hardware or software

_TOP = {"format": str, "version": int, "checksum": str, "exported_at": str, "exported_by": dict,
        "platforms": list, "workloads": list, "records": list}
_TOP_V3 = {**_TOP, "failure_rules": list}
_TOP_V4 = {**_TOP_V3, "kernel_configs": list}         # versions 5 and 6 added record keys only
_BY = {"user": str, "host": str, "tuner_version": str}
_PLATFORM = {"key": str, "hardware_key": str, "software_key": str, "device": str,
             "hardware": dict, "software": dict}
_WORKLOAD = {"key": str, "name": str, "graphs": list}
_GRAPH = {"index": int, "key": str, "num_nodes": int, "input_meta": str, "code": str}
_LENGTHS = {**RECORD_LENGTHS, "key": 128, "hardware_key": 128, "software_key": 128,
            "device": 16, "name": 255, "code": MAX_GRAPH_CODE, "input_meta": MAX_INPUT_META}


@dataclass(frozen=True)
class ExportReport:
    path: str
    records: int
    platforms: int
    workloads: int
    checksum: str
    rules: int = 0                      # learned failure rules
    kernels: int = 0                    # kernel configs


# ---------------------------------------------------------------- writing

def to_document(snapshot: Snapshot, *, user: str, host: str, tuner_version: str,
                exported_at: datetime | None = None) -> dict[str, Any]:
    """The exchange object for `snapshot`, checksum included. Study ids stay behind."""
    document: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "exported_at": utc_iso(exported_at or datetime.now(timezone.utc)),
        "exported_by": {"user": user, "host": host, "tuner_version": tuner_version},
        "platforms": [{"key": p.key, "hardware_key": p.hardware_key,
                       "software_key": p.software_key, "device": p.device,
                       "hardware": dict(p.hardware), "software": dict(p.software)}
                      for p in snapshot.platforms],
        "workloads": [{"key": w.key, "name": w.name, "graphs": [asdict(g) for g in w.graphs]}
                      for w in snapshot.workloads],
        "records": [record_json(b) for b in snapshot.bests],
        "failure_rules": [rule_json(r) for r in snapshot.rules],
        "kernel_configs": [kernel_json(k) for k in snapshot.kernels],
    }
    document["checksum"] = checksum_of(document)
    return document


def checksum_of(document: dict[str, Any]) -> str:
    body = {key: value for key, value in document.items() if key != "checksum"}
    return "sha256:" + hashlib.sha256(canonical_json(body).encode()).hexdigest()


def export_file(store: Store, path: str | Path, *, workload_keys: list[str] | None = None,
                platform_keys: list[str] | None = None, user: str, host: str,
                tuner_version: str) -> ExportReport:
    """Write the selected best configs and failure rules to `path` (atomically: a temporary
    file, then a rename). Raises ExchangeError when nothing matches the selection; writes
    nothing then."""
    snapshot = store.snapshot(workload_keys=workload_keys, platform_keys=platform_keys)
    if not snapshot.bests and not snapshot.rules and not snapshot.kernels:
        raise ExchangeError(f"no best configs to export from {store.safe_url} for this "
                            f"selection; list them with: tuner db ls")
    document = to_document(snapshot, user=user, host=host, tuner_version=tuner_version)
    target = Path(path)
    text = json.dumps(document, indent=1, sort_keys=True, allow_nan=False) + "\n"
    try:
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    except OSError as exc:
        raise ExchangeError(f"cannot write {target} ({exc.strerror}); choose a writable "
                            f"--out path") from exc
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(temporary, 0o644)          # mkstemp's 0600 would hide the file from the team
        os.replace(temporary, target)
    except BaseException as exc:            # disk full, a folder in the way, an interrupt
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(exc, OSError):
            raise ExchangeError(f"cannot write {target} ({exc.strerror}); choose a writable "
                                f"--out path") from exc
        raise
    return ExportReport(path=str(target), records=len(snapshot.bests),
                        platforms=len(snapshot.platforms), workloads=len(snapshot.workloads),
                        checksum=document["checksum"], rules=len(snapshot.rules), kernels=len(snapshot.kernels))


# ---------------------------------------------------------------- reading

def read_file(path: str | Path) -> Snapshot:
    """Read and validate an exchange file. Raises ExchangeError naming the first problem."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ExchangeError(f"{path} is {size} bytes, over the {MAX_FILE_BYTES}-byte limit "
                                f"of an exchange file; export fewer configs per file "
                                f"(--workload, --platform)")
        data = path.read_bytes()
    except OSError as exc:
        raise ExchangeError(f"cannot read {path} ({exc.strerror}); check the file name") from exc
    return parse(data, name=str(path))


def parse(data: bytes, *, name: str) -> Snapshot:
    """Validate exchange bytes (see the module docstring); ExchangeError on any problem."""
    if len(data) > MAX_FILE_BYTES:
        raise ExchangeError(f"{name} is over the {MAX_FILE_BYTES}-byte limit of an exchange file")
    try:
        document = loads_strict(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise _refuse(name, f"is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise _refuse(name, f"is not valid JSON ({exc.msg} at line {exc.lineno} column "
                            f"{exc.colno}; a truncated or edited file?)") from None
    except RecursionError:
        raise _refuse(name, "nests JSON too deeply to be an exchange file") from None
    except ValueError as exc:           # from the hooks
        raise _refuse(name, str(exc)) from None
    return validate(document, name=name)


def validate(document: Any, *, name: str) -> Snapshot:
    """Check a parsed exchange object completely and return its content; ExchangeError
    naming the first problem otherwise."""
    try:
        return _validate(document, name)
    except Invalid as exc:
        raise _refuse(name, f"is invalid: {exc}") from None


def _validate(document: Any, name: str) -> Snapshot:
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise _refuse(name, f'is not a tuner exchange file (no "format": "{FORMAT}")')
    version = document.get("version")
    if type(version) is not int:
        raise _refuse(name, f"has no integer format version (got {show(version)})")
    if version > VERSION:
        raise _refuse(name, f"is exchange format version {version}, newer than this tuner's "
                            f"version {VERSION}; upgrade tuner (in its checkout: git pull, then pip install .) to read it")
    if version < 1:
        raise _refuse(name, f"has unknown exchange format version {version}")
    check_fields(document, _TOP_V4 if version >= 4 else _TOP_V3 if version >= 3 else _TOP, "the file",
                 lengths=_LENGTHS)
    if checksum_of(document) != document["checksum"]:
        raise _refuse(name, "fails its checksum: the file was changed or damaged after export; "
                            "export it again from the source database")
    check_fields(document["exported_by"], _BY, "exported_by", lengths=_LENGTHS)
    platforms = _platforms(document["platforms"])
    workloads = _workloads(document["workloads"])
    bests = tuple(record_best(record, f"record {index}", version=version, platforms=platforms)
                  for index, record in enumerate(document["records"]))
    rules = tuple(record_rule(record, f"failure rule {index}", platforms=platforms)
                  for index, record in enumerate(document.get("failure_rules", ())))
    kernels = tuple(record_kernel(record, f"kernel config {index}", platforms=platforms)
                    for index, record in enumerate(document.get("kernel_configs", ())))
    return Snapshot(platforms=tuple(platforms.values()), workloads=workloads, bests=bests, rules=rules,
                    kernels=kernels)


def _refuse(name: str, problem: str) -> ExchangeError:
    return ExchangeError(f"{name} {problem}; nothing was imported")


def _platforms(items: list[Any]) -> dict[str, Platform]:
    platforms: dict[str, Platform] = {}
    for index, item in enumerate(items):
        where = f"platform {index}"
        check_fields(item, _PLATFORM, where, lengths=_LENGTHS)
        hardware = check_text_map(item["hardware"], f"{where} hardware", max_entries=MAX_ENTRIES)
        software = check_text_map(item["software"], f"{where} software", max_entries=MAX_ENTRIES)
        rebuilt = platform_from_parts(item["device"], hardware, software)
        if (rebuilt.key, rebuilt.hardware_key, rebuilt.software_key) != (
                item["key"], item["hardware_key"], item["software_key"]):
            raise Invalid(f"{where} ({show(item['key'])}): its keys do not match its "
                           f"hardware and software")
        if rebuilt.key in platforms:
            raise Invalid(f"{where}: platform {rebuilt.key} is listed twice")
        platforms[rebuilt.key] = rebuilt
    return platforms


def _workloads(items: list[Any]) -> tuple[Workload, ...]:
    workloads: dict[str, Workload] = {}
    for index, item in enumerate(items):
        where = f"workload {index}"
        check_fields(item, _WORKLOAD, where, lengths=_LENGTHS)
        graphs = []
        for position, graph in enumerate(item["graphs"]):
            check_fields(graph, _GRAPH, f"{where} graph {position}", lengths=_LENGTHS, multiline=("code",))
            if graph["index"] != position or graph["num_nodes"] < 0:
                raise Invalid(f"{where} graph {position}: index must be {position} and "
                               f"num_nodes not negative")
            if graph_key(graph["code"]) != graph["key"]:
                raise Invalid(f"{where} graph {position}: its key does not match its code")
            graphs.append(GraphFingerprint(**graph))
        if not graphs or workload_key(g.key for g in graphs) != item["key"]:
            raise Invalid(f"{where} ({show(item['key'])}): its key does not match its graphs")
        if item["key"] in workloads:
            raise Invalid(f"{where}: workload {item['key']} is listed twice")
        workloads[item["key"]] = Workload(key=item["key"], name=item["name"], graphs=tuple(graphs))
    return tuple(workloads.values())


# ---------------------------------------------------------------- import and merge

def import_file(store: Store, path: str | Path) -> ApplyReport:
    """Validate the whole file, then write it in one transaction (see Store.apply_snapshot).
    ExchangeError or ReadOnlyDatabase: nothing was written."""
    snapshot = read_file(path)
    store.check_writable()
    return store.apply_snapshot(snapshot, source="import", origin=Path(path).name)


def merge(store: Store, source_url: str, *, user: str, host: str,
          tuner_version: str) -> ApplyReport:
    """Pull another database's best configs, failure rules and kernel configs (with their platforms and workloads) into
    `store`: read-only on the source, then the same validation and single transaction as
    an import. The source must be at this tuner's schema."""
    source_name = safe_url(source_url)
    with Store.open(source_url, readonly=True) as source:
        snapshot = source.snapshot()
    document = to_document(snapshot, user=user, host=host, tuner_version=tuner_version)
    data = json.dumps(document, allow_nan=False).encode()
    checked = parse(data, name=source_name)
    store.check_writable()
    return store.apply_snapshot(checked, source="merge", origin=source_name)
