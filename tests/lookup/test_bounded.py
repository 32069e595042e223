"""Database work inside a user's compile or kernel launch is bounded (issue 22, item 6).

Every PostgreSQL session opened with a budget gets libpq's connect timeout, TCP user timeout and
keepalives and the server's statement and lock timeouts, all within `TUNER_LOOKUP_TIMEOUT`; a
server that accepts and then stops answering (tests/helpers/stalling_proxy.py) ends the compile-time
lookup and `tuner.autotune`'s reads and writes within the budget, with one warning. A
`kernel_configs.config` holding a JSON list is one warning, and the kernel launches, tuned in
memory. Bucket configs are read once per platform per process.
"""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
from sqlalchemy.engine import make_url

from helpers import MODELS, cli_env
from helpers.stalling_proxy import StallingProxy
from helpers.stalls import GRAPH, seed
from tuner.lookup import Lookup, LookupWarning
from tuner.lookup.decision import Tier
from tuner.settings import Settings

TIMEOUT_S = 2.0
BOUND_S = TIMEOUT_S + 1.5        # the budget, the deadline's grace, and a loaded machine


def _proxied(url: str, proxy: StallingProxy) -> str:
    parsed = make_url(url)
    return parsed.set(host="127.0.0.1", port=proxy.port,
                      query={"sslmode": "disable"}).render_as_string(hide_password=False)


