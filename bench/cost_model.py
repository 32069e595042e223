"""Does the learned cost model (`--cost-model`) help beyond warm starts? Leave-one-out on recorded tables.

    python bench/cost_model.py [--test mlp,SYNTHETIC-1] [--seeds 20] [--noise 0.05] [--share 0.35] [--arms ...]

The tables: the recorded `bench/tables/mlp_cpu.json` and the SYNTHETIC tables 1..3 of
`search_efficiency.synthetic_table` (no measurement behind them). For each test table T, the
database a search starts from holds what earlier searches of THE SAME WORKLOAD ON OTHER
PLATFORMS left: for every other table O, a TPE search of PRIOR_SHARE of O's points (seed
PRIOR_SEED, noisy as the runs) stored as T's workload on O's platform, with its best trial kept
as that platform's best config. That is the scenario both priors use: warm starts enqueue those
best configs (`tuner.search.priors`), the cost model learns from every stored trial (`tuner.search.cost_model`).
The test table's own platform holds nothing.

Then, per arm and seed, the product's search (`tuner.search.driver.Driver` on a `ReplayExecutor` of T,
a fresh copy of that database per search), as recorded and with injected lognormal noise, for
the arms (`--arms`): tpe; tpe + warm starts; tpe + cost model; tpe + both; random; random + cost
model; and, on request, tpe + cost model (empty db), which learns from the search's own trials only.
Scored as in `search_efficiency.py` (pick by observed value, score by the table's truth: the
share of the optimum's gain reached), at budgets that are shares of T's size, up to `--share`
(a search of the larger budget; the smaller ones are its prefixes).
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_efficiency import GOAL_BUDGET, GOAL_GAIN, TIE, bounds, gains, synthetic_table  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BUDGETS = (0.05, 0.10, 0.20, 0.35, 0.50)
PRIOR_SHARE, PRIOR_SEED = 0.25, 1000
# arm -> (sampler, warm starts, cost model, from the prior database: False starts from an empty one)
ARMS = {"tpe": ("tpe", False, False, True), "tpe + warm starts": ("tpe", True, False, True),
        "tpe + cost model": ("tpe", False, True, True), "tpe + both": ("tpe", True, True, True),
        "random": ("random", False, False, True), "random + cost model": ("random", False, True, True),
        "tpe + cost model (empty db)": ("tpe", False, True, False)}
DEFAULT_ARMS = "tpe,tpe + warm starts,tpe + cost model,tpe + both,random,random + cost model"


def search(table, path: Path, db: Path, *, platform, sampler: str, seed: int, noise: float, trials: int,
           warm: bool = False, cost: bool = False, user: str = "bench"):
    """One search of `trials` on table `table` replayed from `path`, as measured on `platform`,
    into the database `db`: (its StudyInfo, its trials by number)."""
    from tuner.search import SearchOptions, Target
    from tuner.search.driver import Driver, open_study
    from tuner.storage import Store
    from tuner.trial import MeasureSpec
    from tuner.workers.replay import ReplayExecutor

    job = SearchOptions(measure=MeasureSpec(f"{table.model}.py"), trials=trials, sampler=sampler, seed=seed,
                        warm_start=warm, cost_model=cost)
    target = Target(workload=table.target().workload, platform=platform, space=table.space)
    store = Store.open(f"sqlite:///{db}")
    try:
        study = open_study(job, target, store, user=user)
        executor = ReplayExecutor.from_file(path, noise=noise, seed=seed)
        outcome = Driver(job, target, store=store, executor=executor).run(study)
    finally:
        store.close()
    return study, sorted(outcome.trials, key=lambda r: r.number)


def prior_database(test, others, db: Path, *, noise: float) -> None:
    """Fill `db` with a PRIOR_SHARE search of each other table, stored as `test`'s workload on
    that table's platform, and its best trial as that platform's best config."""
    from tuner.search.recording import RecordedTable
    from tuner.storage import BestConfig, Store

    for other, path in others:
        relabelled = RecordedTable(model=test.model, workload_key=test.workload_key, platform=other.platform,
                                   space=other.space, rows=other.rows, measure={})
        study, trials = search(relabelled, path, db, platform=other.platform, sampler="tpe", seed=PRIOR_SEED,
                               noise=noise, trials=max(8, round(PRIOR_SHARE * len(other.rows))), user="prior")
        best = min((r for r in trials if r.measurement.objective is not None), key=lambda r: r.measurement.objective)
        m = best.measurement
        with Store.open(f"sqlite:///{db}") as store:
            store.save_best(BestConfig(graph_key=test.workload_key, platform_key=other.platform.key,
                                       params=dict(best.params), is_default=not best.params, speedup=m.speedup,
                                       ci_low=m.speedup_low or m.speedup, ci_high=m.speedup_high or m.speedup,
                                       rounds=m.reps or 20, latency_ms=m.latency_ms, baseline_ms=m.baseline_ms,
                                       workload_key=test.workload_key, study_id=study.id))


def evaluate(test, path: Path, prior: Path, scratch: Path, *, arms: list[str], seeds: int, noise: float,
             budgets: list[int]) -> dict[str, list[float]]:
    """Per arm, the mean gain at each budget over `seeds` searches from copies of `prior` (or
    of an empty database, for an arm that learns nothing stored)."""
    from tuner.storage import ensure_schema

    empty = scratch / "empty.db"
    if not empty.exists():
        ensure_schema(f"sqlite:///{empty}")
    means = {}
    for arm in arms:
        sampler, warm, cost, from_prior = ARMS[arm]
        started, runs = time.monotonic(), []
        for seed in range(seeds):
            db = shutil.copy(prior if from_prior else empty, scratch / "search.db")
            runs.append(gains(test, search(test, path, Path(db), platform=test.platform, sampler=sampler, seed=seed,
                                           noise=noise, trials=budgets[-1], warm=warm, cost=cost)[1], budgets))
        print(f"  {test.model}, noise {noise}: {arm}, {seeds} searches in {time.monotonic() - started:.0f} s",
              file=sys.stderr, flush=True)
        means[arm] = [statistics.fmean(run[i] for run in runs) for i in range(len(budgets))]
    return means


def verdict(arm: str, means: dict[str, list[float]], shares: list[float]) -> str:
    """Issue 12's goal for `arm`: 95% at 20% of the budget, above random at every budget."""
    short = []
    if GOAL_BUDGET in shares and means[arm][shares.index(GOAL_BUDGET)] < GOAL_GAIN:
        short.append(f"{means[arm][shares.index(GOAL_BUDGET)]:.1%} at {GOAL_BUDGET:.0%}")
    if arm != "random":
        below = [f"{s:.0%}" for s, mine, theirs in zip(shares, means[arm], means["random"])
                 if mine <= theirs and not (mine >= TIE and theirs >= TIE)]
        if below:
            short.append(f"not above random at {', '.join(below)}")
    return "met" if not short else "not met: " + "; ".join(short)


