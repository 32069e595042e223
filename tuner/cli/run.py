"""`tuner run [--model MODEL] SCRIPT [ARGS...]`: start a program in the process its model was tuned for.

A stored verdict may hold runtime knobs (`tuner.runtime`: the allocator, OpenMP's policy) that
take effect only in a process started with them, as `torch.backends.xeon.run_cpu` starts one.
This reads the verdict stored for MODEL on this platform (as `tuner best` does; MODEL defaults to
SCRIPT, for a model file that runs itself), builds the environment its runtime knobs need (an
allocator resolved to the system's own library, never a path from the database), says so in one
line on stderr, and replaces itself with `python SCRIPT ARGS...` in that environment. Nothing
stored, no runtime knob stored, or a database that cannot be read starts the program as it is, with
a line saying so (as `backend="tuner"` compiles with Inductor's defaults then). `--db`
is passed on as TUNER_DB, so `backend="tuner"` in the program reads the same database.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from tuner.cli.common import add_command, add_db_option, dynamo_warnings_hidden
from tuner.errors import StorageError, UsageError
from tuner.settings import Settings


def add_run_parser(subparsers: Any) -> None:
    """Add `run` to the CLI's subcommands (called from `tuner.cli.build_parser`)."""
    p = add_command(subparsers, "run", cmd_run,
                    help="start a Python program with the runtime knobs (allocator, OpenMP) stored for its model")
    p.add_argument("--model", default=None, help="the model file the search tuned (default: SCRIPT itself)")
    p.add_argument("--mode", default="inference", choices=("inference", "train"),
                   help="the search's --mode (default inference)")
    add_db_option(p)
    p.add_argument("script", help="the Python program to start")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")


def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    env, line = launch_env(args, settings, dict(os.environ))
    print(f"tuner run: {line}", file=sys.stderr, flush=True)
    os.execve(sys.executable, [sys.executable, args.script, *args.args], env)
    return 0    # not reached


def launch_env(args: argparse.Namespace, settings: Settings, base: dict[str, str]) -> tuple[dict[str, str], str]:
    """The environment to start SCRIPT in, and the line that says what it holds."""
    from tuner.runtime import RuntimeConfig
    from tuner.search import prepare_target
    from tuner.storage import Store

    if not os.path.isfile(args.script):
        raise UsageError(f"script {args.script} not found; give the path of a Python program: tuner run SCRIPT.py")
    model = args.model or args.script
    with dynamo_warnings_hidden(args, settings):
        target = prepare_target(model, mode=args.mode)
    env = {**base, "TUNER_DB": settings.db_url} if args.db else dict(base)
    try:
        with Store.open(settings.db_url, readonly=True) as store:
            bests = store.workload_best(target.workload.key, target.platform.key)
    except StorageError as exc:     # the program runs anyway, as backend="tuner" compiles with defaults
        return env, f"no stored verdict could be read ({exc}); starting {args.script} as it is"
    if not bests:
        return env, (f"nothing stored for {model} on {target.platform.describe()}; starting {args.script} as it is "
                     f"(run: tuner search {model})")
    sizes = {g.key: g.num_nodes for g in target.workload.graphs}
    best = max(bests, key=lambda b: sizes.get(b.graph_key, 0))      # the largest graph's, as --emit does
    runtime = RuntimeConfig.from_dict(best.runtime)
    if runtime.is_default:
        return env, f"the verdict stored for {model} sets no runtime knob; starting {args.script} as it is"
    started = runtime.start_env(env)
    shown = " ".join(f"{k}={started[k]}" for k in sorted(started) if started.get(k) != base.get(k) and k != "TUNER_DB")
    return started, f"starting {args.script} with {runtime.label()} ({shown})"
