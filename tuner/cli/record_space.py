"""`tuner record-space MODEL --space FILE --out TABLE`: measure every point of a small space once
(`tuner.search.recording`) and write the table that `ReplayExecutor.from_file` and
`bench/search_efficiency.py` replay."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from tuner.cli.common import add_command
from tuner.search_spaces import MAX_RECORDED_POINTS
from tuner.settings import Settings

DESCRIPTION = ("Measure every point of a small search space once, for real, through the same executor and "
               "paired trials as a search, and write them as a JSON table that the replay executor and "
               "bench/search_efficiency.py replay. It does not write the database. A space with more than "
               f"{MAX_RECORDED_POINTS} points is refused before anything is measured.")


def add_record_space_parser(subparsers: Any) -> None:
    s = add_command(subparsers, "record-space", cmd_record_space,
                    help="measure every point of a small space and write a replayable table (no database)")
    s.description = DESCRIPTION
    s.add_argument("model", help="Python file defining get_model() and get_inputs()")
    s.add_argument("--space", metavar="FILE", required=True,
                   help=f"JSON search-space file of at most {MAX_RECORDED_POINTS} points")
    s.add_argument("--out", metavar="TABLE", required=True, help="where to write the table (JSON)")
    s.add_argument("--executor", default="ray", help="ray (default when installed) or local")
    s.add_argument("--workers", type=int, default=1, help="trials in flight at once (default 1)")
    s.add_argument("--repeat", type=int, default=20,
                   help="at most this many paired rounds (candidate vs defaults) per point (default 20)")
    s.add_argument("--threads", type=int, default=None, help="torch threads while measuring")
    s.add_argument("--timeout", type=float, default=None, metavar="S", help="deadline per trial in seconds")
    s.add_argument("--seed", type=int, default=0, help="seed of get_model()/get_inputs()")


def cmd_record_space(args: argparse.Namespace, settings: Settings) -> int:
    """Exit 0 once the table is written (failed points are rows too), 1 when no point ran correctly."""
    from tuner.cli.progress import Progress
    from tuner.cli.summary import speedup_text
    from tuner.errors import UsageError
    from tuner.search import plan_recording, record
    from tuner.trial import MeasureSpec
    from tuner.workers import get_executor

    if args.repeat < 2:
        raise UsageError(f"--repeat must be at least 2 paired rounds, got {args.repeat}")
    spec = MeasureSpec(model_path=args.model, seed=args.seed, threads=args.threads or settings.threads or None,
                       repeat=args.repeat, timeout_s=args.timeout or settings.trial_timeout_s)
    plan = plan_recording(spec, space_path=args.space)
    target = plan.target
    for notice in target.space.notices:
        print(f"notice: {notice}", file=sys.stderr)
    print(f"recording {len(plan.points)} points of space {target.space.name} for {target.workload.name} "
          f"on {target.platform.describe()}", file=sys.stderr)
    executor = get_executor(args.executor, workers=args.workers, address=settings.ray_address,
                            platform_key=target.platform.key, device=target.platform.device)
    progress = Progress(len(plan.points))
    try:
        table = record(plan, executor=executor, on_result=progress.update)
    finally:
        progress.close()
        executor.close()
    table.write(args.out)
    ok = [(c, m) for c, m in table.rows if m.objective is not None]
    print(f"wrote {args.out}: {len(table.rows)} points, {len(table.rows) - len(ok)} failed")
    if not ok:
        return 1
    best, measured = min(ok, key=lambda row: row[1].objective)
    print(f"fastest point: {best.label()} ({speedup_text(measured)} vs default)")
    return 0
