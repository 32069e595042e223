"""Exchange files that must be refused whole: every malformed, tampered, oversized or hostile
document fails import with one line naming the problem, and the target database is unchanged.

Every case runs on SQLite, a sample on PostgreSQL; `test_exchange.py` has the round trips.
"""
from __future__ import annotations

import base64
import json
import pickle
from pathlib import Path
from typing import Any, Callable

import pytest

from helpers.exchange_data import BY, P_OTHER, as_version_1, exported, resign
from fixtures.sharing_data import digest
from helpers import run_cli
from tuner.errors import ExchangeError
from tuner.storage import Store, export_file, upgrade
from tuner.storage.exchange import import_file

pytest_plugins = ("helpers.exchange_data",)    # the source, target and _closing fixtures


def _knob(value: Any, name: str = "mode") -> Callable[[dict[str, Any]], Any]:
    def change(d: dict[str, Any]) -> dict[str, Any]:
        d["records"][1]["params"] = {name: value}
        return resign(d)
    return change


def _pickle_blob(canary: Path) -> str:
    class Payload:
        def __reduce__(self):
            import os
            return (os.system, (f"touch {canary}",))
    return base64.b64encode(pickle.dumps(Payload())).decode()


def _tampered(d: dict[str, Any]) -> dict[str, Any]:
    d["records"][0]["ci_low"] = 9.0          # a better claim, checksum left as it was
    return d


def _freezing(d: dict[str, Any], unfrozen: dict[str, Any]) -> dict[str, Any]:
    d["records"][0]["params"] = {"freezing": True, "max_autotune": True}
    d["records"][0]["unfrozen_params"] = unfrozen
    return resign(d)


def _set(path: tuple, value: Any, *, sign: bool = True) -> Callable[[dict[str, Any]], Any]:
    def change(d: dict[str, Any]) -> dict[str, Any]:
        target: Any = d
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value
        return resign(d) if sign else d
    return change


