"""Search efficiency: how much of the best point's gain each sampler finds, for how much of the budget.

    python bench/search_efficiency.py [--tables bench/tables/mlp_cpu.json ...] [--synthetic 1,2,3]
                                      [--samplers tpe,random,...] [--seeds 20] [--noise 0.05]

On recorded spaces (tables of `tuner record-space`: every point measured once, for real) and on
SYNTHETIC tables generated here from a seed (knob effects, interactions and failing regions over
288 points of real CPU knob names; no measurement behind them), it runs the product's search:
`tuner.search.driver.Driver` on a `ReplayExecutor` that answers from the table, with a fresh SQLite
store per search (searches must not learn failures from one another), for each sampler of
`tuner.search.samplers.SAMPLERS` and each seed, once as recorded and once with injected noise (the
replay multiplies each answer by a seeded lognormal factor, sigma `--noise`), with the product's
defaults otherwise (pruner, learned failures).

A search of budget B trials is the first B trials of one run (trials are asked, measured and told
one at a time, so a shorter search is a prefix of a longer one). It picks the candidate with the
lowest OBSERVED objective (noisy, when noise is on) and is scored by that candidate's TRUE
objective in the table:

    gain(B) = (objective of the defaults - true objective of the pick) / (defaults - table's optimum)

averaged over the seeds, at budgets that are shares of the table's size (the exhaustive budget).
The goal line (issue 12): 95% of the gain within 20% of the budget, and above random at every
budget (where random and the sampler both reach the optimum, >= 99.9%, it counts as a tie, met).
Not a test, and slow with the defaults: a search of gp or cmaes on a synthetic table takes 30 s to
minutes on 2 cores (mostly its proposals of points already measured); pick with --samplers.
"""
from __future__ import annotations

import argparse
import math
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLES = (ROOT / "bench" / "tables" / "mlp_cpu.json",)
BUDGETS = (0.05, 0.10, 0.20, 0.35, 0.50, 1.00)
GOAL_BUDGET, GOAL_GAIN, TIE = 0.20, 0.95, 0.999
# Real CPU knob names, so the space and its conditional children behave as in a search.
_BACKENDS = ("ATEN,TRITON,CPP", "ATEN")
_K_SLICES = (1, 2, 4, 0)


def synthetic_table(seed: int):
    """A SYNTHETIC table of 288 points (a RecordedTable), its effects drawn from `seed`.

    log(objective) = main effects + interactions + a fixed jitter per point: freezing helps;
    max_autotune alone costs compile-time choices but with freezing it finds a faster GEMM,
    which losing the C++ backend (ATEN) gives back; K-slices matter only under the C++ GEMM;
    the C++ wrapper helps a little; max_fusion_size has a sweet spot somewhere in 16..128.
    Failing regions: 4 K-slices with the C++ GEMM on unfrozen weights do not compile, and the
    C++ wrapper crashes with the largest fusions. The defaults' objective is 1.0.
    """
    from tuner.keys import platform_from_parts
    from tuner.search.recording import RecordedTable
    from tuner.search_spaces import Knob, SearchSpace
    from tuner.trial import Measurement, Status

    rng = random.Random(seed)
    knobs = (Knob("freezing", "bool", False, "trace"),
             Knob("max_autotune", "bool", False, "autotune"),
             Knob("max_autotune_gemm_backends", "choice", _BACKENDS[0], "autotune", choices=_BACKENDS,
                  parent=("max_autotune", True)),
             Knob("cpp.gemm_max_k_slices", "choice", 1, "gemm", choices=_K_SLICES, parent=("max_autotune", True)),
             Knob("cpp_wrapper", "bool", False, "wrapper"),
             Knob("max_fusion_size", "int", 64, "fusion", low=16, high=128, step=16))
    space = SearchSpace(name=f"synthetic-{seed}", device="cpu", knobs=knobs)
    effect = {"freezing": -rng.uniform(0.05, 0.20), "autotune": rng.uniform(0.0, 0.06),
              "autotune_frozen": -rng.uniform(0.08, 0.25), "aten": rng.uniform(0.5, 1.0),
              "wrapper": -rng.uniform(0.0, 0.05), "fusion_best": rng.choice((16, 32, 48, 80, 96, 112, 128)),
              "fusion_curve": rng.uniform(0.005, 0.03)}
    slices = {k: rng.uniform(-0.06, 0.03) for k in _K_SLICES}
    zero = _log_ratio(space.default_params(), effect, slices)
    rows = []
    for candidate in space.points(1000):
        p = space.complete(candidate.as_dict())
        ratio = math.exp(_log_ratio(p, effect, slices) - zero + rng.gauss(0.0, 0.01)) if candidate.params else 1.0
        if p.get("cpp.gemm_max_k_slices") == 4 and p.get("max_autotune_gemm_backends") == _BACKENDS[0] \
                and not p["freezing"]:
            m = Measurement.failed(Status.COMPILE_ERROR, "synthetic: no valid K-slice blocking")
        elif p["cpp_wrapper"] and p["max_fusion_size"] >= 112:
            m = Measurement.failed(Status.CRASHED, "synthetic: the C++ wrapper crashed")
        else:
            m = Measurement(Status.OK, latency_ms=0.5 * ratio, baseline_ms=0.5, speedup=1.0 / ratio, reps=20)
        rows.append((candidate, m))
    platform = platform_from_parts("cpu", {"synthetic": f"seed {seed}"}, {"torch": "none"})
    return RecordedTable(model=f"SYNTHETIC-{seed}", workload_key=f"{seed:032x}", platform=platform, space=space,
                         rows=tuple(rows), measure={})


