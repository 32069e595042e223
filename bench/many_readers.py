"""Many processes compiling against one tuner database while a search writes into it.

    python bench/many_readers.py [--readers 32] [--backends postgres,sqlite] [--warm 20]

A throw-away PostgreSQL server (started as tests/conftest.py starts it) and one SQLite file each
get a stored config for a tiny MLP's graph. --readers processes import torch, warm Dynamo and
Inductor on another function, and wait at a start line. Then, one backend after the other, a
writer process records trials and best configs through the Store API while every reader
compiles the MLP with `backend="tuner"` against that backend at once, keeping its connection
until the next backend starts (a real process keeps it for life). Inductor's caches are shared
and warmed first, so the race is tracing and lookups, not compiling C++.

Timed in each reader is `Lookup.decide`, the database part of the backend's lookup: "first" is
the process's first graph (opening the store: connect, schema check; then the query), "warm"
is --warm later decisions on unseen graph keys with the store open (one query each).
Peak connections: `pg_stat_activity` rows for the database; for SQLite, processes holding the
file open; sampled every 50 ms. Exits 1 when a compile fails, a first lookup misses, a lookup
falls back or takes longer than --timeout (passed as TUNER_LOOKUP_TIMEOUT). Each phase is cut
at DEADLINE_S; the run takes a few minutes.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from throwaway_postgres import postgres_counter, start_postgres

ROOT = Path(__file__).resolve().parent.parent
DEADLINE_S = 240.0                 # per backend: readers not done by then count as failures


def tiny() -> tuple[Any, Any]:
    import torch

    torch.manual_seed(0)
    layers = (torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32))
    return torch.nn.Sequential(*layers).eval(), torch.randn(8, 32)


def seed(url: str) -> None:
    """The schema, and a non-default config for every graph of the tiny MLP on this platform."""
    import torch

    from tuner.platform import current_platform
    from tuner.storage import Store, upgrade
    from tuner.workload import fingerprint_graph

    model, x = tiny()
    keys: list[str] = []

    def record(gm: Any, example_inputs: list) -> Any:
        keys.append(fingerprint_graph(gm, list(example_inputs), index=len(keys)).key)
        return gm.forward

    with torch.no_grad():
        torch.compile(model, backend=record)(x)
    torch._dynamo.reset()
    platform = current_platform("cpu")
    upgrade(url)
    with Store.open(url) as store:
        store.ensure_platform(platform)
        for key in keys:
            store.save_best(best(key, platform.key, {"max_fusion_size": 8}))


def best(graph_key: str, platform_key: str, params: dict) -> Any:
    from tuner.storage import BestConfig

    return BestConfig(graph_key=graph_key, platform_key=platform_key, params=params,
                      is_default=not params, speedup=1.1, ci_low=1.05, ci_high=1.15, rounds=5,
                      latency_ms=1.0, baseline_ms=1.1)


def reader(work: Path, phases: list[str], warm: int, timeout_s: float) -> None:
    """One compiling process. Prints READY once torch and Inductor are imported; then, for each
    phase NAME=URL, waits for the file go-NAME, compiles against URL, prints RESULT {json}."""
    import torch
    import torch._inductor.compile_fx  # noqa: F401  (imports are not the lookup)

    import tuner.storage  # noqa: F401
    from tuner.lookup import Lookup, reset_process_lookup
    from tuner.platform import current_platform
    from tuner.settings import Settings

    spent: list[tuple[float, str]] = []
    decide = Lookup.decide

    def timed(self: Lookup, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        decision = decide(self, *args, **kwargs)
        spent.append((time.perf_counter() - start, decision.tier.value))
        return decision

    opened: list[float] = []
    store = Lookup.store

    def timed_open(self: Lookup) -> Any:              # the first call opens the store
        start = time.perf_counter()
        found = store(self)
        opened.append(time.perf_counter() - start)
        return found

    Lookup.decide, Lookup.store = timed, timed_open
    model, x = tiny()
    platform = current_platform("cpu")            # Inductor probes the same ISA; cached
    with torch.no_grad():                         # Dynamo and Inductor warmed, not the lookup
        torch.compile(lambda t: t * 2 + 1, backend="inductor")(x)
    print("READY", flush=True)
    for phase in phases:
        name, url = phase.split("=", 1)
        while not (work / f"go-{name}").exists():
            time.sleep(0.005)
        # like a real process, keep the last phase's connection open until now
        lookup = reset_process_lookup(Settings(db_url=url, lookup_timeout_s=timeout_s))
        torch._dynamo.reset()
        spent.clear()
        opened.clear()
        with torch.no_grad():
            out = torch.compile(model, backend="tuner")(x)
            for i in range(warm):
                lookup.decide(f"{os.getpid():08x}{i:024x}", platform)
            ok = bool(torch.allclose(out, model(x), atol=1e-5))
        print("RESULT " + json.dumps(dict(ok=ok, first=spent[0], open=opened[0], warm=spent[1:])),
              flush=True)
    reset_process_lookup(Settings(db_url=url))     # closes the last store


def writer(url: str, stop: Path) -> None:
    """A search's writes until `stop` exists: a trial, and every second time a best config."""
    from tuner.errors import StorageError
    from tuner.platform import current_platform
    from tuner.storage import Store, TrialRecord
    from tuner.trial import Measurement, Status
    from tuner.keys import GraphFingerprint, Workload

    platform = current_platform("cpu")
    workload = Workload(key="bench-writer", name="writer", graphs=(GraphFingerprint(
        key="w" * 32, index=0, num_nodes=1, input_meta="[]", code="writer"),))
    writes, errors, slowest = 0, 0, 0.0
    with Store.open(url) as store:
        store.ensure_platform(platform)
        store.ensure_workload(workload)
        study = store.create_study(workload_key=workload.key, platform_key=platform.key,
                                   space_hash="bench", sampler="random", seed=0,
                                   trials_requested=10**6, user="bench", host="bench",
                                   tuner_version="bench")
        print("READY", flush=True)
        while not stop.exists():
            start = time.perf_counter()
            try:
                store.record_trial(study.id, TrialRecord(
                    number=writes, candidate_key=f"c{writes}", params={"max_fusion_size": 8},
                    measurement=Measurement(status=Status.OK, latency_ms=1.0, reps=5)))
                if writes % 2 == 0:
                    store.save_best(best(f"{writes:032x}", platform.key, {}))
                writes += 1
            except StorageError as exc:
                errors += 1
                print(f"writer: {exc}", file=sys.stderr, flush=True)
            slowest = max(slowest, time.perf_counter() - start)
            time.sleep(0.01)
    print("RESULT " + json.dumps(dict(writes=writes, errors=errors, slowest_s=slowest)), flush=True)


