"""`tuner compare MODEL`: the stored result applied as a user applies it, measured here and now.

In this one process it reads the stored verdict as `tuner best` does (nothing stored: one line
naming the search to run, exit 1), then compiles the model file with Inductor's defaults, with
`backend="tuner"` and with `tuner.compile` (beside eager), checks each against eager and times
them interleaved and paired (`tuner.report.applied`), the allocator pinned as in a trial. Then the
user's view (`tuner.report.user_view`, `--processes` rounds): each path in a fresh process that
does nothing before it times, the emitted code and `tuner run` among them. It prints both tables
(latency and speedup over the default compile with its interval), the stored claim to hold them
against, and the lookup's own line for each graph of each tuned path. Exit 1 when a path failed
or differed from eager. Lines stay within 100 characters.
"""
from __future__ import annotations

import argparse
import sys
import textwrap
from typing import TYPE_CHECKING, Any

from tuner.cli.common import add_command, add_db_option, format_table
from tuner.settings import Settings
from tuner.trial import MIN_INTERVAL_VALUES

if TYPE_CHECKING:
    from tuner.report import Comparison
    from tuner.report import FreshView
    from tuner.storage import BestConfig

WIDTH = 100
DEFAULT_ROUNDS = 20
DEFAULT_PROCESSES = 6


def add_compare_parser(subparsers: Any) -> None:
    """Add `compare` to the CLI's subcommands (called from `tuner.cli.build_parser`)."""
    p = add_command(subparsers, "compare", cmd_compare,
                    help='time a model file compiled with Inductor\'s defaults, backend="tuner" and '
                         "tuner.compile, side by side")
    p.add_argument("model", help="Python file defining get_model() and get_inputs()")
    add_db_option(p)
    p.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS,
                   help=f"paired rounds, each path timed once per round; at least {MIN_INTERVAL_VALUES}, the fewest that give a 95%% "
                        f"interval (default {DEFAULT_ROUNDS})")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads (part of a CPU platform: the search's --threads; default: torch's)")
    p.add_argument("--seed", type=int, default=0, help="seed of get_model() and get_inputs() (default 0)")
    p.add_argument("--processes", type=int, default=DEFAULT_PROCESSES,
                   help="rounds of the user's view, a fresh process per path each (default "
                        f"{DEFAULT_PROCESSES}; 0 skips it)")


def cmd_compare(args: argparse.Namespace, settings: Settings) -> int:
    from tuner.lookup import reset_process_lookup
    from tuner.report import check_rounds, compare_applied, user_view
    from tuner.search import prepare_target
    from tuner.storage import Store

    check_rounds(args.rounds)
    if args.processes < 0:
        from tuner.errors import UsageError

        raise UsageError(f"--processes must be 0 (no user's view) or more, got {args.processes}")
    target = prepare_target(args.model, threads=args.threads or settings.threads or None, seed=args.seed)
    with Store.open(settings.db_url, readonly=True) as store:
        bests = store.workload_best(target.workload.key, target.platform.key)
    if not bests:
        print(f"no stored config for {args.model} on {target.platform.describe()}; "
              f"run: tuner search {args.model}", file=sys.stderr)
        return 1
    reset_process_lookup(settings)          # backend="tuner" and tuner.compile read this database
    comparison = compare_applied(args.model, rounds=args.rounds, seed=args.seed)
    print(comparison_text(args.model, comparison, bests), flush=True)
    if args.processes > 0:
        view = user_view(args.model, rounds=args.processes, seed=args.seed, snippet=_snippet(args, target, bests),
                         db_url=settings.db_url, threads=args.threads or settings.threads or None)
        print(user_view_text(view, args.processes))
    return 0 if all(p.problem is None for p in comparison.paths) else 1


def _snippet(args: argparse.Namespace, target: Any, bests: "list[BestConfig]") -> str | None:
    """What `tuner best --emit python` prints for these rows (None where it refuses them)."""
    from tuner.errors import TunerError
    from tuner.report import portable_verdict

    try:
        return portable_verdict(bests, model=args.model, workload=target.workload, platform=target.platform).python()
    except TunerError:
        return None


def user_view_text(view: "FreshView", rounds: int) -> str:
    """The user's view: each path's median over its fresh processes and its speedup over the default compile's."""
    from tuner.report import USER_PATHS as PATHS

    DEFAULT = PATHS[0]

    rows = [("path (a fresh process each)", "latency ms", "vs default")]
    for path in PATHS:
        if path not in view.round_ms:
            continue
        sp = view.speedup(path)
        versus = "1.00x (baseline)" if path == DEFAULT else (sp.text() if sp else "-")
        rows.append((path, _fmt(view.latency_ms(path), ".3f"), versus))
    many = f"{rounds} round{'s' if rounds != 1 else ''}"
    lines = [_wrap(f"as a user runs it: {many} of a fresh process per path, doing nothing before it "
                   f"times (the emitted code after a default compile of a copy in one script)"),
             format_table(rows, rule=True)]
    lines += [_wrap(f"{path}: {why}") for path, why in view.failures.items()]
    return "\n".join(lines)


def comparison_text(model: str, comparison: "Comparison", bests: "list[BestConfig]") -> str:
    """The table, the problems of paths not timed, the stored claim, then each tuned path's lookup lines."""
    head = (f"{model}: on {comparison.device}, {comparison.threads} threads, {comparison.rounds} paired rounds, "
            f"paths interleaved")
    rows = [("path", "latency ms", "vs default", "first calls s")]
    problems = []
    for path in comparison.paths:
        sp = comparison.speedup(path.label)
        versus = "1.00x (baseline)" if path.label == comparison.baseline and sp else (sp.text() if sp else "-")
        rows.append((path.label, _fmt(path.latency_ms, ".3f"), versus, _fmt(path.first_calls_s, ".1f")))
        if path.problem:
            problems.append(_wrap(f"{path.label}: not timed: {path.problem}"))
    lines = [_wrap(head), format_table(rows, rule=True), *problems, _wrap(stored_claim(bests))]
    for path in comparison.paths:
        if path.lookup:
            lines.append(f"lookup, {path.label}:")
            lines += [_wrap(line.removeprefix("tuner: "), indent="  ") for line in path.lookup]
    return "\n".join(lines)


def stored_claim(bests: "list[BestConfig]") -> str:
    """One line: what the search stored for the model's first graph, and its confirmed figure."""
    from tuner.text import key_values

    best = bests[0]
    what = ("eager (run uncompiled)" if best.eager else
            key_values(sorted(best.params.items())) or "Inductor's defaults")
    others = f"; {len(bests)} graphs" if len(bests) > 1 else ""
    return (f"stored (tuner best): {what}, {best.speedup:.2f}x [{best.ci_low:.2f}, {best.ci_high:.2f}] "
            f"over the default compile in {best.rounds} rounds{others}")


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _wrap(text: str, *, indent: str = "") -> str:
    return "\n".join(textwrap.wrap(text, width=WIDTH, initial_indent=indent, subsequent_indent=indent + "    ",
                                   break_long_words=True, break_on_hyphens=False)) or indent