def _log_ratio(p: dict, effect: dict, slices: dict) -> float:
    value = effect["freezing"] * p["freezing"] + effect["wrapper"] * p["cpp_wrapper"]
    value += effect["fusion_curve"] * (math.log2(p["max_fusion_size"]) - math.log2(effect["fusion_best"])) ** 2
    if p["max_autotune"]:
        gain = effect["autotune_frozen"] if p["freezing"] else 0.0
        if p["max_autotune_gemm_backends"] == "ATEN":
            gain *= 1 - effect["aten"]
        else:
            gain += slices[p["cpp.gemm_max_k_slices"]]
        value += effect["autotune"] + gain
    return value


def run_search(table, path: Path, empty_db: Path, *, sampler: str, seed: int, noise: float):
    """One search over the whole table (trials = its size), in a fresh copy of the empty database
    `empty_db` (the searches must not learn failures from each other): the trials, by number."""
    from tuner.search import SearchOptions
    from tuner.search.driver import Driver, open_study
    from tuner.storage import Store
    from tuner.trial import MeasureSpec
    from tuner.workers.replay import ReplayExecutor

    db = shutil.copy(empty_db, empty_db.with_name("search.db"))
    job = SearchOptions(measure=MeasureSpec(f"{table.model}.py"), trials=len(table.rows), sampler=sampler, seed=seed)
    target = table.target()
    store = Store.open(f"sqlite:///{db}")
    try:
        study = open_study(job, target, store, user="bench")
        executor = ReplayExecutor.from_file(path, noise=noise, seed=seed)
        outcome = Driver(job, target, store=store, executor=executor).run(study)
    finally:
        store.close()
    return sorted(outcome.trials, key=lambda r: r.number)


def bounds(table) -> tuple[float, float]:
    """The true objectives of the defaults and of the table's best point."""
    truth = table.objectives()
    default = next(m.objective for c, m in table.rows if c.is_default)
    return default, min(v for v in truth.values() if v is not None)


def gains(table, trials, budgets: list[int]) -> list[float]:
    """The share of the optimum's gain that the pick of the first B trials reaches, per budget B."""
    truth = table.objectives()
    default, optimum = bounds(table)
    found = []
    for budget in budgets:
        seen = [r for r in trials[:budget] if r.measurement.objective is not None]
        pick = min(seen, key=lambda r: r.measurement.objective) if seen else None
        value = default if pick is None else truth[pick.candidate_key]
        found.append((default - value) / (default - optimum))
    return found


