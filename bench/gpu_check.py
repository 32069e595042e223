#!/usr/bin/env python3
"""A prepared GPU check of tuner (issue 11): run it once on a lent GPU machine.

On the device (repository root; the device tool carries `.whl`, filled here by
`bash bench/gpu_wheels.sh`), one command line:

    R=$PWD && { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl || for w in .whl/*.whl; do python3 -m zipfile -e "$w" /tmp/site; done; } \
      && export PYTHONPATH=/tmp/site && cd /tmp && python3 -P "$R/bench/gpu_check.py"

(the zipfile loop is the fallback where that python3 has no pip: a wheel unpacked is installed).

Why `cd /tmp` and `-P`: the repository root holds the source folder `tuner/` without its
subpackages (storage/, workers/, ... become tuner.storage etc. only through the wheel's
package-dir mapping), so no process of the check may start there. `-P` keeps bench/ off
sys.path; every child process runs in a temp folder with the same PYTHONPATH.

Sections, each caught on its own so one failure keeps the rest:
  a. a Triton matmul tuned by `tuner.autotune` against `triton.autotune` (same configs) and
     `torch.mm`; then a second process sharing the kernel database (bench/gpu_matmul.py);
  b. the trial process's measurement (`LocalExecutor`, `tuner.measure`) against
     `triton.testing.do_bench` of the same compiled model in this process;
  c. Inductor's own kernels: GEMM choices and generated Triton kernels' tile configs harvested
     by a max-autotune compile, then a second process compiling from the database benchmarks
     none of them (bench/gpu_harvest.py);
  d. `tuner search` of a small transformer stack, then `tuner best`;
  e. measurement (issue 24, bench/gpu_measure.py): CUDA events around back-to-back calls against
     the wall clock, the model file's GPU, an asynchronous error at the first call, cudagraph
     replays compared, the gate under cuDNN's TF32 with freezing, the candidate's own memory;
  l. the measure locks: one timed section per GPU at once, one at a time on a GPU (bench/gpu_locks.py);
  k. a `tuner.autotune` kernel inside `torch.compile(fullgraph=True)`, in fresh processes after
     an eager tuning: graphs, graph breaks, configs handed to Inductor (1: a database hit) and
     benchmarks, against the same kernel under `@triton.autotune` (bench/gpu_compile_kernels.py).
Then a table: section, status, key figures. Everything printed also goes to
$OUT/gpu_check.txt when OUT is set (with the three SQLite databases). Budget: --budget
seconds in all (default 480; give the device command about 560 s); the sections run l, k, e, c, b, a, d
and `tuner search` is stopped when the budget runs out (rerun it alone: --sections d).
`--smoke` runs the same code on CPU at toy sizes (Triton's interpreter): a plumbing check.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
SECTIONS = "abcdekl"

GPU_SEARCH = ["--trials", "8", "--repeat", "10", "--rounds", "12", "--timeout", "240"]
SMOKE_SEARCH = ["--trials", "1", "--repeat", "3", "--rounds", "12", "--timeout", "120"]


class Tee:
    """Writes to the console and to a file (the report that comes back from the device)."""

    def __init__(self, stream: Any, file: Any) -> None:
        self.stream, self.file, self.lock = stream, file, threading.Lock()

    def write(self, text: str) -> int:
        with self.lock:
            self.stream.write(text)
            self.file.write(text)
        return len(text)

    def flush(self) -> None:
        self.stream.flush()
        self.file.flush()

    def isatty(self) -> bool:
        return False


@dataclass
class Check:
    """What the sections share: the run folder, the budget, the device and its timers."""

    run_dir: Path
    smoke: bool
    deadline: float
    env: dict[str, str] = field(default_factory=dict)

    @property
    def device(self) -> str:
        return "cpu" if self.smoke else "cuda"

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def python(self, *args: str) -> list[str]:
        return [sys.executable, "-P", *args]

    def sync(self) -> None:
        if not self.smoke:
            import torch

            torch.cuda.synchronize()

    def bench_ms(self, fn: Callable[[], Any]) -> float:
        """Median milliseconds per call: triton.testing.do_bench on the GPU, wall clock in --smoke."""
        if not self.smoke:
            from triton.testing import do_bench

            return float(do_bench(fn, return_mode="median"))
        fn()
        samples = []
        for _ in range(7):
            start = time.perf_counter()
            fn()
            samples.append(1000.0 * (time.perf_counter() - start))
        return statistics.median(samples)

    def model(self, name: str) -> Path:
        return bench_module("gpu_models").write_model(self.run_dir, name, smoke=self.smoke)


@dataclass(frozen=True)
class Outcome:
    section: str
    status: str                   # "ok", "failed: ...", "skipped: ..."
    figures: tuple[str, ...] = ()
    seconds: float = 0.0


def bench_module(name: str) -> Any:
    """A helper module of bench/ by path: -P keeps bench/ off sys.path, and adding it there
    is not needed for two files."""
    if name not in _modules:
        spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
        _modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_modules[name])
    return _modules[name]


_modules: dict[str, Any] = {}


def run_section(label: str, fn: Callable[[Check], list[str]], check: Check, *, needs_s: float) -> Outcome:
    """Run one section; its exception becomes a failed Outcome (traceback printed), the rest go on."""
    print(f"\n== {label} ==", flush=True)
    if check.left() < needs_s:
        print(f"  skipped: {check.left():.0f} s of the budget left, it needs about {needs_s:.0f} s")
        return Outcome(label, "skipped: out of budget")
    start = time.monotonic()
    try:
        figures = fn(check)
        return Outcome(label, "ok", tuple(figures), time.monotonic() - start)
    except Exception as exc:  # noqa: BLE001 - one failed section must not lose the others
        traceback.print_exc(file=sys.stdout)
        head = (str(exc).strip().splitlines() or [""])[0][:160]
        return Outcome(label, f"failed: {type(exc).__name__}: {head}", (), time.monotonic() - start)


def stream(cmd: list[str], check: Check, *, timeout_s: float, env: dict[str, str]) -> tuple[int | None, list[str]]:
    """Run `cmd` in the run folder, printing its output as it comes; (exit status or None
    when it passed `timeout_s` and its process group was killed, its lines)."""
    print(f"  $ {' '.join(cmd[1:])}  (up to {timeout_s:.0f} s)", flush=True)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            cwd=check.run_dir, start_new_session=True)
    lines: list[str] = []

    def pump() -> None:
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            print("  | " + lines[-1], flush=True)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        code: int | None = proc.wait(timeout=max(1.0, timeout_s))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)     # trial processes die with it (PR_SET_PDEATHSIG)
        proc.wait()
        code = None
    reader.join(timeout=10)
    return code, lines


def section_matmul(check: Check) -> list[str]:
    gm = bench_module("gpu_matmul")
    db = f"sqlite:///{check.run_dir / 'kernels.db'}"
    rows = gm.first_process(db, smoke=check.smoke, bench_ms=check.bench_ms, sync=check.sync)
    print("  second process, same database: time to the first result")
    start = time.monotonic()
    code, lines = stream(check.python(str(HERE / "gpu_matmul.py"), "--second-process", db,
                                      *(["--smoke"] if check.smoke else [])),
                         check, timeout_s=min(300.0, check.left()), env=check.env)
    results = [json.loads(ln[len("RESULT "):]) for ln in lines if ln.startswith("RESULT ")]
    if code != 0 or not results:
        raise RuntimeError(f"the second process exited with {code} and no result")
    second = results[0]
    figures, problems = [], []
    for row, again in zip(rows, second["shapes"], strict=True):
        tt, tc = again.get("triton_first_s"), again.get("triton_cached_first_s")
        print(f"  {again['shape']}: tuner.autotune {again['tuner_first_s']:.3f} s (origin {again['origin']}, "
              f"{again['configs_tried']} configs benchmarked); triton.autotune "
              f"{'n/a' if tt is None else f'{tt:.2f} s'}, with cache_results=True "
              f"{'n/a' if tc is None else f'{tc:.3f} s'}")
        figures.append(f"{row['shape']}: tuning s tuner/autotune {row['tuner_tune_s']:.1f}/"
                       f"{_num(row['triton_tune_s'], '.1f')}"
                       f"; ms tuner/autotune/mm {row['tuner_ms']:.3f}/{_num(row['triton_ms'], '.3f')}/"
                       f"{row['mm_ms']:.3f}; 2nd process first call s {again['tuner_first_s']:.2f} "
                       f"({again['origin']})/{_num(tt, '.2f')} (cache_results {_num(tc, '.2f')})")
        errors = [row["tuner_err"], row["triton_err"], again["tuner_err"], again.get("triton_err")]
        if any(e is not None and e > gm.MAX_REL_ERROR for e in errors):
            problems.append(f"{row['shape']} differs from the fp32 reference ({max(e or 0 for e in errors):.1e})")
        if not row["stored"] or again["origin"] != "database" or again["configs_tried"]:
            problems.append(f"{row['shape']}: stored {row['stored']}, second process origin {again['origin']}")
    if second["ray_imported"]:
        problems.append("the second process imported ray")
    print(f"  second process: {time.monotonic() - start:.1f} s in all (import, launch, exit)")
    if problems:
        raise AssertionError("; ".join(problems))
    return figures


def _num(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def section_measure(check: Check) -> list[str]:
    import torch

    from tuner.measure import Rejected, prepare
    from tuner.trial import MeasureSpec, TrialRequest, calibrate, median_and_iqr, time_samples
    from tuner.workers import get_executor

    print("  trial: wall clock over back-to-back calls (launch overhead in, L2 warm), median of samples;\n"
          "  do_bench: CUDA events per call, L2 flushed before each, median")
    figures, problems = [], []
    for name in ("block", "mlp"):
        spec = MeasureSpec(model_path=str(check.model(name)), repeat=20, timeout_s=min(240.0, check.left()))
        executor = get_executor("local", workers=1)
        start = time.monotonic()
        try:
            executor.submit(TrialRequest(spec=spec, params=(), number=0))
            _, trial = executor.next_result()
        finally:
            executor.close()
        if not trial.ok:
            problems.append(f"{name}: the trial process ended {trial.status.value}: "
                            f"{(trial.error or '').partition(chr(10))[0]}")
            print(f"  {problems[-1]}\n{trial.error}")
            continue
        print(f"  {name}: trial process {trial.latency_ms:.4f} ms (IQR {trial.spread_ms:.4f}, compile "
              f"{trial.compile_s:.1f} s, {time.monotonic() - start:.1f} s in all)")
        runner = prepare(spec, ())      # the same model file compiled with the same (default) config
        if isinstance(runner, Rejected):
            problems.append(f"{name}: compiling here failed: {runner.headline}")
            continue
        with torch.no_grad():
            do_bench_ms = check.bench_ms(runner.call)
            calls = calibrate(runner.call, warmup=spec.warmup, sync=runner.sync)
            here_ms, _ = median_and_iqr(time_samples(runner.call, calls=calls, samples=spec.repeat, sync=runner.sync))
        ratio = trial.latency_ms / do_bench_ms
        print(f"  {name}: do_bench here {do_bench_ms:.4f} ms; tuner's timer here {here_ms:.4f} ms; "
              f"trial / do_bench = {ratio:.3f}, timer here / do_bench = {here_ms / do_bench_ms:.3f}")
        figures.append(f"{name}: trial {trial.latency_ms:.3f} ms, do_bench {do_bench_ms:.3f} ms, "
                       f"ratio {ratio:.2f} (same timer in-process {here_ms / do_bench_ms:.2f})")
        del runner
    if problems:
        raise RuntimeError("; ".join(problems))
    return figures


def section_search(check: Check) -> list[str]:
    from tuner.search_spaces import load_space

    space = load_space(check.device)
    import torch

    print(f"  built-in {check.device} space on torch {torch.__version__}: {len(space.knobs)} knobs")
    for notice in space.notices:
        print(f"  notice: {notice}")
    model = str(check.model("block"))
    env = {**check.env, "TUNER_DB": f"sqlite:///{check.run_dir / 'search.db'}"}
    args = ["-m", "tuner", "search", model, "--executor", "local", *(SMOKE_SEARCH if check.smoke else GPU_SEARCH)]
    code, lines = stream(check.python(*args), check, timeout_s=check.left() - 45, env=env)
    if code is None:
        raise TimeoutError("tuner search was stopped: the budget ran out")
    table = summary_rows(lines)
    best_code, best = stream(check.python("-m", "tuner", "best", model), check,
                             timeout_s=max(30.0, check.left() - 5), env=env)
    if code != 0 or best_code != 0:
        raise RuntimeError(f"tuner search exited {code}, tuner best exited {best_code}")
    return table + [f"best: {ln.strip()}" for ln in best[:2]]


def summary_rows(lines: list[str]) -> list[str]:
    """The search's summary table (eager, default, best mode, tuned) and its `stored:` line."""
    first = next((i for i, ln in enumerate(lines) if "latency ms" in ln and "confirmed" in ln), None)
    if first is None:
        return []
    rows = []
    for line in lines[first:]:
        if line.strip() and not set(line.strip()) <= set("-+| "):
            rows.append(" ".join(line.split()))
        if line.startswith("stored:"):
            break
    return rows


