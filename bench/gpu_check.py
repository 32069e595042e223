#!/usr/bin/env python3
"""A prepared GPU check of tuner (issues 11 and 33): one run of at most 9 minutes on a lent GPU.

`bash bench/gpu_check.sh` builds the wheel folder `.whl` (bench/gpu/gpu_wheels.sh) and prints the
exact device command line and the paths to carry; `python3 bench/gpu_check.py --plan` prints
each section, its time cap and what it verifies (bench/gpu/gpu_plan.py; no torch needed). This
file is the check's door; its sections and helpers are the modules of bench/gpu/ (each named
gpu_*, so that none takes a generic name in sys.modules).

The sections run in order of value, each in a process of its own under its cap: a section past
its cap is stopped (its process group killed) and reported as "stopped", and the next one runs.
A section that needs what the machine lacks (a second GPU) says "not tested: ...", never "ok".
Then a table: section, status, seconds, key figures. Everything printed also goes to
$OUT/gpu_check.txt when OUT is set (with the SQLite databases the sections wrote).

Why `cd /tmp` and `-P` in the device command: the repository root holds the source folder
`tuner/` without its subpackages (storage/, workers/, ... are mapped in by the wheel), so no
process of the check may start there; every section runs in a temp folder with the same PYTHONPATH.

`--smoke` runs the same code on CPU at toy sizes (Triton's interpreter, caps x3): a plumbing
check that tests/system/test_gpu_check.py runs in CI.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
GPU = HERE / "gpu"                  # the sections and their helpers
RESULT = "@@SECTION "
DATABASES = ("search.db", "kernels.db", "harvest.db", "compile-kernels.db")
sys.path.insert(0, str(GPU))        # the two modules below; -P kept bench/ off sys.path
from gpu_common import Check, NotTested, bench_module, stream  # noqa: E402
from gpu_plan import BY_KEY, RUN_BUDGET_S, MARGIN_S, SECTIONS, SMOKE_CAP_SCALE, Section, plan_text  # noqa: E402
sys.path.pop(0)
# A search's summary rows, for the tests (tests/helpers/gpu_check.py) and this check's table.
summary_rows = bench_module("gpu_search").summary_rows
GPU_SEARCH = bench_module("gpu_search").GPU_SEARCH
SMOKE_SEARCH = bench_module("gpu_search").SMOKE_SEARCH


class Tee:
    """Writes to the console and to a file (the report that comes back from the device)."""

    def __init__(self, stream_: Any, file: Any) -> None:
        self.stream, self.file, self.lock = stream_, file, threading.Lock()

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


@dataclass(frozen=True)
class Outcome:
    section: str
    status: str                   # "ok", "not tested: ...", "failed: ...", "stopped: ...", "skipped: ..."
    figures: tuple[str, ...] = ()
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status == "ok" or self.status.startswith("not tested")


def child(key: str, run_dir: Path, smoke: bool, cap_s: float) -> int:
    """Run one section in this process; its last line is RESULT and a JSON {status, figures}."""
    section = BY_KEY[key]
    check = Check(run_dir, smoke, time.monotonic() + cap_s, {**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        figures = getattr(bench_module(section.module), section.function)(check)
        status = "ok"
    except NotTested as exc:
        figures, status = [], f"not tested: {exc}"
    except Exception as exc:  # noqa: BLE001 - the section's failure is its reported status
        traceback.print_exc(file=sys.stdout)
        head = (str(exc).strip().splitlines() or [""])[0][:200]
        figures, status = [], f"failed: {type(exc).__name__}: {head}"
    if "ray" in sys.modules and status == "ok":     # no Ray on the GPU machine: nothing may need it
        status = "failed: the section imported ray"
    print(f"ray imported: {'ray' in sys.modules}")
    print(RESULT + json.dumps({"status": status, "figures": list(figures)}), flush=True)
    return 0


def run_section(section: Section, *, run_dir: Path, smoke: bool, cap_s: float) -> Outcome:
    """`section` in a fresh process, stopped at `cap_s`; what it reported, or why it reported nothing."""
    print(f"\n== {section.label} (cap {cap_s:.0f} s) ==", flush=True)
    start = time.monotonic()
    cmd = [sys.executable, "-P", str(Path(__file__).resolve()), "--child", section.key, "--run-dir", str(run_dir),
           "--child-cap", f"{cap_s:.1f}", *(["--smoke"] if smoke else [])]
    code, lines = stream(cmd, cwd=run_dir, timeout_s=cap_s, env={**os.environ, "PYTHONUNBUFFERED": "1"}, prefix="  ")
    seconds = time.monotonic() - start
    if code is None:
        return Outcome(section.label, f"stopped: past its cap of {cap_s:.0f} s", (), seconds)
    reported = [json.loads(ln[len(RESULT):]) for ln in lines if ln.startswith(RESULT)]
    if not reported:
        return Outcome(section.label, f"failed: its process exited {code} without a result", (), seconds)
    return Outcome(section.label, reported[-1]["status"], tuple(reported[-1]["figures"]), seconds)


def table(outcomes: list[Outcome]) -> None:
    print("\n== summary ==")
    print(f"{'section':<30} {'status':<10} {'s':>5}  figures")
    for o in outcomes:
        status = o.status.split(":")[0]
        lines = list(o.figures) or [""]
        if status != o.status:
            lines.insert(0, o.status)
        print(f"{o.section:<30} {status:<10} {o.seconds:>5.0f}  {lines[0]}")
        for line in lines[1:]:
            print(f"{'':<47}  {line}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="One-shot GPU check of tuner; see the module docstring.")
    parser.add_argument("--plan", action="store_true", help="print each section, its cap and what it verifies")
    parser.add_argument("--budget", type=float, default=RUN_BUDGET_S - MARGIN_S,
                        help=f"seconds for all sections (default {RUN_BUDGET_S - MARGIN_S:.0f})")
    parser.add_argument("--sections", default=",".join(s.key for s in SECTIONS),
                        help="comma-separated keys, run in the plan's order (default: all; see --plan)")
    parser.add_argument("--cap", action="append", default=[], metavar="KEY=S", help="another cap for one section")
    parser.add_argument("--smoke", action="store_true", help="CPU, toy sizes, Triton's interpreter: plumbing only")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", help=argparse.SUPPRESS)
    parser.add_argument("--child-cap", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    unknown = [k for k in args.sections.split(",") if k and k not in BY_KEY]
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}; choose from: {', '.join(BY_KEY)}")
    return args


def caps(args: argparse.Namespace) -> dict[str, float]:
    scale = SMOKE_CAP_SCALE if args.smoke else 1.0
    found = {s.key: s.cap_s * scale for s in SECTIONS}
    for item in args.cap:
        key, _, seconds = item.partition("=")
        if key not in found:
            raise SystemExit(f"--cap {item}: unknown section {key!r}")
        found[key] = float(seconds)
    return found


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.plan:
        print(plan_text(smoke=args.smoke))
        return 0
    if args.child:
        return child(args.child, Path(args.run_dir), args.smoke, args.child_cap)
    start = time.monotonic()
    run_dir = Path(tempfile.mkdtemp(prefix="tuner-gpu-check-"))
    out = os.environ.get("OUT")
    report = open(Path(out) / "gpu_check.txt" if out else run_dir / "gpu_check.txt", "w", buffering=1)
    sys.stdout, sys.stderr = Tee(sys.__stdout__, report), Tee(sys.__stderr__, report)
    # Fresh compile caches, so tuning times include compiling; every section's process shares them.
    os.environ["TRITON_CACHE_DIR"] = str(run_dir / "triton-cache")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(run_dir / "inductor-cache")
    os.environ["TRITON_CACHE_AUTOTUNING"] = "0"     # plain triton.autotune: no disk cache of timings
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"     # before Triton is imported: its library runs interpreted
    print(f"run folder {run_dir}; budget {args.budget:.0f} s; sections {args.sections}")
    wanted, cap_of, outcomes = args.sections.split(","), caps(args), []
    for section in (s for s in SECTIONS if s.key in wanted):
        left = args.budget - (time.monotonic() - start)
        if left < 5:
            outcomes.append(Outcome(section.label, f"skipped: {left:.0f} s of the budget left"))
            continue
        outcomes.append(run_section(section, run_dir=run_dir, smoke=args.smoke, cap_s=min(cap_of[section.key], left)))
    table(outcomes)
    for name in DATABASES:
        if out and (run_dir / name).exists():
            shutil.copy(run_dir / name, Path(out) / name)
    print(f"\ntotal {time.monotonic() - start:.0f} s; ray imported: {'ray' in sys.modules}")
    report.flush()
    return 0 if all(o.passed for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