def evaluate(table, path: Path, empty_db: Path, *, samplers: list[str], seeds: int,
             noise: float) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Per sampler, the mean gain at each budget of BUDGETS over `seeds` searches, and the mean
    number of trials a search measured before it ended (the driver ends a search as exhausted
    after MAX_DUPLICATE_ASKS proposals in a row that were measured already)."""
    budgets = budget_trials(len(table.rows))
    means, measured = {}, {}
    for sampler in samplers:
        started = time.monotonic()
        runs = [run_search(table, path, empty_db, sampler=sampler, seed=s, noise=noise) for s in range(seeds)]
        print(f"  {table.model}, noise {noise}: {sampler} searched {seeds} times in "
              f"{time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
        found = [gains(table, trials, budgets) for trials in runs]
        means[sampler] = [statistics.fmean(run[i] for run in found) for i in range(len(budgets))]
        measured[sampler] = statistics.fmean(len(trials) for trials in runs)
    return means, measured


def budget_trials(points: int) -> list[int]:
    return [max(1, round(share * points)) for share in BUDGETS]


def goal(sampler: str, means: dict[str, list[float]]) -> str:
    """Whether `sampler` meets issue 12's goal on these means, and if not, where it falls short."""
    short = []
    at_goal = means[sampler][BUDGETS.index(GOAL_BUDGET)]
    if at_goal < GOAL_GAIN:
        short.append(f"{at_goal:.1%} at {GOAL_BUDGET:.0%}")
    if sampler != "random" and "random" in means:
        below = [f"{share:.0%}" for share, mine, theirs in zip(BUDGETS, means[sampler], means["random"])
                 if mine <= theirs and not (mine >= TIE and theirs >= TIE)]
        if below:
            short.append(f"not above random at {', '.join(below)}")
    return "met" if not short else "not met: " + "; ".join(short)


def report(table, means: dict[str, list[float]], measured: dict[str, float], *, noise: float, seeds: int) -> str:
    from tuner.cli.common import format_table

    default, optimum = bounds(table)
    failed = sum(m.objective is None for _, m in table.rows)
    kind = "SYNTHETIC" if table.model.startswith("SYNTHETIC") else f"recorded on {table.platform.describe()}"
    head = (f"{table.model} ({kind}): {len(table.rows)} points, {failed} failing; defaults {default:.3f}, "
            f"optimum {optimum:.3f} ({default / optimum:.2f}x over the defaults)\n"
            f"{'no noise' if not noise else f'noise sigma {noise}'}, mean over {seeds} seeds of the share "
            f"of the optimum's gain reached (picked by observed value, scored by the table's);\n"
            f"measured: mean trials a search measured before the driver ended it (the last budget has no more)")
    rows = [("sampler", *[f"{s:.0%} ({b})" for s, b in zip(BUDGETS, budget_trials(len(table.rows)))],
             "measured", "goal")]
    rows += [(name, *[f"{v:.0%}" for v in values], f"{measured[name]:.0f}", goal(name, means))
             for name, values in means.items()]
    return head + "\n" + format_table(rows, rule=True)


def main(argv: list[str] | None = None) -> int:
    from tuner.search.recording import read_table
    from tuner.search.samplers import SAMPLERS
    from tuner.storage import ensure_schema

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tables", nargs="*", default=[str(t) for t in TABLES], help="recorded tables")
    parser.add_argument("--synthetic", default="1,2,3", help="seeds of synthetic tables ('' for none)")
    parser.add_argument("--samplers", default=",".join(SAMPLERS), help="comma-separated (default: every one)")
    parser.add_argument("--seeds", type=int, default=20, help="searches per sampler, table and noise level")
    parser.add_argument("--noise", type=float, default=0.05, help="lognormal sigma of the noisy runs (0: none)")
    args = parser.parse_args(argv)
    samplers = [s for s in args.samplers.split(",") if s]
    if "random" not in samplers:
        samplers.append("random")
    print(f"goal (issue 12): {GOAL_GAIN:.0%} of the gain within {GOAL_BUDGET:.0%} of the budget, above random "
          f"at every budget")
    # Every search writes each trial to SQLite, as in the product; a tmpfs keeps that off the disk.
    scratch = "/dev/shm" if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(prefix="tuner-bench-", dir=scratch) as folder:
        empty_db = Path(folder) / "empty.db"
        ensure_schema(f"sqlite:///{empty_db}")
        tables = [(read_table(p), Path(p)) for p in args.tables]
        for seed in (int(s) for s in args.synthetic.split(",") if s):
            table, path = synthetic_table(seed), Path(folder) / f"synthetic-{seed}.json"
            table.write(path)
            tables.append((table, path))
        for table, path in tables:
            default, optimum = bounds(table)
            if optimum >= default:
                print(f"\n{table.model}: no point beats the defaults, so there is no gain to find; skipped")
                continue
            for noise in sorted({0.0, args.noise}):
                started = time.monotonic()
                means, measured = evaluate(table, path, empty_db, samplers=samplers, seeds=args.seeds, noise=noise)
                print("\n" + report(table, means, measured, noise=noise, seeds=args.seeds)
                      + f"\n({time.monotonic() - started:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
