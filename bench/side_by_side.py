"""What the two measurement benchmarks share: tune a model, read its stored verdict, and
measure variants side by side in one fresh process.

Used by bench/tuned_vs_builtin.py and bench/reproducibility.py (not a script of its own,
except as the measuring child: `python bench/side_by_side.py JOB.json RESULT.json`).

The measuring child runs `tuner.measure.run_confirmation` (every variant compiled and
checked against eager, then timed once per round in shuffled order). When asked, it also
counts the model's FLOPs per call on eager (`torch.utils.flop_counter.FlopCounterMode`) and
measures the machine's GEMM ceiling: a square matmul in the model's dtype, GFLOP/s as the
median of repeats taken before and after the rounds (so a drift of the machine weighs on both).
"""
from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tuner.storage import BestConfig
    from tuner.trial import ConfirmRequest, ConfirmResult

ROOT = Path(__file__).resolve().parent.parent
CEILING_SIZE = 2048
CEILING_REPEATS = 7


@dataclass(frozen=True)
class Stored:
    """The verdict a search stored for a model: the first graph's BestConfig (the search gives
    every graph of a workload the same config) and how many graphs hold another one."""

    best: BestConfig
    graphs: int
    differing: int

    @property
    def params(self) -> tuple[tuple[str, Any], ...] | None:
        """The variant to measure, as ConfirmRequest takes it: None eager, () defaults, else the knobs."""
        if self.best.eager:
            return None
        return () if self.best.is_default else tuple(sorted(self.best.params.items()))

    @property
    def plain_params(self) -> tuple[tuple[str, Any], ...] | None:
        """What `backend="tuner"` applies beside a freezing winner; None when the winner does not freeze."""
        unfrozen = self.best.unfrozen_params
        return None if unfrozen is None else tuple(sorted(unfrozen.items()))

    def describe(self) -> str:
        if self.best.eager:
            return "eager (run uncompiled)"
        if self.best.is_default:
            return "defaults"
        return ", ".join(f"{k}={v}" for k, v in sorted(self.best.params.items()))

    def claimed(self) -> str:
        b = self.best
        text = f"{b.speedup:.2f}x [{b.ci_low:.2f}, {b.ci_high:.2f}]"
        if b.search_speedup is not None:
            text += f", search saw {b.search_speedup:.2f}x"
        return text


class _Progress:
    """The SearchEvents of a benchmark's search: one line per recorded trial on stderr."""

    def __init__(self, name: str) -> None:
        self.name, self.done = name, 0

    def prepared(self, target: Any) -> None:
        pass

    def starting(self, target: Any, *, database: str) -> None:
        pass

    def searching(self, study: Any, *, done: int) -> None:
        pass

    def kernels_tuned(self, launches: Any) -> None:
        pass

    def trial_started(self, number: int, params: Any) -> None:
        pass

    def trial_done(self, record: Any) -> None:
        self.done += 1
        m = record.measurement
        latency = f" {m.latency_ms:.3f} ms" if m.latency_ms is not None else ""
        print(f"  {self.name}: trial {self.done}: {m.status.value}{latency}", file=sys.stderr, flush=True)

    def confirming(self, line: str) -> None:
        print(f"  {self.name}: {line}", file=sys.stderr, flush=True)

    def finished(self, result: Any) -> None:
        """The search's own summary (finalists, ablation, claim), as `tuner search` prints it."""
        from tuner.cli.summary import summary_table

        if result.verdict is not None:
            text = summary_table(result.verdict)
            print("\n".join(f"  {self.name}: {line}" for line in text.splitlines()), file=sys.stderr, flush=True)


def tune(model: Path, *, trials: int, seed: int, db_url: str, executor: str,
         rounds: int | None = None) -> tuple[Stored, float]:
    """Search `model` as `tuner search` would (`rounds`: its --rounds; None: the search's default),
    into `db_url`; the stored verdict and the seconds it took.

    Raises TunerError (and its kinds) as `run_search` does, or RuntimeError when the search
    stored no verdict (no trial ran correctly)."""
    from tuner.search import Execution, SearchOptions, prepare_target, run_search
    from tuner.settings import Settings
    from tuner.storage import Store
    from tuner.trial import MeasureSpec

    start = time.monotonic()
    options = SearchOptions(MeasureSpec(str(model), seed=seed), trials=trials, seed=seed)
    run_search(options if rounds is None else replace(options, rounds=rounds),
               execution=Execution(executor), settings=Settings(db_url=db_url), events=_Progress(model.stem))
    seconds = time.monotonic() - start
    target = prepare_target(str(model), seed=seed)
    with Store.open(db_url, readonly=True) as store:
        bests = [store.best_config(g.key, target.platform.key) for g in target.workload.graphs]
    if not bests or bests[0] is None:
        raise RuntimeError(f"the search of {model} stored no verdict for platform {target.platform.key}")
    first = bests[0]
    differing = sum(1 for b in bests[1:] if b is None or (b.params, b.eager) != (first.params, first.eager))
    return Stored(best=first, graphs=len(bests), differing=differing), seconds


@dataclass(frozen=True)
class Measured:
    """One side-by-side run: the ConfirmResult, and (when asked) FLOPs per call and the GEMM ceiling."""

    result: ConfirmResult
    flops: int | None
    ceiling_gflops: float | None
    dtype: str | None
    seconds: float

    def share(self, latency_ms: float | None) -> float | None:
        """The share of the GEMM ceiling a variant at `latency_ms` reaches; None when unknown."""
        if not (self.flops and self.ceiling_gflops and latency_ms):
            return None
        return self.flops / (latency_ms / 1000) / (self.ceiling_gflops * 1e9)