def header(check: Check) -> None:
    from importlib import metadata

    import torch

    import tuner
    import tuner.storage  # noqa: F401 - fails here if the source folder shadows the installed wheel
    from tuner.platform import current_platform

    print(f"python {sys.version.split()[0]}; torch {torch.__version__} (CUDA {torch.version.cuda}); "
          f"tuner {tuner.__version__} from {Path(tuner.__file__).parent}")
    for dist in ("triton", "optuna", "sqlalchemy", "alembic", "packaging", "typing_extensions"):
        try:
            print(f"  {dist} {metadata.version(dist)}", end="")
        except metadata.PackageNotFoundError:
            print(f"  {dist} MISSING", end="")
    print()
    if not check.smoke:
        print(f"GPU: {torch.cuda.get_device_name(0)}")
    platform = current_platform(check.device)
    print(f"platform: {platform.describe()}\nplatform key: {platform.key}")
    print(f"run folder: {check.run_dir}; budget {check.left():.0f} s")


def table(outcomes: list[Outcome]) -> None:
    print("\n== summary ==")
    print(f"{'section':<28} {'status':<9} {'s':>5}  figures")
    for o in outcomes:
        status = o.status.split(":")[0]
        lines = list(o.figures) or [""]
        if status != o.status:
            lines.insert(0, o.status)
        print(f"{o.section:<28} {status:<9} {o.seconds:>5.0f}  {lines[0]}")
        for line in lines[1:]:
            print(f"{'':<44}  {line}")


