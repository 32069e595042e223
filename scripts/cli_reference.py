"""docs/cli.md, the flag reference, written from the CLI's own argparse parser.

Usage: python scripts/cli_reference.py --write   (regenerate docs/cli.md)
       python scripts/cli_reference.py --check   (exit 1, naming the fix, when docs/cli.md is stale)
tests/system/test_docs.py runs the check, so a flag added to the CLI without regenerating fails there.
It imports the installed tuner (run it with the venv's python after `pip install .`).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tuner.cli import build_parser

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
HEADER = ("# Command-line reference\n\nEvery command and flag of `tuner`, generated from its own parser by "
          "`scripts/cli_reference.py --write` (the docs test checks it is current). `tuner COMMAND --help` "
          "prints the same. Every command also takes `--debug`.\n")


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, help, parser) of each direct subcommand, in the order they were added."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            found += [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return found


def _flag_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) or "--debug" in action.option_strings:
            continue
        name = ", ".join(action.option_strings) or action.dest
        if action.option_strings and action.nargs != 0:
            name += f" {action.metavar or action.dest.upper()}"
        text = (action.help or "").replace("|", "\\|").replace("%%", "%")
        if action.choices and not isinstance(action.choices, dict):
            text += f" (one of: {', '.join(map(str, action.choices))})"
        rows.append(f"| `{name}` | {text} |")
    return rows


def _section(path: str, help_text: str, parser: argparse.ArgumentParser) -> list[str]:
    lines = [f"## `{path}`", "", help_text[:1].upper() + help_text[1:] + ".", ""]
    rows = _flag_rows(parser)
    if rows:
        lines += ["| argument | meaning |", "|---|---|", *rows, ""]
    for name, sub_help, sub in _subcommands(parser):
        lines += _section(f"{path} {name}", sub_help, sub)
    return lines


def render() -> str:
    lines = [HEADER]
    for name, help_text, sub in _subcommands(build_parser()):
        lines += _section(f"tuner {name}", help_text, sub)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str]) -> int:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = args.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    if args.parse_args(argv).write:
        DOC.write_text(render(), encoding="utf-8")
        return 0
    if not DOC.is_file() or DOC.read_text(encoding="utf-8") != render():
        print("error: docs/cli.md does not match the CLI; run: python scripts/cli_reference.py --write",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
