"""`tuner search MODEL`: parse the flags, call `tuner.search.run_search`, print what it reports."""
from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from tuner.cli.common import add_command, add_db_option
from tuner.settings import Settings

DEFAULT_TRIALS = 30      # --trials without --budget

if TYPE_CHECKING:
    from tuner.cli.progress import Progress
    from tuner.kernels import KernelLaunch
    from tuner.search import SearchInterrupted, SearchOutcome, SearchResult, Target
    from tuner.storage import StudyInfo, TrialRecord


def add_search_parser(subparsers: Any) -> None:
    s = add_command(subparsers, "search", cmd_search, help="search compile configs for a model file and store the best")
    s.add_argument("model", help="Python file defining get_model() and get_inputs()")
    s.add_argument("--trials", type=int, default=None,
                   help="trials in the study (default 30; with --budget and no --trials, as many as fit)")
    s.add_argument("--budget", default=None, metavar="DURATION",
                   help="wall clock of the whole search, confirmation included, e.g. 90s, 20m, 1.5h or 1h30m: "
                        "no new trial once the rest would not fit; the best confirmed result is stored")
    s.add_argument("--mode", default="inference", choices=("inference", "train"),
                   help="tune the forward pass (inference, default) or whole training steps (train: the model "
                        "file defines get_loss(model, inputs), optionally get_optimizer(model))")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--sampler", default="tpe", metavar="NAME",
                   help="tpe (default), gp, cmaes, qmc, random, or grid (finite spaces only); see docs/search.md")
    s.add_argument("--pruner", default="median",
                   help="stop clearly slow trials early: median (default), percentile (only the slowest quarter) "
                        "or none")
    s.add_argument("--timeout", type=float, default=None, metavar="S", help="deadline per trial in seconds")
    s.add_argument("--space", metavar="FILE", help="JSON search-space file (default: the built-in space)")
    s.add_argument("--unsafe", action="store_true", help="include knobs that change numerics")
    s.add_argument("--precision", default=None, metavar="MODES",
                   help="also try these precisions, e.g. fp32,bf16-autocast (fp32, tf32, bf16-autocast, "
                        "fp16-autocast, bf16); needs --tolerance")
    s.add_argument("--tolerance", type=float, default=None, metavar="REL",
                   help="largest relative error vs fp32 eager a reduced-precision candidate may have, e.g. 1e-2")
    s.add_argument("--objective", default="latency", metavar="NAMES",
                   help="what to minimise: latency (default), memory, compile_time, or several comma-separated "
                        "for a Pareto front, e.g. latency,memory")
    s.add_argument("--prefer", default=None, metavar="NAME",
                   help="with several objectives, the one whose best front point is confirmed and stored "
                        "(default: the first)")
    s.add_argument("--no-warm-start", dest="warm_start", action="store_false",
                   help="do not try stored best configs of this model elsewhere and of the nearest models first")
    s.add_argument("--cost-model", action="store_true",
                   help="rank several proposals with a model learned from every stored trial of this device and "
                        "measure the best-ranked (tuner.search.cost_model)")
    s.add_argument("--resume", action="store_true", help="continue the last study of this model and platform")
    s.add_argument("--workers", type=int, default=1, help="trials in flight at once (default 1)")
    s.add_argument("--executor", default="ray", help="ray (default when installed) or local")
    s.add_argument("--address", default=None, help="Ray cluster address (implies --executor ray)")
    s.add_argument("--cold-processes", action="store_true",
                   help="start every trial process cold, importing torch itself (default: spare processes forked "
                        "from a zygote that has imported already take the trials)")
    s.add_argument("--no-runtime-knobs", dest="runtime_knobs", action="store_false",
                   help="skip the process stage: no runtime knobs (allocator, OpenMP) are searched, and the stored "
                        "figure is the confirmation's, taken in one process (default: both in fresh processes)")
    s.add_argument("--platform", default=None, metavar="KEY",
                   help="platform key to tune for (a Ray node must advertise it), or 'all' in the cluster")
    s.add_argument("--repeat", type=int, default=20,
                   help="at most this many paired rounds (candidate vs defaults) per trial (default 20)")
    s.add_argument("--rounds", type=int, default=20,
                   help="paired rounds when confirming finalists: half choose the winner, half report it; "
                        "at least 12, so each half gives a 95%% interval (default 20)")
    s.add_argument("--threads", type=int, default=None, help="torch threads while measuring")
    s.add_argument("--memory-limit", default=None, metavar="SIZE",
                   help="memory cap of each trial process, e.g. 4G or 512M (a trial past it is recorded as crashed)")
    s.add_argument("--shapes", default=None, metavar="DIMS",
                   help="tune one config per shape bucket, e.g. \"batch=1,8,32\" (weights: \"batch=1:6,8:3,32:1\"); "
                        "get_inputs takes each dimension as a keyword argument; --trials counts per bucket")
    add_db_option(s)