SECTION_FNS: dict[str, tuple[str, Callable[[Check], list[str]], float]] = {
    "a": ("a. Triton matmul autotune", section_matmul, 60.0),
    "b": ("b. trial timer vs do_bench", section_measure, 45.0),
    "c": ("c. Inductor harvesting", lambda check: bench_module("gpu_harvest").section_harvest(check), 90.0),
    "d": ("d. tuner search + best", section_search, 120.0),
    "e": ("e. measurement (issue 24)", lambda check: bench_module("gpu_measure").section_cuda_measure(check), 60.0),
    "l": ("l. a measure lock per GPU", lambda check: bench_module("gpu_locks").section_locks(check), 15.0),
    "k": ("k. tuner.autotune compiled", lambda check: bench_module("gpu_compile_kernels").section_compile(check), 60.0),
}
ORDER = "lkecbad"    # the quick ones first: d stops when the budget runs out, the others would be lost


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="One-shot GPU check of tuner (issue 11); see the module docstring.")
    parser.add_argument("--budget", type=float, default=480.0, help="seconds for the whole check (default 480)")
    parser.add_argument("--sections", default=SECTIONS, help="which of a, b, c, d, e, k, l to run (default abcdekl)")
    parser.add_argument("--smoke", action="store_true", help="CPU, toy sizes, Triton's interpreter: plumbing only")
    args = parser.parse_args(argv)
    start = time.monotonic()
    run_dir = Path(tempfile.mkdtemp(prefix="tuner-gpu-check-"))
    out = os.environ.get("OUT")
    report = open(Path(out) / "gpu_check.txt" if out else run_dir / "gpu_check.txt", "w", buffering=1)
    sys.stdout, sys.stderr = Tee(sys.__stdout__, report), Tee(sys.__stderr__, report)
    # Fresh compile caches, so tuning times include compiling; child processes share them.
    os.environ["TRITON_CACHE_DIR"] = str(run_dir / "triton-cache")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(run_dir / "inductor-cache")
    os.environ["TRITON_CACHE_AUTOTUNING"] = "0"     # plain triton.autotune: no disk cache of timings
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"     # before Triton is imported: its library runs interpreted
    check = Check(run_dir, args.smoke, start + args.budget, {**os.environ, "PYTHONUNBUFFERED": "1"})
    outcomes = [run_section("header", lambda c: header(c) or [], check, needs_s=0.0)]
    for key in (k for k in ORDER if k in args.sections):
        label, fn, needs = SECTION_FNS[key]
        outcomes.append(run_section(label, fn, check, needs_s=needs))
    table(outcomes)
    for name in ("kernels.db", "search.db", "harvest.db"):
        if out and (run_dir / name).exists():
            shutil.copy(run_dir / name, Path(out) / name)
    print(f"\ntotal {time.monotonic() - start:.0f} s; ray imported: {'ray' in sys.modules}")
    report.flush()
    assert "ray" not in sys.modules, "the check imported ray"
    return 0 if all(o.status == "ok" for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
