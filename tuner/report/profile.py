"""Where the time goes: `torch.profiler` over the default compile and the tuned model.

Runs in the report's own process. The model file is loaded twice (fresh module objects, so
Dynamo never shares compiled code between the two): one copy compiled with Inductor's
defaults (what every trial pairs against), the other with `tuner.compile(model, db=URL)`, which
applies the kept config of each graph exactly as a user gets it (freezing and eager verdicts
included). Both are warmed up first (compiles, caches, freezing's second trace, the profiler's
own start-up), then profiled under no_grad in alternating rounds, so a machine that slows down
midway slows both sides alike. Operator names that carry a compile id or a graph hash (which
differ between the two sides for the same work) are shown without them.
"""
from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

CALLS = 20              # profiled calls per side
ROUNDS = 4              # alternating profiled rounds per side, CALLS / ROUNDS calls each
WARMUP = 3              # calls before profiling: the first compiles; freezing re-traces on the second
TOP = 12                # operators shown
# "Torch-Compiled Region: 0/2" and "## Call CompiledFxGraph f3x...v7 ##" name the same work on both sides
_RENAMES = ((re.compile(r"^(Torch-Compiled Region: \d+)/\d+$"), r"\1"),
            (re.compile(r"^## Call CompiledFxGraph \S+ ##$"), "## Call CompiledFxGraph ##"))


@dataclass(frozen=True)
class OpTime:
    """One operator's self time per call (ms) in each model; 0.0 where it did not run."""

    name: str
    default_ms: float
    tuned_ms: float


@dataclass(frozen=True)
class ProfileResult:
    """The top operators by self time (the larger of the two sides), the total self time per
    call of each side, and the lookup lines that say which config each graph of the tuned side got."""

    ops: tuple[OpTime, ...]
    default_ms: float
    tuned_ms: float
    calls: int
    device: str
    lookup: tuple[str, ...]


def profile_best(model_path: str, db_url: str, *, calls: int = CALLS, top: int = TOP) -> ProfileResult:
    """Profile the default compile and the tuned model of `model_path` (module docstring).

    Compiles in this process; a model file that fails to load raises ModelFileError.
    """
    import torch

    import tuner
    from tuner.inductor import CompileConfig, compile_model
    from tuner.workload import load_model_file

    default, tuned = load_model_file(model_path), load_model_file(model_path)
    with torch.no_grad():
        default_fn = compile_model(default.model, CompileConfig())
        with collect_lookup_lines() as lines:
            tuned_fn = tuner.compile(tuned.model, db=db_url)
            _call(tuned.call, tuned_fn, WARMUP, tuned.device)
        _call(default.call, default_fn, WARMUP, default.device)
        _self_times(default.call, default_fn, 1, default.device)      # the profiler's start-up, unmeasured
        default_ops: dict[str, float] = {}
        tuned_ops: dict[str, float] = {}
        per_round = max(1, calls // ROUNDS)
        for _ in range(ROUNDS):
            _add(default_ops, _self_times(default.call, default_fn, per_round, default.device), ROUNDS)
            _add(tuned_ops, _self_times(tuned.call, tuned_fn, per_round, tuned.device), ROUNDS)
    names = sorted(set(default_ops) | set(tuned_ops),
                   key=lambda n: -max(default_ops.get(n, 0.0), tuned_ops.get(n, 0.0)))
    ops = tuple(OpTime(n, default_ops.get(n, 0.0), tuned_ops.get(n, 0.0)) for n in names[:top])
    return ProfileResult(ops=ops, default_ms=sum(default_ops.values()), tuned_ms=sum(tuned_ops.values()),
                         calls=per_round * ROUNDS, device=default.device, lookup=tuple(lines))


def _add(total: dict[str, float], one_round: dict[str, float], rounds: int) -> None:
    for name, ms in one_round.items():
        total[name] = total.get(name, 0.0) + ms / rounds


def _call(call: Callable[[Any], Any], fn: Any, times: int, device: str) -> None:
    import torch

    for _ in range(times):
        call(fn)
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)      # the model's own GPU, not the current one (cuda:0)


def _self_times(call: Callable[[Any], Any], fn: Any, calls: int, device: str) -> dict[str, float]:
    """Self time per call (ms) by operator name over `calls` profiled calls: CPU time on a CPU
    model, device (kernel) time on a CUDA one."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.startswith("cuda")
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    with _without_profiler_chatter(), profile(activities=activities) as prof:
        _call(call, fn, calls, device)
    field = "self_device_time_total" if cuda else "self_cpu_time_total"
    times: dict[str, float] = {}
    for event in prof.key_averages():
        us = float(getattr(event, field, 0.0))
        if us > 0:
            name = _plain_name(event.key)
            times[name] = times.get(name, 0.0) + us / 1000.0 / calls
    return times


@contextlib.contextmanager
def _without_profiler_chatter() -> Iterator[None]:
    """Drop the profiler's own trace lines from the process's native stderr (torch 2.13's
    libkineto writes "USDT:... profiler_start" and "profiler_stop" there for every profiled
    block, bypassing Python's logging); any other line written meanwhile is passed on."""
    import os
    import sys
    import tempfile

    sys.stderr.flush()
    with tempfile.TemporaryFile(mode="w+b") as held:
        saved = os.dup(2)
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = [line for line in held.read().decode(errors="replace").splitlines(keepends=True)
                    if not line.startswith("USDT:")]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


def _plain_name(name: str) -> str:
    for pattern, replacement in _RENAMES:
        name = pattern.sub(replacement, name)
    return name


@contextlib.contextmanager
def collect_lookup_lines() -> Iterator[list[str]]:
    """Collect the lookup's INFO lines (one per graph: hit or miss, and what it applies) while
    the block runs, without printing them (also `tuner.report.applied`'s)."""
    logger = logging.getLogger("tuner.lookup")
    lines: list[str] = []
    handler = _ListHandler(lines)
    saved = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


class _ListHandler(logging.Handler):
    def __init__(self, lines: list[str]) -> None:
        super().__init__(logging.INFO)
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