class Sampler(threading.Thread):
    """Samples the number of open database connections every 50 ms; keeps the peak."""

    def __init__(self, count: Any) -> None:
        super().__init__(daemon=True)
        self.count, self.peak, self.halt = count, 0, threading.Event()

    def run(self) -> None:
        while not self.halt.wait(0.05):
            self.peak = max(self.peak, self.count())


def sqlite_counter(path: Path, processes: list[subprocess.Popen]) -> Any:
    def holds(pid: int) -> bool:
        try:
            folder = f"/proc/{pid}/fd"
            return any(os.readlink(f"{folder}/{fd}") == str(path) for fd in os.listdir(folder))
        except OSError:
            return False

    return lambda: sum(holds(p.pid) for p in processes if p.poll() is None)


def spawn(role: str, *args: str, env: dict[str, str], log: Path) -> subprocess.Popen:
    command = [sys.executable, "-X", "faulthandler", __file__, "--role", role, *args]
    with log.open("w") as errors:
        return subprocess.Popen(command, env=env, text=True, stdout=subprocess.PIPE, stderr=errors,
                                cwd=ROOT)


class Lines:
    """The stdout lines of several processes, read by one thread each."""

    def __init__(self, processes: list[subprocess.Popen]) -> None:
        self.queue: queue.Queue[tuple[int, str | None]] = queue.Queue()
        for index, process in enumerate(processes):
            threading.Thread(target=self._pump, args=(index, process), daemon=True).start()
        self.count = len(processes)

    def _pump(self, index: int, process: subprocess.Popen) -> None:
        for line in process.stdout:
            self.queue.put((index, line.rstrip("\n")))
        self.queue.put((index, None))

    def next(self, prefix: str, deadline: float) -> list[str | None]:
        """Each process's next line starting with `prefix` (without it); None when a process
        ended or the deadline passed first."""
        found: dict[int, str | None] = {}
        while len(found) < self.count and time.monotonic() < deadline:
            with contextlib.suppress(queue.Empty):
                index, line = self.queue.get(timeout=max(0.01, deadline - time.monotonic()))
                if index not in found and (line is None or line.startswith(prefix)):
                    found[index] = None if line is None else line.removeprefix(prefix)
        return [found.get(i) for i in range(self.count)]