REFUSED = {
    "tampered checksum": (_tampered, "fails its checksum"),
    "truncated file": ("truncate", "is not valid JSON"),
    "unknown knob": (_knob(True, "max_autotune_everything"), "unknown knob 'max_autotune_everything'"),
    "out-of-range value": (_knob(10**6, "cpp.min_chunk_size"), "outside"),
    "wrong type": (_knob("yes", "max_autotune"), "is not a bool"),
    "10 MB string": (_knob("x" * 10_000_000), "10000000-byte string, over the 4096-byte limit"),
    "10 MB user": (_set(("records", 0, "user"), "x" * 10_000_000), "over the 255-byte limit"),
    "10 MB graph code": (_set(("workloads", 0, "graphs", 0, "code"), "x" * 10_000_000),
                         "over the 1048576-byte limit"),
    "future version": (_set(("version",), 7), "version 7, newer than this tuner's version 6"),
    "not an exchange file": (_set(("format",), "pickle"), "not a tuner exchange file"),
    "unknown record key": (_set(("records", 0, "__reduce__"), "os.system"), "unknown key(s) '__reduce__'"),
    "missing key": (lambda d: (d["records"][0].pop("ci_low"), resign(d))[1], "lacks required key(s) ci_low"),
    "platform key not its hash": (_set(("platforms", 0, "hardware", "cpu_model"), "H200"), "do not match"),
    "graph key not its hash": (_set(("workloads", 0, "graphs", 0, "code"), "print(1)"), "does not match its code"),
    "non-finite number": ("nan", "not a finite number"),
    "duplicate key": ("duplicate", "repeats the key"),
    "bool as int": (_set(("records", 0, "rounds"), True), "rounds must be int"),
    "nested knob value": (_knob({"__reduce__": ["os.system", ["id"]]}), "single JSON scalars"),
    "python expression as knob": (_knob("__import__('os').system('touch CANARY')"), "is not one of"),
    "pickle blob as knob": (_knob("PICKLE"), "is not one of"),
    "evidence out of order": (_set(("records", 0, "ci_low"), 3.0), "ci_low <= ci_high"),
    "naive time": (_set(("records", 0, "created_at"), "2026-05-10T12:00:00"), "time zone"),
    "default with params": (_set(("records", 3, "params"), {"max_autotune": True}), "empty params"),
    "eager with params": (_set(("records", 0, "eager"), True),
                          "an eager record must have empty params and is_default false"),
    "eager and default": (_set(("records", 3, "eager"), True), "is_default false"),
    "unfrozen without freezing": (_set(("records", 0, "unfrozen_params"), {"max_autotune": True}),
                                  'only allowed when params turn freezing on ("freezing": true)'),
    "unknown unfrozen knob": (lambda d: _freezing(d, {"bogus_knob": 1}),
                              "unfrozen_params: invalid knob params: unknown knob 'bogus_knob'"),
    "unfrozen knob out of range": (lambda d: _freezing(d, {"cpp.min_chunk_size": 10**6}), "outside"),
    "unfrozen freezes": (lambda d: _freezing(d, {"freezing": True}),
                         "unfrozen_params must not turn freezing on"),
    "nested unfrozen value": (lambda d: _freezing(d, {"mode": ["os.system"]}), "single JSON scalars"),
    "unfrozen eager alone": (_set(("records", 0, "unfrozen_eager"), True),
                             "unfrozen_eager needs unfrozen_params (empty)"),
    "unfrozen eager with knobs": (lambda d: (_freezing(d, {"max_autotune": True}),
                                             d["records"][0].__setitem__("unfrozen_eager", True), resign(d))[2],
                                  "unfrozen_eager needs empty unfrozen_params"),
    "unfrozen speedup alone": (_set(("records", 0, "unfrozen_speedup"), 1.1),
                               "unfrozen_speedup needs unfrozen_params"),
    "search speedup not positive": (_set(("records", 0, "search_speedup"), 0.0),
                                    "search_speedup must be > 0"),
    "search speedup as text": (_set(("records", 0, "search_speedup"), "1.2"),
                               "search_speedup must be float or null"),
    "overflowing speedup": ("overflow", "unfrozen_speedup must be float or null"),
    "eager as int": (_set(("records", 0, "eager"), 1), "eager must be bool"),
    # Checked against what the record's own (CPU) platform can apply (tuner.storage.trust, issue 22).
    "CUDA-only knob on a CPU platform": (_knob(True, "use_fast_math"), "'use_fast_math' is not one tuner sets on cpu"),
    "CUDA-only value on a CPU platform": (_knob("TRITON", "max_autotune_gemm_backends"),
                                          "max_autotune_gemm_backends: value 'TRITON' is not one of"),
    "unsafe CUDA knob, flagged": (lambda d: (_knob(True, "assume_32bit_indexing")(d),
                                             d["records"][1].__setitem__("unsafe", True), resign(d))[2],
                                  "'assume_32bit_indexing' is not one tuner sets on cpu"),
    "unsafe knob, unflagged": (lambda d: (_knob(256, "cpp.simdlen")(d), d["records"][1].__setitem__("unsafe", False),
                                          resign(d))[2], "does not record a search run with --unsafe"),
    "ci_low 1e300": (lambda d: (d["records"][0].update(ci_low=1e300, speedup=1e300, ci_high=1e300), resign(d))[1],
                     "ci_high <= 100"),
    "speedup outside its interval": (_set(("records", 0, "speedup"), 9.0), "ci_low <= speedup <= ci_high"),
    "rounds unbounded": (_set(("records", 0, "rounds"), 10**9), "rounds 1000000000 is outside"),
    "terminal escape in user": (_set(("records", 0, "user"), "\x1b]52;c;cm0gLXJmIH4=\x07"), "control character"),
    "C1 control in a knob value": (_knob("ATEN\x9b2K", "max_autotune_gemm_backends"), "control character"),
    "version 2 without eager": (lambda d: (d["records"][0].pop("eager"), resign(d))[1],
                                "lacks required key(s) eager"),
    "version 1 with a version-2 key": (lambda d: resign({**as_version_1(d), "records": [
        {**as_version_1(d)["records"][0], "search_speedup": 1.2}]}), "unknown key(s) 'search_speedup'"),
}


