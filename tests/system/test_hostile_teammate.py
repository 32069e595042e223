"""A hostile teammate (issue 22): someone with write access to the shared database, or who hands over
an exchange file, tries to break, slow or silently change another user's program.

For each attack, on SQLite and on the real PostgreSQL test server: raw rows written with SQL (what
write access allows, no tuner code involved), and separately a crafted exchange file with its
checksum recomputed. Then a fresh process, the user's own program, compiles the tiny MLP with
`torch.compile(model, backend="tuner")` and with `tuner.compile(model, db=...)`: its output equals
eager within tolerance, it never raises, one LookupWarning names the cause, and no row the
database held changes. The server-side case is a server that accepts the connection and then stops
answering (tests/helpers/stalling_proxy.py on 127.0.0.1), bounded by TUNER_LOOKUP_TIMEOUT.

Kernel-config attacks are not replayed here: on a CPU the backend reads kernel rows only for the
GEMM feed, under keys only a real GEMM harvest produces; they are refused at import
(test_kernel_exchange.py) and skipped at lookup in process (test_trust.py, test_bounded.py).
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from helpers.exchange_data import BY, resign
from fixtures.sharing_data import best, digest, workload
from helpers import MODELS, cli_env
from helpers.stalling_proxy import StallingProxy
from helpers.stored import tiny_workload

TIMEOUT_S = 2.0                 # TUNER_LOOKUP_TIMEOUT in the user's program
GRACE_S = 1.5                   # the client-side deadline's grace, on a loaded machine
ESCAPE = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2K"     # a clipboard write, then a line erase

# name: (column -> value written with SQL over a teammate's honest row, what the one warning says)
RAW_ROWS: dict[str, tuple[dict[str, Any], str]] = {
    "CUDA-only value on a CPU": ({"params": {"max_autotune": True, "max_autotune_gemm_backends": "TRITON"}},
                                 "max_autotune_gemm_backends: value 'TRITON' is not one of"),
    "CUDA-only unsafe knob": ({"params": {"assume_32bit_indexing": True}, "unsafe": True},
                              "'assume_32bit_indexing' is not one tuner sets on cpu"),
    "unsafe knob, flag cleared": ({"params": {"cpp.simdlen": 256}, "unsafe": False},
                                  "does not record a search run with --unsafe"),
    "ci_low 1e300": ({"ci_low": 1e300, "speedup": 1e300, "ci_high": 1e300}, "ci_high <= 100"),
    "speedup outside its interval": ({"speedup": 50.0}, "ci_low <= speedup <= ci_high"),
    "terminal escapes in user": ({"user": ESCAPE}, "user contains the control character U+001B"),
    "params a JSON list": ({"params": [1, 2]}, "params is a list, not a mapping"),
    "allocator as a path": ({"runtime": {"runtime.allocator": "/tmp/evil.so"}},
                            "runtime.allocator: value '/tmp/evil.so' is not one of"),
    "stability 1.5": ({"stability": 1.5}, "stability 1.5 is outside [0, 1]"),
}
UNSAFE = "unsafe row, no opt-in"            # an honest --unsafe row: defaults and the opt-in message
STALLED = "server stalls after connect"
OPT_IN = "opt in with options={'unsafe': True} or tuner.compile(model, unsafe=True)"

PROGRAM = textwrap.dedent('''
    import json, logging, os, sys, time, warnings
    import torch
    sys.path.insert(0, {models!r})
    import tiny_mlp
    import tuner
    from tuner.lookup import Lookup, LookupWarning, reset_process_lookup

    logs, spent = [], []

    class Keep(logging.Handler):
        def emit(self, record):
            logs.append(record.getMessage())

    logging.getLogger("tuner").addHandler(Keep(logging.WARNING))
    decide = Lookup.decide

    def timed(self, *args, **kwargs):           # how long each lookup took (a probe, not a change)
        start = time.perf_counter()
        try:
            return decide(self, *args, **kwargs)
        finally:
            spent.append(time.perf_counter() - start)

    Lookup.decide = timed
    report = []
    for case, url in json.loads(sys.argv[1]).items():
        for way in ("backend", "tuner.compile"):
            torch._dynamo.reset()
            torch.manual_seed(0)
            model, x = tiny_mlp.get_model(), torch.randn(8, 32)
            before_logs, before_spent = len(logs), len(spent)
            with warnings.catch_warnings(record=True) as caught, torch.no_grad():
                warnings.simplefilter("always")
                try:
                    if way == "backend":
                        os.environ["TUNER_DB"] = url
                        reset_process_lookup()
                        compiled = torch.compile(model, backend="tuner")
                    else:
                        compiled = tuner.compile(model, db=url)
                    err, raised = max(float((compiled(x) - model(x)).abs().max()) for _ in range(2)), None
                except BaseException as exc:
                    err, raised = None, f"{{type(exc).__name__}}: {{exc}}"
            report.append(dict(case=case, way=way, err=err, raised=raised, logs=logs[before_logs:],
                               decide_s=max(spent[before_spent:], default=0.0),
                               warnings=[str(w.message) for w in caught if issubclass(w.category, LookupWarning)]))
    print("REPORT " + json.dumps(report))
''')


def _user_program(databases: dict[str, str], tmp_path: Path) -> dict[tuple[str, str], dict]:
    """Run the user's program in a fresh process against each case's database; its report per
    (case, way). The process must exit 0 whatever the database holds."""
    program = tmp_path / "program.py"
    program.write_text(PROGRAM.format(models=str(MODELS)))
    done = subprocess.run([sys.executable, str(program), json.dumps(databases)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, env=cli_env(TUNER_LOOKUP_TIMEOUT=str(TIMEOUT_S)))
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("REPORT "))
    return {(r["case"], r["way"]): r for r in json.loads(line.removeprefix("REPORT "))}


def _ran_as_eager(run: dict) -> None:
    assert run["raised"] is None, run
    assert run["err"] is not None and run["err"] < 1e-5, run


# -- the databases ---------------------------------------------------------------------

@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def databases(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """`new(name)`: the URL of a new, empty database of this backend (one per case: a row is unique
    per graph and platform, so each attack needs its own database)."""
    made: list[str] = []
    server = request.getfixturevalue("postgres_server") if request.param == "postgres" else None

    def new(name: str) -> str:
        if server is None:
            return f"sqlite:///{tmp_path / (uuid.uuid4().hex[:8] + '.db')}"
        made.append(f"h_{uuid.uuid4().hex[:16]}")
        server.execute(f"CREATE DATABASE {made[-1]}")
        return server.url(made[-1])

    new.server = server                                  # type: ignore[attr-defined]
    yield new
    for name in made:
        server.execute(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'",
                       f"DROP DATABASE IF EXISTS {name}")


USER_W = workload("resnet", "conv")


def _seeded(url: str, *, teammate: dict[str, Any] | None = None):
    """A database holding the user's own row (another model, this platform) and, with `teammate`,
    an honest row for every graph of the tiny MLP (BestConfig fields over max_fusion_size=8).
    Returns the user's row as stored."""
    from tuner.platform import current_platform
    from tuner.storage import Store, upgrade

    here, tiny = current_platform("cpu"), tiny_workload()
    upgrade(url)
    with Store.open(url) as store:
        store.ensure_platform(here)
        store.ensure_workload(USER_W)
        store.save_best(best(USER_W, here, params={"max_fusion_size": 16}, user="me"))
        if teammate is not None:
            store.ensure_workload(tiny)
            for graph in range(len(tiny.graphs)):
                store.save_best(replace(best(tiny, here, graph=graph, params={"max_fusion_size": 8}, user="mate"),
                                        **teammate))
        return store.best_config(USER_W.graphs[0].key, here.key)