def run_phase(name: str, url: str, counter: Any, readers: list[subprocess.Popen], lines: Lines,
              env: dict[str, str], work: Path) -> dict:
    """The writer starts, then every reader compiles against `url` at once."""
    stop = work / f"stop-{name}"
    the_writer = spawn("writer", str(stop), env={**env, "TUNER_DB": url},
                       log=work / f"writer-{name}.log")
    assert the_writer.stdout.readline().strip() == "READY", "the writer did not start"
    sampler = Sampler(counter(readers + [the_writer]))
    sampler.start()
    time.sleep(0.5)                                  # the writer is writing
    started = time.monotonic()
    (work / f"go-{name}").touch()
    results = [json.loads(r) if r else None for r in lines.next("RESULT ", started + DEADLINE_S)]
    wall = time.monotonic() - started
    stop.touch()
    try:
        out, _ = the_writer.communicate(timeout=60)
        written = json.loads(out.split("RESULT ", 1)[1])
    except (subprocess.TimeoutExpired, IndexError):
        the_writer.kill()
        print(f"{name} writer: exit status {the_writer.wait()}; its log ends with:",
              (work / f"writer-{name}.log").read_text()[-2000:], file=sys.stderr)
        written = {"writes": 0, "errors": -1}
    sampler.halt.set()
    sampler.join()
    done = [r for r in results if r is not None]
    return dict(name=name, done=done, failed=len(results) - sum(r["ok"] for r in done),
                peak=sampler.peak, wall=wall, writer=written)


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98] if len(values) > 1 else values[0]