def _timed(call: Callable[[], Any], limit_s: float = 30.0) -> tuple[Any, float]:
    """(call()'s value, seconds), or a failed test when it has not returned after `limit_s`
    (an unbounded wait must fail the test, not hang the suite)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001
            box["error"] = exc

    start = time.perf_counter()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit_s)
    assert not thread.is_alive(), f"still waiting after {limit_s:g} s: not bounded"
    if "error" in box:
        raise box["error"]
    return box["value"], time.perf_counter() - start


@pytest.mark.postgres
@pytest.mark.parametrize("readonly", [True, False])
def test_every_bounded_session_gets_client_and_server_timeouts(postgres_url: str, readonly: bool) -> None:
    from sqlalchemy import text

    from tuner.storage.engine import make_engine

    engine = make_engine(postgres_url, readonly=readonly, timeout_s=1.5)
    try:
        with engine.connect() as connection:
            shown = [connection.execute(text(f"SHOW {name}")).scalar()
                     for name in ("statement_timeout", "lock_timeout")]
            libpq = connection.connection.dbapi_connection.get_dsn_parameters()
    finally:
        engine.dispose()
    assert shown == ["1500ms", "1500ms"]
    assert (libpq["connect_timeout"], libpq["tcp_user_timeout"], libpq["keepalives"]) == ("2", "1500", "1")
    idle, interval, count = (int(libpq[k]) for k in ("keepalives_idle", "keepalives_interval", "keepalives_count"))
    assert idle + interval * count <= TIMEOUT_S


@pytest.mark.postgres
@pytest.mark.parametrize("stall_after", [b"", b"best_configs"], ids=["at-connect", "at-the-first-query"])
def test_a_lookup_behind_a_stalled_proxy_ends_within_the_budget(postgres_server, postgres_url: str,
                                                                stall_after: bytes) -> None:
    platform = seed(postgres_url)
    with StallingProxy(postgres_server.port, stall_after=stall_after) as proxy:
        lookup = Lookup(Settings(db_url=_proxied(postgres_url, proxy), lookup_timeout_s=TIMEOUT_S))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            decision, waited = _timed(lambda: lookup.decide(GRAPH, platform))
            again, waited_again = _timed(lambda: lookup.decide("b" * 32, platform))
        assert proxy.stalled.is_set()
    assert decision.tier is Tier.UNAVAILABLE and decision.config.is_default
    assert waited < BOUND_S, waited
    assert again.tier is Tier.UNAVAILABLE and waited_again < 0.1
    messages = [str(w.message) for w in caught if issubclass(w.category, LookupWarning)]
    assert len(messages) == 1 and "\n" not in messages[0], messages


PROGRAM = textwrap.dedent('''
    import json, sys, time, warnings, torch
    sys.path.insert(0, {models!r})
    import tiny_mlp

    torch.manual_seed(7)
    model, x = tiny_mlp.get_model(), torch.randn(8, 32)
    with torch.no_grad():
        expected = torch.compile(model, backend="inductor")(x)
        torch._dynamo.reset()
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = torch.compile(model, backend="tuner")(x)
        spent = time.perf_counter() - start
    print("REPORT " + json.dumps(dict(equal=torch.equal(got, expected), spent=spent,
                                      warnings=[str(w.message) for w in caught
                                                if type(w.message).__name__ == "LookupWarning"])))
''')


@pytest.mark.postgres
@pytest.mark.slow
def test_a_compile_behind_a_stalled_proxy_falls_back_within_the_budget(postgres_server, postgres_url: str,
                                                                       tmp_path: Path) -> None:
    seed(postgres_url)
    program = tmp_path / "program.py"
    program.write_text(PROGRAM.format(models=str(MODELS)))
    with StallingProxy(postgres_server.port, stall_after=b"best_configs") as proxy:
        env = cli_env(TUNER_DB=_proxied(postgres_url, proxy), TUNER_LOOKUP_TIMEOUT=str(TIMEOUT_S))
        out = subprocess.run([sys.executable, str(program)], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=300)
        assert proxy.stalled.is_set()
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(next(line for line in out.stdout.splitlines()
                             if line.startswith("REPORT ")).removeprefix("REPORT "))
    assert report["equal"] is True and len(report["warnings"]) == 1, report
    assert "did not answer within" in report["warnings"][0], report


# ------------------------------------------------------------ tuner.autotune's database

triton = pytest.importorskip("triton")
with triton.knobs.runtime.scope():
    triton.knobs.runtime.interpret = True      # kernels defined now run in the interpreter
    from helpers import autotune_kernels as kernels

import tuner  # noqa: E402
from tuner.kernels import KernelWarning  # noqa: E402

ADD_SPACE = {"BLOCK": [16, 32, 64, 128], "num_warps": [1, 2, 4]}


def _launch(url: str, n: int = 100) -> tuple[bool, list, list[str], float]:
    """(output right, the kernel's choices, KernelWarnings, seconds) of one launch of a fresh kernel."""
    timer = kernels.CountingTimer()
    kernel = tuner.autotune(space=ADD_SPACE, key=["n"], timer=timer, db=url)(kernels.add_kernel)
    x, y = torch.randn(n), torch.randn(n)
    out = torch.full((n,), float("nan"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, spent = _timed(lambda: kernel[kernels.blocks(n)](x, y, out, n), limit_s=120)
    messages = [str(w.message) for w in caught if issubclass(w.category, KernelWarning)]
    return torch.equal(out, x + y), [(c.origin, c.stored) for c in kernel.choices()], messages, spent


def test_a_kernel_config_that_is_a_json_list_warns_and_the_kernel_launches(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    assert _launch(url)[:3] == (True, [("search", True)], [])
    with sqlite3.connect(tmp_path / "tuner.db") as raw:
        raw.execute("UPDATE kernel_configs SET config = '[16, 4]'")
    right, choices, messages, _ = _launch(url)
    assert right and choices == [("search", False)]          # tuned in memory, nothing stored
    assert len(messages) == 1 and "cannot read" in messages[0], messages
    with sqlite3.connect(tmp_path / "tuner.db") as raw:
        assert raw.execute("SELECT config FROM kernel_configs").fetchall() == [("[16, 4]",)]


@pytest.mark.postgres
def test_a_kernel_launch_behind_a_stalled_proxy_is_bounded(postgres_server, postgres_url: str) -> None:
    from tuner.kernels import guarded_db as database
    from tuner.storage import upgrade

    upgrade(postgres_url)
    with StallingProxy(postgres_server.port, stall_after=b"kernel_configs") as proxy:
        url = _proxied(postgres_url, proxy)
        settings = Settings(db_url=url, lookup_timeout_s=TIMEOUT_S)
        right, choices, messages, spent = _launch_with(settings)
        assert proxy.stalled.is_set()
    assert right and choices == [("search", False)]
    assert spent < BOUND_S + 5.0, spent                     # one bounded read; the search is in memory
    assert len(messages) == 1 and "did not answer within" in messages[0], messages
    database._failed.clear()


def _launch_with(settings: Settings) -> tuple[bool, list, list[str], float]:
    """`_launch` with TUNER_LOOKUP_TIMEOUT from `settings` (the kernel reads its own settings)."""
    import os

    saved = os.environ.get("TUNER_LOOKUP_TIMEOUT")
    os.environ["TUNER_LOOKUP_TIMEOUT"] = str(settings.lookup_timeout_s)
    try:
        return _launch(settings.db_url)
    finally:
        if saved is None:
            os.environ.pop("TUNER_LOOKUP_TIMEOUT")
        else:
            os.environ["TUNER_LOOKUP_TIMEOUT"] = saved


def test_bucket_configs_are_read_once_per_platform(tmp_path: Path) -> None:
    from helpers.stored import store_configs
    from helpers.stored import bucket_workload
    from tuner.platform import current_platform

    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    platform = current_platform("cpu", threads=torch.get_num_threads())
    for batch in (1, 8):
        store_configs(url, bucket_workload(batch), platform, {"max_fusion_size": 8 * batch})
    five, two = (bucket_workload(batch).graphs[0] for batch in (5, 2))
    lookup = Lookup(Settings(db_url=url, lookup_timeout_s=TIMEOUT_S))
    assert lookup.decide(five.key, platform, code=five.code).tier is Tier.NEAREST_BUCKET
    with sqlite3.connect(tmp_path / "tuner.db") as raw:      # read once: a later change is not seen
        raw.execute("DELETE FROM best_history")
        raw.execute("DELETE FROM best_configs")
    decision = lookup.decide(two.key, platform, code=two.code)
    assert decision.tier is Tier.NEAREST_BUCKET and dict(decision.config.inductor) == {"max_fusion_size": 8}
    lookup.clear()                                          # a new process reads them again
    assert lookup.decide(two.key, platform, code=two.code).tier is Tier.MISS