JSON_COLUMNS = ("params", "runtime")


def _write_with_sql(url: str, columns: dict[str, Any]) -> None:
    """What a teammate with write access can do without any tuner code: UPDATE the tiny MLP's rows."""
    from sqlalchemy import bindparam, text

    from tuner.storage.engine import make_engine        # the URL's driver as tuner picks it, nothing else

    keys = [g.key for g in tiny_workload().graphs]
    json_cast = "CAST(:{0} AS json)" if url.startswith("postgresql") else ":{0}"
    sets = ", ".join(f'"{name}" = ' + (json_cast.format(name) if name in JSON_COLUMNS else f":{name}") for name in columns)
    values = {name: json.dumps(value) if name in JSON_COLUMNS else value for name, value in columns.items()}
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            statement = text(f"UPDATE best_configs SET {sets} WHERE graph_key IN :keys").bindparams(
                bindparam("keys", expanding=True))
            assert connection.execute(statement, {**values, "keys": keys}).rowcount == len(keys)
    finally:
        engine.dispose()


def _users_row(url: str):
    from tuner.platform import current_platform
    from tuner.storage import Store

    with Store.open(url, readonly=True) as store:
        return store.best_config(USER_W.graphs[0].key, current_platform("cpu").key)


def _proxied(url: str, port: int) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).set(host="127.0.0.1", port=port, query={"sslmode": "disable"}).render_as_string(
        hide_password=False)