# Validation happens before any write, whatever the backend: every case runs on SQLite, and
# a sample on PostgreSQL (where "unchanged" is checked the same way).
ON_POSTGRES = ("tampered checksum", "future version", "out-of-range value", "pickle blob as knob")
CASES = [pytest.param(case, "sqlite", id=f"sqlite-{case}") for case in REFUSED] + [
    pytest.param(case, "postgres", id=f"postgres-{case}", marks=pytest.mark.postgres)
    for case in ON_POSTGRES]


@pytest.mark.parametrize(("case", "backend"), CASES)
def test_bad_files_are_refused_whole(case: str, backend: str, source: Store, tmp_path: Path,
                                     request: pytest.FixtureRequest) -> None:
    db_url = (f"sqlite:///{tmp_path / 'target.db'}" if backend == "sqlite"
              else request.getfixturevalue("postgres_url"))
    upgrade(db_url)
    target = request.getfixturevalue("_closing")(Store.open(db_url))
    canary = tmp_path / "CANARY"
    good = exported(source, tmp_path / "good.json")
    import_file(target, exported(source, tmp_path / "first.json", platform_keys=[P_OTHER.key]))
    change, message = REFUSED[case]
    text = good.read_text()
    document = json.loads(text)
    document["records"].sort(key=lambda r: r["is_default"])     # record 3 is the default one
    document = resign(document)
    if change == "truncate":
        data = text[: len(text) // 2]
    elif change == "nan":
        data = json.dumps(resign(document)).replace('"speedup": 1.2', '"speedup": NaN', 1)
    elif change == "overflow":                 # 1e999 parses as inf: JSON without NaN/Infinity
        document = _freezing(document, {"max_autotune": True})
        document["records"][0]["unfrozen_speedup"] = float("inf")
        data = json.dumps(resign(document)).replace("Infinity", "1e999")
    elif change == "duplicate":
        data = json.dumps(document).replace('"rounds": 15,', '"rounds": 15, "rounds": 99,', 1)
    else:
        data = json.dumps(change(document))
    if "CANARY" in data or "PICKLE" in data:       # the payload names this test's canary file
        data = data.replace("CANARY", str(canary)).replace("PICKLE", _pickle_blob(canary))
        data = json.dumps(resign(json.loads(data)))
    bad = tmp_path / "bad.json"
    bad.write_text(data)
    before = digest(db_url)
    with pytest.raises(ExchangeError) as caught:
        import_file(target, bad)
    assert message in str(caught.value) and "nothing was imported" in str(caught.value)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 600
    assert digest(db_url) == before
    assert not canary.exists()


def test_smuggled_text_stays_text(source: Store, target: Store, tmp_path: Path) -> None:
    """Code in a free-text field (user, host) is stored as inert text; nothing runs, then or later."""
    canary = tmp_path / "CANARY"
    document = json.loads(exported(source, tmp_path / "good.json").read_text())
    document["records"][0]["user"] = _pickle_blob(canary)[:255]
    document["records"][0]["host"] = f"__import__('os').system('touch {canary}')"
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(resign(document)))
    import_file(target, path)
    export_file(target, tmp_path / "again.json", **BY)
    stored = [b for b in target.snapshot().bests if b.host.startswith("__import__")]
    assert len(stored) == 1 and stored[0].user == _pickle_blob(canary)[:255]
    assert not canary.exists()


def test_cli_refusals_are_one_line(source: Store, db_url: str, tmp_path: Path) -> None:
    upgrade(db_url)
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "tuner-exchange", "version": 7}')
    done = run_cli("db", "import", str(bad), "--db", db_url, cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1
    assert "version 7, newer than this tuner's version 6" in done.stderr
    done = run_cli("db", "export", "--out", str(tmp_path / "x.json"), "--workload", "nope",
                   "--db", source.safe_url, cwd=tmp_path)
    assert done.returncode == 2 and "no workload 'nope'" in done.stderr
    done = run_cli("db", "ls", "--db", db_url, cwd=tmp_path)
    assert done.returncode == 0 and "no best configs" in done.stderr