def cmd_search(args: argparse.Namespace, settings: Settings) -> int:
    """Exit 0 when every platform's search stored a verdict, 1 when one had no correct trial.
    Interrupted (SearchInterrupted), it prints the summary of what finished and lets the
    interrupt go on to `tuner.cli.main` (exit 130)."""
    from tuner.precision import parse_precisions
    from tuner.search import (Execution, SearchInterrupted, SearchOptions, parse_duration, parse_objectives,
                              pruning_notice, run_search)
    from tuner.trial import MeasureSpec, parse_size_mb

    # Flags first, then the environment's settings; the options check themselves (UsageError).
    memory_limit_mb = None if args.memory_limit is None else parse_size_mb(args.memory_limit)
    spec = MeasureSpec(model_path=args.model, seed=args.seed, threads=args.threads or settings.threads or None,
                       repeat=args.repeat, timeout_s=args.timeout or settings.trial_timeout_s,
                       memory_limit_mb=memory_limit_mb, tolerance=args.tolerance, mode=args.mode)
    precision = () if args.precision is None else parse_precisions(args.precision)
    budget_s = None if args.budget is None else parse_duration(args.budget)
    trials = args.trials if args.trials is not None or budget_s is not None else DEFAULT_TRIALS
    options = SearchOptions(measure=spec, trials=trials, budget_s=budget_s, sampler=args.sampler, seed=args.seed,
                            resume=args.resume, rounds=args.rounds, space=args.space, unsafe=args.unsafe,
                            pruner=args.pruner, warm_start=args.warm_start, cost_model=args.cost_model,
                            precision=precision,
                            objectives=parse_objectives(args.objective), prefer=args.prefer,
                            runtime_knobs=args.runtime_knobs)
    if (notice := pruning_notice(options.objectives, options.pruner)) is not None:
        print(f"notice: {notice}", file=sys.stderr)
    execution = Execution(executor=args.executor, workers=args.workers, address=args.address, platform=args.platform,
                          warm_processes=not args.cold_processes)
    printer = SearchPrinter(trials, train=args.mode == "train", budget_s=budget_s)
    try:
        if args.shapes is None:
            results = run_search(options, execution=execution, settings=settings, events=printer)
        else:   # one search per bucket, then the weighted latency (tuner.search.buckets)
            from tuner.cli.buckets import search_buckets

            results = search_buckets(options, args.shapes, execution=execution, settings=settings, events=printer)
    except SearchInterrupted as stop:
        printer.interrupted(stop)
        raise
    finally:
        printer.close()
    return max(0 if result.verdict is not None else 1 for result in results)


def default_failure(trials: Sequence[TrialRecord], *, train: bool) -> str | None:
    """When the defaults' own trial failed, one line naming the model file's function that works in
    eager (the search checked it before any trial) but fails on the compiled model, with the error:
    every trial is paired with the default compile, so then every trial failed. None otherwise."""
    defaults = next((r for r in trials if not r.params), None)
    if defaults is None or defaults.measurement.ok or defaults.measurement.status.value in ("pruned", "cancelled"):
        return None
    status = defaults.measurement.status.value
    error = (defaults.measurement.error or status).partition("\n")[0]
    if train:
        return (f"get_loss works in eager but fails on the compiled model ({status}): {error}; every trial is "
                f"paired with the default compile, so none could run (docs/troubleshooting.md)")
    return (f"the model works in eager but fails under Inductor's default compile ({status}): {error}; every "
            f"trial is paired with the default compile, so none could run (docs/troubleshooting.md)")


def warm_start_lines(outcome: SearchOutcome) -> list[str]:
    """One line per warm start the search measured: its trial, where it came from, its result."""
    from tuner.cli.summary import speedup_text

    by_number = {r.number: r for r in outcome.trials}
    lines = []
    for number, why in outcome.warm_starts:
        m = by_number[number].measurement
        result = f"{speedup_text(m)} vs default" if m.ok else m.status.value
        lines.append(f"warm start: trial {number}, the stored best of {why}: {result}")
    return lines


def cap_line(outcome: SearchOutcome) -> str | None:
    """How many trials' compiles the adaptive cap stopped (`tuner.trial.compile_cap`), and the cap; None: none."""
    from tuner.trial import CAP_PREFIX, Status

    stopped = [r for r in outcome.trials
               if r.measurement.status is Status.TIMEOUT and (r.measurement.error or "").startswith(CAP_PREFIX)]
    if not stopped:
        return None
    cap = outcome.compile_cap
    at = f" ({cap.seconds:.3g} s: {cap.basis()})" if cap is not None else ""
    numbers = ", ".join(str(r.number) for r in stopped[:8]) + (", ..." if len(stopped) > 8 else "")
    return (f"{len(stopped)} compile(s) stopped at the adaptive cap{at}: trial(s) {numbers}, recorded as timeout; "
            f"see `tuner trials`")


