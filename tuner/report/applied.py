"""The stored configs applied as a user applies them, measured side by side in one process.

`compare_applied` is what `tuner compare MODEL` runs. It loads the model file once per path
(fresh module objects, so Dynamo never shares compiled code between paths; the same seed, so
the same weights and inputs) and compiles it the ways a user would: eager (not compiled),
`torch.compile` with Inductor's defaults, `torch.compile(backend="tuner")` and `tuner.compile`.
The default compile comes first, so nothing a tuned compile sets up touches it. Each path's
first calls (compiles, and `tuner.compile`'s freezing re-trace on its second no-grad call) are
made, then its output is checked against eager with the search's own gate, against an fp64
reference (`tuner.measure.verify_outputs`); a path that fails or differs takes no part in the
timing.
The rest are timed interleaved and paired, as a confirmation times its finalists
(`tuner.trial.interleaved_rounds`, shuffled per round, under the node's measure lock), the
allocator pinned first as in a trial (`RuntimeConfig.pin_for_timing`), and each speedup is the
median of per-round ratios over the default compile with its interval. What a user's own process
measures, a fresh one per path, is `tuner.report.user_view`.

The lookup's own INFO line for each graph (hit or miss, tier, what it applies) is collected
while each tuned path compiles, so the table can say why a path runs as fast as it does.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any, Callable

from tuner.errors import UsageError
from tuner.trial import MIN_INTERVAL_VALUES, RoundPlan, Speedup, paired_speedup

__all__ = ["AppliedPath", "Comparison", "EAGER", "DEFAULT", "BACKEND", "TUNER_COMPILE", "check_rounds",
           "compare_applied"]

EAGER = "eager (not compiled)"
DEFAULT = "torch.compile (Inductor's defaults)"
BACKEND = 'torch.compile(backend="tuner")'
TUNER_COMPILE = "tuner.compile"
FIRST_CALLS = 3     # the first compiles; tuner.compile freezes on its second no-grad call
SAMPLES_PER_ROUND = 3


@dataclass(frozen=True)
class AppliedPath:
    """One way of running the model: its per-round latencies (ms, paired by index with every other
    path's), the time of its first calls (None for eager), the lookup's lines while it compiled,
    and `problem` (None when it ran and matched eager; else why it was not timed)."""

    label: str
    round_ms: tuple[float, ...] = ()
    first_calls_s: float | None = None
    lookup: tuple[str, ...] = ()
    problem: str | None = None

    @property
    def latency_ms(self) -> float | None:
        import statistics

        return statistics.median(self.round_ms) if self.round_ms else None


@dataclass(frozen=True)
class Comparison:
    """Every path of one `compare_applied` run, in the order measured, with the thread count and
    device it ran with and the rounds behind each speedup."""

    paths: tuple[AppliedPath, ...]
    threads: int
    device: str
    rounds: int
    baseline: str = DEFAULT     # the label every speedup is over

    def path(self, label: str) -> AppliedPath:
        return next(p for p in self.paths if p.label == label)

    def speedup(self, label: str) -> Speedup | None:
        """The path's speedup over the default compile (None when either was not timed)."""
        base, path = self.path(self.baseline), self.path(label)
        if not base.round_ms or not path.round_ms:
            return None
        return paired_speedup(base.round_ms, path.round_ms)


@dataclass(frozen=True, eq=False)
class _Ready:
    """A path compiled and checked: what `interleaved_rounds` times (`tuner.trial.timing.Timed`)."""

    call: Callable[[], Any]
    sync: Callable[[], None]
    device: str


def check_rounds(rounds: int) -> None:
    """Raise UsageError unless `rounds` paired rounds can give a 95% interval. Every round is one
    ratio of each speedup (none is held out), and below MIN_INTERVAL_VALUES ratios the interval is
    unbounded (`tuner.trial.stats.median_interval`): a table of [-inf, inf] would compare nothing."""
    if rounds < MIN_INTERVAL_VALUES:
        raise UsageError(f"--rounds {rounds} is too few for a 95% interval (each speedup is the median of "
                         f"{rounds} paired ratios); give at least --rounds {MIN_INTERVAL_VALUES}")


def compare_applied(model_path: str, *, rounds: int, seed: int = 0) -> Comparison:
    """Compile `model_path` each way (module docstring) in this process and time the paths.

    The caller has set torch's thread count and pointed the process-wide lookup at its database
    (`tuner.lookup.reset_process_lookup`); `backend="tuner"` and `tuner.compile` both read it.
    Too few `rounds` for an interval raise UsageError (`check_rounds`), before anything loads.
    A broken model file raises ModelFileError; a path whose compile or first calls raise, or
    whose output differs from eager, is an `AppliedPath` with its `problem`, not an exception.
    """
    check_rounds(rounds)
    import torch

    import tuner
    from tuner.measure import measure_lock
    from tuner.runtime import RuntimeConfig
    from tuner.trial import interleaved_rounds

    RuntimeConfig().pin_for_timing()        # the allocator as in a trial: nothing run before moves it

    compilers: dict[str, Callable[[Any], Any] | None] = {
        EAGER: None,
        DEFAULT: lambda m: torch.compile(m, backend="inductor"),
        BACKEND: lambda m: torch.compile(m, backend="tuner"),
        TUNER_COMPILE: lambda m: tuner.compile(m),
    }
    ready: dict[str, _Ready] = {}
    paths: dict[str, AppliedPath] = {}
    device = "cpu"
    references = _references(model_path, seed)
    for label, compiler in compilers.items():
        paths[label], runner = _prepare(model_path, seed, label, compiler, references)
        if runner is not None:
            ready[label], device = runner, runner.device
    plan = RoundPlan(min_rounds=rounds, max_rounds=rounds, samples_per_round=SAMPLES_PER_ROUND,
                     target_width=None, budget_s=None)
    timed: dict[str, list[float]] = {}
    if DEFAULT in ready:
        with torch.no_grad(), measure_lock(device):      # the model's own GPU (or the node) held while timed
            timed = interleaved_rounds(ready, plan, baseline=DEFAULT, rng=random.Random(seed))
    final = tuple(AppliedPath(p.label, tuple(timed.get(p.label, ())), p.first_calls_s, p.lookup, p.problem)
                  for p in paths.values())
    return Comparison(paths=final, threads=torch.get_num_threads(), device=device, rounds=rounds)


def _references(model_path: str, seed: int) -> tuple[list[Any], list[Any] | None]:
    """The file's eager output under `seed` and its fp64 one (`tuner.measure.fp64_reference`),
    which every path, loaded under the same seed, is checked against with the search's own gate.
    (The allocator is pinned first, as in a trial: these runs do not move the state the paths are
    timed in; docs/measurement.md, "Process state".)"""
    import torch

    from tuner.measure import fp64_reference, select
    from tuner.workload import flatten_outputs, load_model_file

    loaded = load_model_file(model_path, seed=seed)
    select(loaded.device)
    with torch.no_grad():
        reference = [t.clone() for t in flatten_outputs(loaded.call())]
    return reference, fp64_reference(loaded)


def _prepare(model_path: str, seed: int, label: str, compiler: Callable[[Any], Any] | None,
             references: tuple[list[Any], list[Any] | None]) -> tuple[AppliedPath, _Ready | None]:
    """Load the file afresh, compile it with `compiler` (None: eager), make its first calls under
    no_grad while collecting the lookup's lines, and check the last output against `references`
    (`_references`) with the search's gate."""
    import torch

    from tuner.measure import compile_lock, device_sync, select, verify_outputs
    from tuner.report.profile import collect_lookup_lines
    from tuner.workload import flatten_outputs, load_model_file

    loaded = load_model_file(model_path, seed=seed)
    select(loaded.device)                  # the model file's GPU is this process's, as in a trial
    sync = device_sync(loaded.device)      # waits for that GPU, not the current one
    with torch.no_grad(), collect_lookup_lines() as lines, compile_lock(loaded.device):
        start = time.perf_counter()
        try:
            model = loaded.model if compiler is None else compiler(loaded.model)
            for _ in range(FIRST_CALLS):
                got = flatten_outputs(loaded.call(model))
            sync()
        except Exception as exc:  # a path that fails is a row of the table, as the docstring says
            first_line = next((ln for ln in str(exc).splitlines() if ln.strip()), "")
            return AppliedPath(label, lookup=tuple(lines), problem=f"failed: {type(exc).__name__}: "
                                                                     f"{first_line[:200]}"), None
        first_s = time.perf_counter() - start
    reference, wide = references
    mismatch = verify_outputs(reference, got, wide).mismatch
    path = AppliedPath(label, first_calls_s=None if compiler is None else first_s, lookup=tuple(lines),
                       problem=None if mismatch is None else f"differs from eager: {mismatch}")
    if mismatch is not None:
        return path, None
    return path, _Ready(call=lambda: loaded.call(model), sync=sync, device=loaded.device)