def measure(request: ConfirmRequest, *, ceiling: bool, timeout_s: float) -> Measured:
    """Run `request` in one fresh process; raises RuntimeError when it fails."""
    with tempfile.TemporaryDirectory(prefix="tuner-bench-") as tmp:
        job, out = Path(tmp) / "job.json", Path(tmp) / "result.json"
        job.write_text(json.dumps({"request": request.to_json(), "ceiling": ceiling}))
        start = time.monotonic()
        try:
            proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), str(job), str(out)], cwd=tmp,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=timeout_s,
                                  check=False)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"the measuring process ran past {timeout_s:.0f} s; give it more with --timeout") from exc
        seconds = time.monotonic() - start
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"the measuring process exited with {proc.returncode}: {proc.stderr[-2000:]}")
        data = json.loads(out.read_text())
    from tuner.trial import ConfirmResult

    return Measured(result=ConfirmResult.from_json(data["result"]), flops=data["flops"],
                    ceiling_gflops=data["ceiling_gflops"], dtype=data["dtype"], seconds=seconds)


# The child that measures the stored config as a user applies it: `tuner compare`'s own code.
_APPLIED_CHILD = """
import json, sys
from tuner.report import compare_applied
comparison = compare_applied(sys.argv[1], rounds=int(sys.argv[2]), seed=int(sys.argv[3]))
rows = {}
for path in comparison.paths:
    sp = comparison.speedup(path.label)
    rows[path.label] = {"ms": path.latency_ms, "problem": path.problem,
                        "speedup": None if sp is None else [sp.median, sp.low, sp.high]}
print(json.dumps(rows))
"""


@dataclass(frozen=True)
class Applied:
    """Each path of `tuner.report.compare_applied` in one fresh process (eager, the default compile,
    `backend="tuner"`, `tuner.compile`): label -> median ms, speedup over the default compile
    [median, low, high] (None when not timed) and the problem of a path not timed."""

    rows: dict[str, dict[str, Any]]
    seconds: float

    def speedup(self, label: str) -> float | None:
        row = self.rows.get(label) or {}
        return row["speedup"][0] if row.get("speedup") else None


def measure_applied(model: Path, *, db_url: str, rounds: int, seed: int, timeout_s: float) -> Applied:
    """The stored configs applied as a user applies them, in one fresh process reading `db_url`."""
    import os

    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-c", _APPLIED_CHILD, str(model), str(rounds), str(seed)],
                              env={**os.environ, "TUNER_DB": db_url}, capture_output=True, text=True,
                              timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"the applied run ran past {timeout_s:.0f} s; give it more with --timeout") from exc
    if proc.returncode != 0:
        raise RuntimeError(f"the applied run exited with {proc.returncode}: {proc.stderr[-2000:]}")
    return Applied(rows=json.loads(proc.stdout.strip().splitlines()[-1]), seconds=time.monotonic() - start)


def interval(values: tuple[float, ...] | list[float]) -> tuple[float, float, float]:
    """Median and its order-statistic interval (tuner.trial.stats.median_interval)."""
    from tuner.trial.stats import median_interval

    low, high = median_interval(list(values))
    return statistics.median(values), low, high


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


# -- the measuring child -----------------------------------------------------------

def _gemm_gflops(dtype: Any, repeats: int) -> list[float]:
    """GFLOP/s of `repeats` square matmuls of CEILING_SIZE in `dtype`, after two warm-up calls."""
    import torch

    a = torch.randn(CEILING_SIZE, CEILING_SIZE).to(dtype)
    b, c = torch.randn_like(a), torch.empty_like(a)
    flop = 2 * CEILING_SIZE**3
    samples = []
    for i in range(repeats + 2):
        start = time.perf_counter()
        torch.mm(a, b, out=c)
        if i >= 2:
            samples.append(flop / (time.perf_counter() - start) / 1e9)
    return samples


def _flops_and_dtype(spec: Any) -> tuple[int, Any]:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from tuner.workload import load_model_file

    loaded = load_model_file(spec.model_path, seed=spec.seed)
    dtype = next((p.dtype for p in loaded.model.parameters() if p.is_floating_point()), torch.float32)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        loaded.call()
    return counter.get_total_flops(), dtype


def child(job_path: str, out_path: str) -> int:
    import torch

    from tuner.measure import measure_lock, run_confirmation
    from tuner.trial import ConfirmRequest

    job = json.loads(Path(job_path).read_text())
    request = ConfirmRequest.from_json(job["request"])
    if request.spec.threads:
        torch.set_num_threads(request.spec.threads)
    flops, dtype = _flops_and_dtype(request.spec) if job["ceiling"] else (None, None)
    samples: list[float] = []
    if dtype is not None:
        with measure_lock():
            samples += _gemm_gflops(dtype, CEILING_REPEATS)
    result = run_confirmation(request)
    if dtype is not None:
        with measure_lock():
            samples += _gemm_gflops(dtype, CEILING_REPEATS)
    Path(out_path).write_text(json.dumps({
        "result": result.to_json(), "flops": flops, "dtype": None if dtype is None else str(dtype).removeprefix("torch."),
        "ceiling_gflops": statistics.median(samples) if samples else None}))
    return 0


if __name__ == "__main__":
    sys.exit(child(sys.argv[1], sys.argv[2]))
