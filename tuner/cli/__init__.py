"""The `tuner` command line. Errors print `error: ...` on one line and exit 1 (2 for usage).

One module per command group: `search`, `results` (best, trials), `explain`, `db` (upgrade,
check, export, import, merge, ls), `kernels`, `record_space`, `report` (the HTML report),
`compare` (the stored result applied and timed), `dashboard` (the studies in optuna-dashboard) and
`run` (a program started with its model's stored runtime knobs); `common` holds what they share,
`summary` what search, best and trials print, and `progress` a search's live progress. Ctrl-C and
SIGTERM stop a command the same way: exit 130, after a search has cancelled and recorded its trials in
flight. A command parses, calls the library and prints; the work is elsewhere
(`tuner.search.run_search` for a search). Heavy imports stay inside the commands, so
`tuner --help` loads neither torch nor SQLAlchemy (tests/cli/test_cli.py holds it).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import signal
import sys
import threading
import traceback
from typing import Iterator

from tuner.cli.common import DEBUG_HELP
from tuner.cli.compare import add_compare_parser
from tuner.cli.dashboard import add_dashboard_parser
from tuner.text import printable
from tuner.cli.db import add_db_parser
from tuner.cli.explain import add_explain_parser
from tuner.cli.kernels import add_kernels_parser
from tuner.cli.record_space import add_record_space_parser
from tuner.cli.report import add_report_parser
from tuner.cli.results import add_results_parsers
from tuner.cli.run import add_run_parser
from tuner.cli.search import add_search_parser
from tuner.errors import TunerError
from tuner.settings import Settings

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tuner", description="Autotune torch.compile by measurement.")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_search_parser(sub)
    add_results_parsers(sub)        # best, trials
    add_db_parser(sub)              # db upgrade, check, export, import, merge, ls
    add_explain_parser(sub)
    add_kernels_parser(sub)         # kernel tile configs of tuner.autotune
    add_record_space_parser(sub)    # every point of a small space, as a replayable table
    add_report_parser(sub)          # an HTML page of figures, the kept config and a profile
    add_compare_parser(sub)         # the stored result applied (backend="tuner", tuner.compile) and timed
    add_dashboard_parser(sub)       # the stored studies in optuna-dashboard
    add_run_parser(sub)             # a program started with its model's stored runtime knobs
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns its exit status (argparse exits with 2 on a malformed command line)."""
    args = build_parser().parse_args(argv)
    settings = Settings.from_env()
    if getattr(args, "db", None):
        settings = dataclasses.replace(settings, db_url=args.db)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    try:
        with sigterm_interrupts():
            return args.func(args, settings)
    except TunerError as exc:
        if args.debug or settings.debug:
            traceback.print_exc()
        print(f"error: {printable(exc, newlines=True)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        if args.debug or settings.debug:
            traceback.print_exc()
        print(f"error: {_interrupted(args)}", file=sys.stderr)
        return 130


def _interrupted(args: argparse.Namespace) -> str:
    if args.command != "search":
        return "interrupted"
    return (f"interrupted; the trials in flight were cancelled and the finished ones are stored; "
            f"continue with: tuner search {args.model} --resume")


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """While the block runs, SIGTERM raises KeyboardInterrupt, as Ctrl-C does, so that a search
    stopped by `kill` or a scheduler also stops its trials and records them. Only in the main
    thread (where Python runs signal handlers); the previous handler comes back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")