@pytest.mark.slow
def test_raw_rows_never_break_slow_or_change_the_users_program(databases, tmp_path: Path) -> None:
    urls, mine = {}, {}
    for case, (columns, _) in RAW_ROWS.items():
        urls[case] = databases(case)
        mine[case] = _seeded(urls[case], teammate={})
        _write_with_sql(urls[case], columns)
    urls[UNSAFE] = databases(UNSAFE)
    mine[UNSAFE] = _seeded(urls[UNSAFE], teammate={"unsafe": True})
    before = {case: digest(url) for case, url in urls.items()}
    server = databases.server                                 # type: ignore[attr-defined]
    if server is None:
        runs = _user_program(urls, tmp_path)
    else:                                                     # the stall: accept, then never answer
        stalled = databases(STALLED)
        mine[STALLED] = _seeded(stalled, teammate={})
        before[STALLED] = digest(stalled)
        with StallingProxy(server.port, stall_after=b"best_configs") as proxy:
            runs = _user_program({**urls, STALLED: _proxied(stalled, proxy.port)}, tmp_path)
            assert proxy.stalled.is_set()
        urls[STALLED] = stalled
    for case, url in urls.items():
        assert digest(url) == before[case], f"{case}: the user's program changed the database"
        assert _users_row(url) == mine[case], f"{case}: the user's own row changed"
    for case, (_, cause) in RAW_ROWS.items():
        for way in ("backend", "tuner.compile"):
            run = runs[case, way]
            _ran_as_eager(run)
            assert len(run["warnings"]) == 1 and cause in run["warnings"][0], run
            assert "\x1b" not in run["warnings"][0] and "\x07" not in run["warnings"][0]
    said = [m for way in ("backend", "tuner.compile") for m in runs[UNSAFE, way]["logs"] if OPT_IN in m]
    assert len(said) == 1, runs[UNSAFE, "backend"]             # once per process
    for way in ("backend", "tuner.compile"):
        _ran_as_eager(runs[UNSAFE, way])
        assert runs[UNSAFE, way]["warnings"] == [], runs[UNSAFE, way]
    if server is not None:
        for way in ("backend", "tuner.compile"):
            run = runs[STALLED, way]
            _ran_as_eager(run)
            # The first connection stalls at its first query; the proxy then stalls every later one at
            # login, so the second lookup's connect times out instead: the same server, both bounded.
            cause = "did not answer within" if way == "backend" else "timeout expired"
            assert len(run["warnings"]) == 1 and cause in run["warnings"][0], run["warnings"]
            assert run["decide_s"] <= TIMEOUT_S + GRACE_S, run


# -- crafted exchange files --------------------------------------------------------------

