"""What every command module of the CLI shares: adding a command, the `--db` option, tables,
and keeping Dynamo's warnings out of the read-only commands."""
from __future__ import annotations

import argparse
import contextlib
import logging
from typing import Any, Callable, Iterator, Sequence

from tuner.settings import Settings

Command = Callable[[argparse.Namespace, Settings], int]
DB_HELP = "database URL (default: $TUNER_DB or the per-user SQLite file)"
DEBUG_HELP = "show tracebacks, and Dynamo's warnings in best, trials and explain"

# Every command accepts --debug too, so it works after the command (`tuner search m.py --debug`)
# as well as before it. SUPPRESS: a command that was not given it keeps the top level's value.
_DEBUG = argparse.ArgumentParser(add_help=False)
_DEBUG.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)


def add_command(subparsers: Any, name: str, func: Command | None, *, help: str) -> argparse.ArgumentParser:
    """Add command `name` running `func(args, settings)` (None for a group of subcommands)."""
    parser = subparsers.add_parser(name, help=help, parents=[_DEBUG])
    if func is not None:
        parser.set_defaults(func=func)
    return parser


@contextlib.contextmanager
def dynamo_warnings_hidden(args: argparse.Namespace, settings: Settings) -> Iterator[None]:
    """Inside the block, Dynamo logs only errors, unless --debug (or TUNER_DEBUG) asks for all.

    For commands that capture a model file only to key its graphs (best, trials, explain): a
    graph-break warning (a dozen lines for one `.item()`) says nothing about the stored results
    they print. The level is set on torch's own `torch._dynamo` logger after torch is imported,
    because importing torch sets it; it is restored on the way out.
    """
    if getattr(args, "debug", False) or settings.debug:
        yield
        return
    import torch  # noqa: F401 - torch's import configures the logger this block overrides

    dynamo = logging.getLogger("torch._dynamo")
    level = dynamo.level
    dynamo.setLevel(logging.ERROR)
    try:
        yield
    finally:
        dynamo.setLevel(level)


def add_db_option(parser: argparse.ArgumentParser) -> None:
    """The one `--db URL` option; `tuner.cli.main` puts its value into `Settings.db_url`."""
    parser.add_argument("--db", metavar="URL", help=DB_HELP)


def add_shapes_option(parser: argparse.ArgumentParser) -> None:
    """`--shapes DIMS` of the commands that read what `tuner search --shapes` stored."""
    parser.add_argument("--shapes", metavar="DIMS", default=None,
                        help='the buckets of tuner search --shapes, e.g. "batch=1,8,32" (weights are ignored): '
                             "one block per bucket; a size never tuned shows what lookup does with it")


def bucket_sizes(shapes: str | None) -> list[tuple[tuple[str, int], ...]]:
    """The sizes of each bucket of a `--shapes` text (UsageError when malformed); [()] for None:
    the model file's own `get_inputs()`."""
    if shapes is None:
        return [()]
    from tuner.workload import parse_shapes

    return [bucket.sizes for bucket in parse_shapes(shapes).buckets]


def format_table(rows: Sequence[Sequence[str]], *, rule: bool = False) -> str:
    """Rows of cells as left-aligned columns two spaces apart; the first row is the header.

    The last column is not padded and no line ends in spaces. `rule` puts a line of
    dashes under the header. Every cell goes through `tuner.text.printable`: cells hold stored
    strings, and no control character in one reaches the terminal.
    """
    from tuner.text import printable

    rows = [[printable(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    if rule:
        lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def runtime_label(runtime: Any) -> str:
    """A verdict's runtime knobs as `allocator=jemalloc, omp_wait_policy=passive` (without the
    `runtime.` prefix), "" when it sets none. A row written with SQL may hold anything: shown as is."""
    from tuner.runtime import PREFIX
    from tuner.text import key_values

    if not isinstance(runtime, dict):
        return str(runtime)
    return key_values((str(k).removeprefix(PREFIX), v) for k, v in sorted(runtime.items(), key=lambda kv: str(kv[0])))
