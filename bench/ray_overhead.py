"""What the Ray executor costs per trial, how well it keeps workers busy, and whether parallel
trials disturb each other's timings.

    python bench/ray_overhead.py [--noop-trials 64] [--sleep-trials 32] [--sleep 0.5]
                                 [--hygiene-rounds 2] [--threads 1] [--address ADDR]

Starts a local Ray cluster (or joins --address) and prints, side by side, per worker count
(1, 2, 4, 8), with the driver loop the search uses (keep `capacity` trials in flight, take
results as they finish):
  noop ms/trial     wall time / trials for no-op trials (the Ray task runs the tests' stand-in
                    body, tests/helpers/ray_stand_ins.py: an OK Measurement, no trial process): dispatch
                    plus result;
  +record ms/trial  the same with each result recorded in a SQLite store, as the driver does;
  efficiency        sleep-only trials (no CPU, so 8 fit on 2 cores): ideal time
                    (trials x sleep / workers) over measured time.
Goals: overhead under 50 ms per trial, efficiency of 90% or more at 8 workers.

Then the measurement-hygiene check: the same real trial (tests/models/tiny_mlp.py, Inductor's
defaults) measured with 1 worker and with 2 workers in parallel, in alternating rounds. Each
trial process holds the node's measure lock while it times, so the medians should agree.
It measures with --threads 1 by default: on a machine other processes share, a trial timed
with as many threads as cores is dominated by their load, not by the trial.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from tuner.trial import MeasureSpec, Measurement, TrialRequest
from tuner.workers.ray_pool import RayExecutor

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))     # the stand-in trial body lives with the tests
from helpers.ray_stand_ins import stand_in_executor, stand_in_request  # noqa: E402

WORKER_COUNTS = (1, 2, 4, 8)
TINY = TESTS / "models" / "tiny_mlp.py"


def run_trials(executor: RayExecutor, requests: list[TrialRequest],
               record: Callable[[TrialRequest, Measurement], None] | None = None) -> tuple[float, list[Measurement]]:
    """The search driver's loop: at most `capacity` in flight, each result taken (and recorded) as it ends."""
    todo, results = list(reversed(requests)), []
    start = time.perf_counter()
    while todo or executor.pending():
        while todo and executor.pending() < executor.capacity:
            executor.submit(todo.pop())
        request, measurement = executor.next_result()
        if record is not None:
            record(request, measurement)
        results.append(measurement)
    return time.perf_counter() - start, results


def stand_ins(count: int, sleep_s: float = 0.0) -> list[TrialRequest]:
    """Trials for a stand-in executor: sleep `sleep_s` (0: none), then an OK Measurement."""
    return [stand_in_request(i, sleep_s=sleep_s) for i in range(count)]


def real_trials(count: int, first: int, **fields) -> list[TrialRequest]:
    """Real trials of tests/models/tiny_mlp.py with Inductor's defaults."""
    return [TrialRequest(spec=MeasureSpec(str(TINY), **fields), params=(), number=first + i) for i in range(count)]


class SqliteRecorder:
    """Records results in a fresh SQLite store, one row per trial, as the search driver does."""

    def __init__(self, tmp: str):
        from tuner.platform import Platform
        from tuner.storage import Store, upgrade
        from tuner.keys import GraphFingerprint, Workload

        url = f"sqlite:///{tmp}/bench.db"
        upgrade(url)
        self.store = Store.open(url)
        self.store.ensure_platform(Platform(key="bench", hardware_key="hw", software_key="sw", device="cpu",
                                            hardware=(("cpu_model", "bench"),), software=(("torch", "bench"),)))
        self.store.ensure_workload(Workload(key="bench", name="bench", graphs=(
            GraphFingerprint(key="g", index=0, num_nodes=1, input_meta="{}", code="graph"),)))
        self.study_id = 0

    def new_study(self) -> "SqliteRecorder":
        self.study_id = self.store.create_study(
            workload_key="bench", platform_key="bench", space_hash="s", sampler="tpe", seed=0,
            trials_requested=0, user="bench", host="bench", tuner_version="0").id
        return self

    def __call__(self, request: TrialRequest, measurement: Measurement) -> None:
        from tuner.storage import TrialRecord

        assert self.store.record_trial(self.study_id, TrialRecord(
            number=request.number, candidate_key=f"c{request.number}", params={}, measurement=measurement,
            finished_at=datetime.now(timezone.utc)))