def report(rows: list[dict], args: argparse.Namespace) -> int:
    """Print the table; 1 when a compile failed, a lookup fell back or overran its budget."""
    print(f"{args.readers} processes compile a tiny MLP with backend=\"tuner\" while one writer "
          f"records trials and best configs (budget {args.timeout:.1f} s; {os.cpu_count()} cores)")
    print(f"{'backend':<9}{'ok':>6}{'hits':>6}{'first p50':>11}{'p99':>8}{'(open p50)':>11}"
          f"{'warm p50':>10}{'p99':>8}{'fallbacks':>10}{'over':>5}{'peak conns':>11}"
          f"{'writes':>7}{'w.err':>6}{'w.max':>8}{'wall':>6}")
    bad = 0
    for row in rows:
        done = row["done"]
        first = [r["first"][0] for r in done] or [float("nan")]
        warm = [s for r in done for s, _ in r["warm"]] or [float("nan")]
        every = [pair for r in done for pair in [r["first"], *r["warm"]]]
        hits = sum(r["first"][1] == "exact" for r in done)
        fallbacks = sum(tier == "unavailable" for _, tier in every)
        over = sum(seconds > args.timeout for seconds, _ in every)
        bad += row["failed"] + fallbacks + over + abs(row["writer"]["errors"])
        bad += args.readers - hits
        print(f"{row['name']:<9}{len(done) - row['failed']:>3}/{args.readers:<2}{hits:>6}"
              f"{statistics.median(first):>10.3f}s{p99(first):>7.3f}s"
              f"{statistics.median(r['open'] for r in done):>10.3f}s"
              f"{1000 * statistics.median(warm):>8.1f}ms{1000 * p99(warm):>6.1f}ms"
              f"{fallbacks:>10}{over:>5}{row['peak']:>11}{row['writer']['writes']:>7}"
              f"{row['writer']['errors']:>6}{1000 * row['writer'].get('slowest_s', 0):>6.0f}ms"
              f"{row['wall']:>5.0f}s")
    print("first: a process's first lookup (open: connect and schema check; then the query); "
          "warm: later lookups of unseen graphs, store open (one query); hits: first lookups "
          "that found the stored config; over: lookups longer than the budget; w.max: the "
          "writer's slowest write; wall: from the start line until every reader compiled")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readers", type=int, default=32)
    parser.add_argument("--backends", default="postgres,sqlite")
    parser.add_argument("--warm", type=int, default=20, help="lookups per reader after its compile")
    parser.add_argument("--timeout", type=float, default=2.0, help="TUNER_LOOKUP_TIMEOUT, seconds")
    parser.add_argument("--role", choices=("reader", "writer"), help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args(argv)
    if args.role == "reader":
        reader(Path(rest[0]), rest[2:], int(rest[1]), args.timeout)
        return 0
    if args.role == "writer":
        writer(os.environ["TUNER_DB"], Path(rest[0]))
        return 0
    with tempfile.TemporaryDirectory(prefix="tuner-bench-") as tmp:
        work, stops = Path(tmp), []
        try:
            backends = {}
            for name in args.backends.split(","):
                if name == "sqlite":
                    path = work / "tuner.db"
                    backends[name] = (f"sqlite:///{path}",
                                      lambda procs, p=path: sqlite_counter(p, procs))
                else:
                    server, stop = start_postgres()
                    stops.append(stop)
                    server.execute("CREATE DATABASE bench")
                    count = postgres_counter(server, "bench")
                    backends[name] = (server.url("bench"), lambda _procs, c=count: c)
            return race(backends, args, work)
        finally:
            for stop in stops:
                stop()


def race(backends: dict[str, tuple[str, Any]], args: argparse.Namespace, work: Path) -> int:
    """Seed each database, warm Inductor's caches with one reader, then race --readers."""
    for url, _ in backends.values():
        seed(url)
    env = {**os.environ, "TUNER_LOOKUP_TIMEOUT": str(args.timeout), "TORCHINDUCTOR_CACHE_DIR":
           str(work / "inductor"), "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    phases = [f"{name}={url}" for name, (url, _) in backends.items()]
    reader_args = ["--timeout", str(args.timeout), str(work)]
    for name in backends:
        (work / f"go-{name}").touch()
    warmup = spawn("reader", *reader_args, "0", *phases, env=env, log=work / "warmup.log")
    out, _ = warmup.communicate(timeout=DEADLINE_S)
    assert warmup.returncode == 0 and out.count("RESULT ") == len(phases), (
        (work / "warmup.log").read_text()[-3000:])
    for name in backends:
        (work / f"go-{name}").unlink()
    readers = [spawn("reader", *reader_args, str(args.warm), *phases, env=env,
                     log=work / f"reader-{i}.log") for i in range(args.readers)]
    lines = Lines(readers)
    try:
        ready = lines.next("READY", time.monotonic() + DEADLINE_S)
        assert all(r is not None for r in ready), "a reader did not start"
        rows = [run_phase(name, url, counter, readers, lines, env, work)
                for name, (url, counter) in backends.items()]
    finally:
        for process in readers:
            if process.poll() is None:
                process.kill()
            process.wait()
    return report(rows, args)


if __name__ == "__main__":
    sys.exit(main())