def main(argv: list[str] | None = None) -> int:
    from tuner.cli.common import format_table
    from tuner.search.recording import read_table
    from tuner.storage import ensure_schema

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--test", default="mlp,SYNTHETIC-1,SYNTHETIC-2,SYNTHETIC-3", help="tables to test on")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--noise", type=float, default=0.05, help="lognormal sigma of the noisy runs")
    parser.add_argument("--share", type=float, default=0.35, help="the largest budget, a share of the table")
    parser.add_argument("--arms", default=DEFAULT_ARMS, help=f"comma-separated, of: {', '.join(ARMS)}")
    args = parser.parse_args(argv)
    shares = [s for s in BUDGETS if s <= args.share + 1e-9]
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if "random" not in arms:
        arms.append("random")
    scratch_root = "/dev/shm" if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(prefix="tuner-bench-", dir=scratch_root) as folder:
        scratch = Path(folder)
        tables = [(read_table(ROOT / "bench" / "tables" / "mlp_cpu.json"), ROOT / "bench" / "tables" / "mlp_cpu.json")]
        for seed in (1, 2, 3):
            table, path = synthetic_table(seed), scratch / f"synthetic-{seed}.json"
            table.write(path)
            tables.append((table, path))
        for test, path in tables:
            if test.model not in args.test.split(","):
                continue
            budgets = [max(1, round(s * len(test.rows))) for s in shares]
            default, optimum = bounds(test)
            for noise in (0.0, args.noise):
                prior = scratch / "prior.db"
                prior.unlink(missing_ok=True)
                ensure_schema(f"sqlite:///{prior}")
                prior_database(test, [(t, p) for t, p in tables if t.model != test.model], prior, noise=noise)
                started = time.monotonic()
                means = evaluate(test, path, prior, scratch, arms=arms, seeds=args.seeds, noise=noise,
                                 budgets=budgets)
                kind = "SYNTHETIC" if test.model.startswith("SYNTHETIC") else "recorded"
                rows = [("arm", *[f"{s:.0%} ({b})" for s, b in zip(shares, budgets)], "goal")]
                rows += [(arm, *[f"{v:.0%}" for v in values], verdict(arm, means, shares))
                         for arm, values in means.items()]
                print(f"\n{test.model} ({kind}, {len(test.rows)} points; optimum {default / optimum:.2f}x over the "
                      f"defaults); priors: the other {len(tables) - 1} tables as this workload on their platforms; "
                      f"{'no noise' if not noise else f'noise sigma {noise}'}; mean share of the optimum's gain "
                      f"over {args.seeds} seeds\n" + format_table(rows, rule=True)
                      + f"\n({time.monotonic() - started:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