def hygiene(rounds: int, *, threads: int) -> None:
    """The same real trial with 1 worker and with 2 in parallel, in alternating rounds (so load
    from other processes drifts over both alike); prints both medians and their ratio."""
    print(f"\nmeasurement hygiene: {TINY.name}, Inductor defaults, {threads} thread(s), "
          f"{rounds} rounds of 2 trials per worker count", flush=True)
    latencies: dict[int, list[float]] = {1: [], 2: []}
    for round_ in range(rounds):
        for workers in (1, 2):
            first = 10_000 + 100 * round_ + 10 * workers
            _, done = run_trials(RayExecutor(workers=workers), real_trials(2, first, timeout_s=600, threads=threads))
            failed = [m for m in done if not m.ok]
            assert not failed, failed[0].error
            latencies[workers] += [m.latency_ms for m in done]
    medians = {w: statistics.median(v) for w, v in latencies.items()}
    for workers, values in latencies.items():
        print(f"  {workers} worker{'s' if workers > 1 else ' '}: median {medians[workers]:.4f} ms "
              f"(trial medians {', '.join(f'{v:.4f}' for v in values)})")
    print(f"  ratio 2 workers / 1 worker: {medians[2] / medians[1]:.2f}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--noop-trials", type=int, default=64)
    parser.add_argument("--sleep-trials", type=int, default=32)
    parser.add_argument("--sleep", type=float, default=0.5, help="seconds each sleep-only trial sleeps")
    parser.add_argument("--hygiene-rounds", type=int, default=2,
                        help="rounds of the hygiene check (2 real trials per worker count each); 0 skips")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the hygiene trials (default 1)")
    parser.add_argument("--address", default=None, help="join this Ray cluster instead of starting one")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    owner = stand_in_executor(workers=max(WORKER_COUNTS), address=args.address)   # starts (or joins) the cluster
    import ray

    print(f"Ray cluster ready in {time.perf_counter() - started:.1f} s "
          f"({ray.cluster_resources().get('CPU', 0):g} logical CPUs)", flush=True)
    try:
        # Ray starts worker processes on demand; start all 8 before timing anything.
        run_trials(owner, stand_ins(2 * max(WORKER_COUNTS), sleep_s=1))
        rows = []
        with tempfile.TemporaryDirectory(prefix="ray-bench-") as tmp:
            recorder = SqliteRecorder(tmp)
            for workers in WORKER_COUNTS:
                executor = stand_in_executor(workers=workers)    # shares the connection
                run_trials(executor, stand_ins(args.noop_trials))   # settle Ray's worker pool first
                # Others share this machine: the median of three runs of the quick rows.
                noop_s = statistics.median(run_trials(executor, stand_ins(args.noop_trials))[0]
                                           for _ in range(3))
                record_s = statistics.median(run_trials(executor, stand_ins(args.noop_trials),
                                                        recorder.new_study())[0] for _ in range(3))
                sleep_s, done = run_trials(executor, stand_ins(args.sleep_trials, sleep_s=args.sleep))
                assert len(done) == args.sleep_trials and all(m.ok for m in done)
                ideal = args.sleep_trials * args.sleep / workers
                rows.append((workers, 1000 * noop_s / args.noop_trials, 1000 * record_s / args.noop_trials,
                             sleep_s, ideal, ideal / sleep_s))
        print()
        print(f"{'workers':>7}  {'noop ms/trial':>13}  {'+record ms/trial':>16}  "
              f"{'sleep wall s':>12}  {'ideal s':>7}  {'efficiency':>10}")
        for workers, noop, recorded, wall, ideal, eff in rows:
            print(f"{workers:>7}  {noop:>13.1f}  {recorded:>16.1f}  {wall:>12.2f}  {ideal:>7.2f}  {eff:>10.0%}")
        worst = max(max(r[1], r[2]) for r in rows)
        at8 = rows[-1][5]
        print(f"\ngoals: overhead < 50 ms/trial: worst {worst:.1f} ms ({'met' if worst < 50 else 'MISSED'}); "
              f"efficiency >= 90% at 8 workers: {at8:.0%} ({'met' if at8 >= 0.9 else 'MISSED'})")
        print(f"(per row: median of 3 runs of {args.noop_trials} no-op trials; one run of {args.sleep_trials} "
              f"trials of {args.sleep:g} s sleep; ms/trial = wall time / trials)", flush=True)

        if args.hygiene_rounds:
            hygiene(args.hygiene_rounds, threads=args.threads)
    finally:
        owner.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