def _file_case(params: dict | None = None, **fields: Any) -> Callable[[dict], dict]:
    def change(document: dict) -> dict:
        for record in document["records"]:
            record.update(fields)
            if params is not None:
                record["params"] = params
        return resign(document)
    return change


FILES: dict[str, tuple[Callable[[dict], dict], str]] = {
    "CUDA-only value on a CPU": (_file_case({"max_autotune": True, "max_autotune_gemm_backends": "TRITON"}),
                                 "max_autotune_gemm_backends: value 'TRITON' is not one of"),
    "CUDA-only unsafe knob": (_file_case({"assume_32bit_indexing": True}, unsafe=True),
                              "'assume_32bit_indexing' is not one tuner sets on cpu"),
    "unsafe knob, flag cleared": (_file_case({"cpp.simdlen": 256}, unsafe=False),
                                  "does not record a search run with --unsafe"),
    "ci_low 1e300": (_file_case(ci_low=1e300, speedup=1e300, ci_high=1e300), "ci_high <= 100"),
    "speedup outside its interval": (_file_case(speedup=50.0), "ci_low <= speedup <= ci_high"),
    "rounds unbounded": (_file_case(rounds=10**9), "rounds 1000000000 is outside"),
    "terminal escapes in user": (_file_case(user=ESCAPE), "control character U+001B"),
    "allocator as a path": (_file_case(runtime={"runtime.allocator": "/tmp/evil.so"}),
                            "runtime.allocator: value '/tmp/evil.so' is not one of"),
    "CUDA runtime knob on a CPU": (_file_case(runtime={"runtime.cuda_alloc_conf": "expandable-segments"}),
                                   "runtime.cuda_alloc_conf applies to cuda platforms, not cpu"),
    "stability 1.5": (_file_case(stability=1.5), "stability 1.5 is outside [0, 1]"),
}


@pytest.mark.slow
def test_crafted_exchange_files_are_refused_and_the_users_program_is_untouched(databases, tmp_path: Path) -> None:
    from tuner.errors import ExchangeError
    from tuner.storage import Store, export_file
    from tuner.storage.exchange import import_file

    source = databases("source")
    _seeded(source, teammate={})
    with Store.open(source) as store:
        export_file(store, tmp_path / "honest.json", workload_keys=[tiny_workload().key], **BY)
    honest = json.loads((tmp_path / "honest.json").read_text())
    target = databases("target")
    mine = _seeded(target)
    before = digest(target)
    with Store.open(target) as store:
        for case, (change, cause) in FILES.items():
            crafted = tmp_path / "crafted.json"
            crafted.write_text(json.dumps(change(json.loads(json.dumps(honest)))))
            with pytest.raises(ExchangeError) as refused:
                import_file(store, crafted)
            message = str(refused.value)
            assert cause in message and "nothing was imported" in message and "record" in message, (case, message)
            assert "\n" not in message and "\x1b" not in message
            assert digest(target) == before, f"{case}: a refused file changed the database"
    unsafe = databases(UNSAFE)               # an honest --unsafe file: imported, applied only on opt-in
    _seeded(unsafe)
    (tmp_path / "unsafe.json").write_text(json.dumps(_file_case(unsafe=True)(json.loads(json.dumps(honest)))))
    with Store.open(unsafe) as store:
        import_file(store, tmp_path / "unsafe.json")
    before_unsafe = digest(unsafe)
    runs = _user_program({"refused files": target, UNSAFE: unsafe}, tmp_path)
    assert digest(target) == before and digest(unsafe) == before_unsafe
    assert _users_row(target) == mine
    for way in ("backend", "tuner.compile"):
        for case in ("refused files", UNSAFE):
            _ran_as_eager(runs[case, way])
            assert runs[case, way]["warnings"] == [], runs[case, way]
    said = [m for way in ("backend", "tuner.compile") for m in runs[UNSAFE, way]["logs"] if OPT_IN in m]
    assert len(said) == 1, runs[UNSAFE, "backend"]