def budget_line(outcome: SearchOutcome, budget_s: float, took_s: float) -> str:
    """What --budget did: where it stopped the trials and why, or that it was not reached; how long
    the search took, and when that is over the budget, why."""
    from tuner.search import format_duration

    head = f"budget {format_duration(budget_s)}"
    stop = outcome.budget
    if stop is not None:
        left = (f"with {format_duration(stop.left_s)} left" if stop.left_s >= 0
                else f"{format_duration(-stop.left_s)} past it")
        what = (f"stopped handing out trials after {stop.trials} {left} (a trial takes up to "
                f"{format_duration(stop.trial_s)} here, the confirmation about {format_duration(stop.confirm_s)})")
    elif outcome.cut:
        what = "reached while the last trials ran"
    else:
        what = "not reached: the trials asked for were done first" if not outcome.exhausted else \
            "not reached: the space ran out of new candidates first"
    if outcome.cut:
        what += (f"; stopped {len(outcome.cut)} trial(s) still running where the time left was what the confirmation "
                 f"needs (trial {', '.join(map(str, sorted(outcome.cut)))}: recorded as cancelled, not failed)")
    took = f"the search took {format_duration(took_s)}"
    if took_s > budget_s and (stop is None or stop.trials <= 1):
        took += (", over the budget: the first trial and the confirmation, which always run so that a result is "
                 f"confirmed, take longer here; give --budget at least {format_duration(took_s * 1.2)}")
    elif took_s > budget_s:
        took += (f", {format_duration(took_s - budget_s)} over the budget (the last trials or the confirmation "
                 f"took longer than the trials before them)")
    return f"{head}: {what}; {took}"


class SearchPrinter:
    """The search's `SearchEvents` as the terminal shows them: the `kernel:` lines, notices and
    the "tuning" line on stderr, the live progress while trials run (`tuner.cli.progress`: a
    panel on a terminal, plain lines elsewhere), then each platform's summary table on stdout."""

    def __init__(self, trials: int | None, *, train: bool = False, budget_s: float | None = None):
        self.trials = trials
        self.train = train
        self.budget_s = budget_s
        self.began = time.monotonic()         # the budget counts from here (run_search starts at once)
        self.progress: Progress | None = None

    def kernels_tuned(self, launches: tuple[KernelLaunch, ...]) -> None:
        from tuner.kernels import describe_launch

        for launch in launches:
            print(f"kernel: {describe_launch(launch)}", file=sys.stderr)

    def prepared(self, target: Target) -> None:
        for notice in target.space.notices:
            print(f"notice: {notice}", file=sys.stderr)

    def starting(self, target: Target, *, database: str) -> None:
        workload, platform = target.workload, target.platform
        print(f"tuning {workload.name} ({len(workload.graphs)} graph(s), workload {workload.key[:12]}) "
              f"on {platform.describe()} [platform {platform.key[:12]}]; database {database}", file=sys.stderr)

    def searching(self, study: StudyInfo, *, done: int) -> None:
        from tuner.cli.progress import Progress

        self.progress = Progress(self.trials, done=done)

    def trial_started(self, number: int, params: Mapping[str, Any]) -> None:
        if self.progress is not None:
            self.progress.started(number, params)

    def trial_done(self, record: TrialRecord) -> None:
        if self.progress is not None:
            self.progress.update(record)

    def confirming(self, line: str) -> None:
        self.close()            # the trials' live progress ends with the trials
        print(line, file=sys.stderr, flush=True)

    def finished(self, result: SearchResult) -> None:
        from tuner.cli.summary import summary_table

        self.close()
        if result.verdict is None:
            print("no trial ran correctly: Inductor's defaults stay; see `tuner trials` for the errors")
            if (line := default_failure(result.outcome.trials, train=self.train)) is not None:
                print(line)
            self._limits(result.outcome)
            return
        if result.outcome.skipped:
            print(f"note: {result.outcome.skipped} proposal(s) holding a knob value or pair that always failed "
                  f"to compile on this platform were skipped unmeasured (learned failures)", file=sys.stderr)
        if result.outcome.exhausted:
            print("note: the search space ran out of new candidates before --trials was reached", file=sys.stderr)
        for line in warm_start_lines(result.outcome):
            print(line, file=sys.stderr)
        print(summary_table(result.verdict))
        study = result.outcome.study
        if study.objectives != ("latency",):    # several objectives: the front, as `tuner best` shows it
            from tuner.cli.results import front_text

            print(front_text(study, list(result.outcome.trials)))
        self._limits(result.outcome)

    def _limits(self, outcome: SearchOutcome) -> None:
        """The lines of what bounded the search: the compiles the adaptive cap stopped, the budget."""
        if (line := cap_line(outcome)) is not None:
            print(line)
        if self.budget_s is not None:
            print(budget_line(outcome, self.budget_s, time.monotonic() - self.began))

    def interrupted(self, stop: SearchInterrupted) -> None:
        """The summary of what finished before an interrupt; nothing was confirmed or stored."""
        from tuner.cli.summary import interrupted_summary

        self.close()
        print(interrupted_summary(stop.outcome, total=self.trials, confirming=stop.confirming))

    def close(self) -> None:
        """End the live progress (on a terminal); also when the search stops with an error."""
        if self.progress is not None:
            self.progress.close()
            self.progress = None
