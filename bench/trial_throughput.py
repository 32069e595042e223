"""Trial throughput with warm trial processes off and on, side by side in one run.

    python bench/trial_throughput.py [--trials 15] [--models mlp,gpt2] [--workers 1]
                                     [--executor local] [--order cold,warm]

For each model it runs the same search (same seed, a fresh SQLite database each, the executor
of `--executor`) once with every trial process started cold (`--cold-processes`) and once with
spare processes forked from a zygote that has imported (the default), and prints per mode: trials per
minute (trials / seconds from the first trial handed over to the last one recorded; the
confirmation is not counted), and each phase's median seconds per trial: start (job handed
over -> trial code begins: process start and imports), load (model loads, eager references),
compile (the candidate's and the default's it is paired with), measure (the timed section),
and "other", the trial's wall time (handed to the executor -> recorded) outside compile and
measure, which holds start, load and the executor's own overhead. "hits" counts the trials whose
candidate compile was an FX graph cache hit (a config compiled before in the search; the default
compile each trial pairs with, a hit after the first trial, is in "compile" but not counted).

Models: mlp is examples/mlp.py; gpt2 is bench/models/gpt2.py when `transformers` is installed,
else bench/models/gpt2_small.py (the same shape, written out). Goals (issue 34), on 2 cores:
"other" under 0.5 s per trial, and the MLP search's trials per minute at least 1.5x cold's.
Not a test: a pair of 15-trial MLP searches takes about 10 minutes on 2 shared cores.
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

ROOT = Path(__file__).resolve().parent.parent
MODELS = {"mlp": ROOT / "examples" / "mlp.py",
          "gpt2": ROOT / "bench" / "models" / ("gpt2.py" if importlib.util.find_spec("transformers")
                                               else "gpt2_small.py")}
PHASES = ("start", "load", "compile", "measure", "other")


@dataclass
class Clock:
    """The search's events, timed: when each trial was handed over and when it was recorded."""

    handed: dict[int, float] = field(default_factory=dict)
    records: list[tuple[float, Any]] = field(default_factory=list)

    def trial_started(self, number: int, params: Mapping[str, Any]) -> None:
        self.handed[number] = time.monotonic()

    def trial_done(self, record: Any) -> None:
        self.records.append((time.monotonic(), record))

    def __getattr__(self, name: str) -> Any:      # every other SearchEvents call: nothing to do
        return lambda *args, **kwargs: None


def search(model: Path, *, trials: int, warm: bool, executor: str, workers: int) -> dict[str, float]:
    """One search; trials per minute and each phase's median seconds."""
    from tuner.search import Execution, SearchOptions, run_search
    from tuner.settings import Settings
    from tuner.trial import MeasureSpec

    clock = Clock()
    with tempfile.TemporaryDirectory(prefix="tuner-throughput-") as folder:
        settings = replace(Settings.from_env(), db_url=f"sqlite:///{folder}/tuner.db")
        options = SearchOptions(measure=MeasureSpec(str(model)), trials=trials, warm_start=False)
        run_search(options, execution=Execution(executor=executor, workers=workers, warm_processes=warm),
                   settings=settings, events=clock)
    span = clock.records[-1][0] - min(clock.handed.values())
    phases: dict[str, list[float]] = {name: [] for name in PHASES}
    for done_at, record in clock.records:
        m = record.measurement
        compile_s = (m.compile_s or 0.0) + (m.baseline_compile_s or 0.0)
        for name, value in (("start", m.start_s), ("load", m.load_s), ("measure", m.measure_s),
                            ("compile", compile_s if m.compile_s is not None else None)):
            if value is not None:
                phases[name].append(value)
        if m.ok:
            phases["other"].append(done_at - clock.handed[record.number] - compile_s - (m.measure_s or 0.0))
    figures = {"trials": len(clock.records), "per_min": len(clock.records) / span * 60.0,
               "hits": sum(r.measurement.compile_cached is True for _, r in clock.records)}
    figures.update({name: statistics.median(v) if v else float("nan") for name, v in phases.items()})
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=15)
    parser.add_argument("--models", default="mlp,gpt2", help=f"comma-separated, of: {', '.join(MODELS)}")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--executor", default="local", help="local (default) or ray")
    parser.add_argument("--order", default="cold,warm", help="which mode runs first")
    args = parser.parse_args(argv)
    modes = args.order.split(",")
    rows = []
    for name in args.models.split(","):
        for mode in modes:
            began = time.monotonic()
            figures = search(MODELS[name], trials=args.trials, warm=mode == "warm", executor=args.executor,
                             workers=args.workers)
            rows.append((name, mode, figures, time.monotonic() - began))
            print(f"{name} {mode}: done in {rows[-1][3]:.0f} s", file=sys.stderr, flush=True)
    print(f"{'model':6} {'mode':5} {'trials':>6} {'trials/min':>10} {'hits':>5} "
          + " ".join(f"{p + ' s':>9}" for p in PHASES) + f" {'search s':>9}")
    for name, mode, f, wall in rows:
        print(f"{name:6} {mode:5} {f['trials']:>6} {f['per_min']:>10.2f} {f['hits']:>5} "
              + " ".join(f"{f[p]:>9.2f}" for p in PHASES) + f" {wall:>9.0f}")
    for name in dict.fromkeys(r[0] for r in rows):
        by_mode = {mode: f for n, mode, f, _ in rows if n == name}
        if {"cold", "warm"} <= by_mode.keys():
            print(f"{name}: warm/cold trials per minute {by_mode['warm']['per_min'] / by_mode['cold']['per_min']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
