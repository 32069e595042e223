"""A long search holds: memory, open files, processes and rows after hundreds of trials.

    python bench/long_search.py [--trials 300] [--workers 4] [--executor ray] [--model FILE]

Runs `tuner search` on a tiny model as a user would (a subprocess, a fresh SQLite file, a local
Ray cluster by default) and samples the driver process while it runs: its resident memory
(VmRSS) and open file descriptors when the database first holds 10% of the trials and when it
holds all of them. At the end it checks that the database holds exactly --trials trials and
that no process the search started (trial processes, Ray) is left. Prints one table.

Goal (issue "faults"): memory and open files at the last trial within 10% of the 10% mark.
Not a test: it takes tens of minutes on 2 cores.
"""
from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "models" / "tiny_mlp.py"


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def descendants(pid: int) -> set[int]:
    """Every live process whose ancestry reaches `pid` (read from /proc)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                parents[int(entry)] = int(fields[1])
            except (OSError, IndexError):
                continue
    found, frontier = set(), {pid}
    while frontier:
        children = {child for child, parent in parents.items() if parent in frontier} - found
        found |= children
        frontier = children
    return found


def trial_count(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as conn:
            return conn.execute("SELECT count(*) FROM trials").fetchone()[0]
    except sqlite3.Error:
        return 0


def leftovers(marker: str) -> list[str]:
    """Processes still running whose command line or environment names this run's folder."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            env = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if marker in cmd or marker.encode() in env:
            found.append(f"{entry}: {cmd[:100]}")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--executor", default="ray")
    parser.add_argument("--model", default=str(TINY))
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="tuner-long-"))
    db = folder / "long.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNER_")}
    env.update(TUNER_DB=f"sqlite:///{db}", RAY_TMPDIR=str(folder / "ray"), TUNER_BENCH_MARKER=str(folder))
    cmd = [sys.executable, "-m", "tuner", "search", args.model, "--trials", str(args.trials),
           "--workers", str(args.workers), "--executor", args.executor, "--repeat", "5", "--rounds", "12"]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=open(folder / "err.txt", "w"))
    early_mark = max(1, args.trials // 10)
    samples: dict[str, tuple[int, float, int, int, float]] = {}
    peak_children = 0
    while proc.poll() is None:
        done = trial_count(db)
        try:
            children = len(descendants(proc.pid))
            peak_children = max(peak_children, children)
            for label, mark in (("early", early_mark), ("last", args.trials)):
                if label not in samples and done >= mark:
                    samples[label] = (done, rss_mb(proc.pid), open_files(proc.pid), children,
                                      time.monotonic() - start)
        except OSError:
            break
        time.sleep(0.5)
    wall = time.monotonic() - start
    time.sleep(5)   # let Ray's processes finish exiting
    left = leftovers(str(folder))
    stored = trial_count(db)
    print(f"long search: {args.trials} trials of {Path(args.model).name}, {args.workers} workers, "
          f"executor {args.executor}; exit {proc.returncode}; wall {wall:.0f} s")
    print(f"{'at':>6} {'trials':>7} {'driver RSS MB':>14} {'open fds':>9} {'child procs':>12} {'elapsed s':>10}")
    for label, (done, rss, fds, children, elapsed) in samples.items():
        print(f"{label:>6} {done:>7} {rss:>14.1f} {fds:>9} {children:>12} {elapsed:>10.0f}")
    if len(samples) == 2:
        (_, rss0, fd0, _, _), (_, rss1, fd1, _, _) = samples["early"], samples["last"]
        print(f"growth early -> last: RSS {100 * (rss1 / rss0 - 1):+.1f}%, open fds {100 * (fd1 / fd0 - 1):+.1f}% "
              f"(goal: within 10%)")
    print(f"trials in the database: {stored} (want exactly {args.trials}); peak child processes {peak_children}; "
          f"processes left behind: {len(left)}")
    for line in left:
        print(f"  left: {line}")
    if proc.returncode != 0:
        print((folder / "err.txt").read_text()[-2000:])
    return 0 if proc.returncode == 0 and stored == args.trials and not left else 1


if __name__ == "__main__":
    sys.exit(main())
