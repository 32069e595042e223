"""The docs and the code cannot drift apart.

- Every error message that docs/troubleshooting.md lists (a `### ` heading holding the message in
  backticks, `<...>` for the formatted parts) is a message of the code: its fixed parts, in order,
  within one string literal of tuner/, search_spaces/, storage/ or workers/.
- Every command line in a shell block of README.md and docs/*.md (a fenced block with no language,
  or sh, bash, shell, console) works as pasted into a fresh clone: a `tuner ...` line parses with
  the CLI's own parser (each `[optional part]` both left out and given), a `scripts/...` it runs
  exists and is executable, and a `pip install` names something installable from the checkout
  (`.`, `'.[extra]'` with an extra pyproject.toml defines, a built wheel) or a package of PyPI
  other than tuner itself, which is not published there.
- Every repository path and `tuner.` module name that README.md, docs/*.md and bench/README.md
  name exists (`tests/helpers/doc_references.py` says what counts), and docs/architecture.md, the
  map of the code, names at least 50 paths and 30 modules.
- No file of the repository names a path outside it: the design the code follows, and every
  document a page links, are files of the repository, so a clone reads whole.
- Every section a file names (`docs/ray.md, "Security"`, in a page, a docstring or an error
  message) is a heading or a bold lead of that document.
"""
from __future__ import annotations

import ast
import contextlib
import io
import os
import re
import shlex
import tomllib
from pathlib import Path

import pytest

from helpers.doc_references import (DOTTED, REPO_PATH, SECTION_REF, outside_problems, reference_problems,
                                    section_problems, tracked_text_files)
from tuner.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CODE = ("tuner", "search_spaces", "storage", "workers")
SHELL_FENCES = {"", "sh", "bash", "shell", "console"}
OPERATORS = {"&&", "||", ";", "|"}


# -- messages ----------------------------------------------------------------

def documented_messages(text: str) -> list[str]:
    """The messages of troubleshooting.md: each `### ` heading that is one code span."""
    return re.findall(r"^###\s+`([^`]+)`\s*$", text, flags=re.MULTILINE)


def _rendered(node: ast.AST) -> str | None:
    """A string literal as text, each formatted part as <...>; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "<>" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _rendered(node.left), _rendered(node.right)
        return None if left is None and right is None else (left or "<>") + (right or "<>")
    return None


def code_strings() -> list[str]:
    """Every string literal of the shipped code (implicit concatenations joined, as Python does)."""
    found = []
    for folder in CODE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                text = _rendered(node)
                if text:
                    found.append(text)
    return found


def message_pattern(message: str) -> re.Pattern[str]:
    """The message's fixed parts in order; each <placeholder> stands for any text (or none)."""
    parts = re.split(r"<[^<>]*>", message)
    return re.compile(".*?".join(re.escape(p) for p in parts), flags=re.DOTALL)


def in_code(message: str, strings: list[str]) -> bool:
    """Whether one string of the code holds the message's fixed parts in order."""
    longest = max(re.split(r"<[^<>]*>", message), key=len)
    pattern = message_pattern(message)
    return any(longest in s and pattern.search(s) for s in strings)


def test_troubleshooting_lists_messages_and_each_is_in_the_code() -> None:
    messages = documented_messages((ROOT / "docs" / "troubleshooting.md").read_text())
    assert len(messages) >= 40, "docs/troubleshooting.md should list the CLI's error messages as ### `message`"
    strings = code_strings()
    missing = [m for m in messages if not in_code(m, strings)]
    assert not missing, "docs/troubleshooting.md lists messages the code no longer has:\n" + "\n".join(missing)


def test_a_message_the_code_lacks_is_caught() -> None:
    strings = code_strings()
    assert in_code("database <url> is locked by another writer (<detail>); retry", strings)
    assert not in_code("database <url> is locked by another reader (<detail>); retry", strings)
    assert not in_code("retry <when> database <url> is locked", strings)      # the parts out of order


# -- commands ----------------------------------------------------------------

def shell_lines(text: str) -> list[str]:
    """Command lines of the shell blocks of a Markdown text (continuations joined, `$ ` dropped)."""
    lines, language, pending = [], None, ""
    for raw in text.splitlines():
        fence = re.match(r"^\s*```(\S*)", raw)
        if fence:
            language = fence.group(1).lower() if language is None else None
            continue
        if language not in SHELL_FENCES:
            continue
        line = pending + raw.strip()
        if line.endswith("\\"):
            pending = line[:-1].rstrip() + " "
            continue
        pending = ""
        line = line.removeprefix("$ ")
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def commands(line: str) -> list[list[str]]:
    """The simple commands of a line: words split at && || ; |, leading VAR=value dropped."""
    words = shlex.split(line, comments=True)
    found, current = [], []
    for word in [*words, ";"]:
        if word in OPERATORS:
            while current and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", current[0]):
                current.pop(0)
            if current:
                found.append(current)
            current = []
        else:
            current.append(word)
    return found


CHECKED = re.compile(r"^([A-Za-z_]\w*=\S*\s+)*(tuner|scripts/|pip|python3? -m pip)\b")


def inline_installs(text: str) -> list[str]:
    """`pip install ...` code spans in the prose (outside fenced blocks)."""
    prose = re.sub(r"^\s*```.*?^\s*```", "", text, flags=re.MULTILINE | re.DOTALL)
    return re.findall(r"`((?:python3? -m )?pip install [^`]+)`", prose)


def doc_commands() -> list[tuple[str, list[str]]]:
    """(doc: line, words) of each simple command in the docs' shell blocks. Lines that are not
    shell (sample output in a block with no language) are skipped, unless they start like a
    command this test checks: then their words are ["<unbalanced quotes>"]."""
    found = []
    for doc in DOCS:
        for line in shell_lines(doc.read_text()):
            where = f"{doc.relative_to(ROOT)}: {line}"
            try:
                found += [(where, words) for words in commands(line)]
            except ValueError:
                if CHECKED.match(line):
                    found.append((where, ["<unbalanced quotes>"]))
        found += [(f"{doc.relative_to(ROOT)}: `{span}`", shlex.split(span)) for span in inline_installs(doc.read_text())]
    return found


def variants(words: list[str]) -> list[list[str]]:
    """A command with each `[optional part]` left out, and with every one given."""
    text = " ".join(words)
    return [re.sub(r"\s*\[[^\]]*\]", "", text).split(), text.replace("[", "").replace("]", "").split()]


def parse_problem(argv: list[str]) -> str | None:
    """Why the CLI's parser refuses `argv` (its usage error), or None when it parses."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(argv)
    except SystemExit as exc:
        return err.getvalue().strip().splitlines()[-1] if exc.code else None
    return None


def install_problem(target: str, extras: set[str]) -> str | None:
    """Why `pip install TARGET` in a fresh clone would not install it, or None."""
    local = re.fullmatch(r"\.(?:\[([\w,-]+)\])?", target)
    if local:
        unknown = set(local.group(1).split(",")) - extras if local.group(1) else set()
        return f"extra(s) {', '.join(sorted(unknown))} not in pyproject.toml" if unknown else None
    if target.endswith(".whl"):
        return None
    name = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", target)
    if name is None or "/" in target:
        return "not a package name, nor the checkout (.)"
    if name.group(0).lower() == "tuner":
        return "tuner is not on PyPI: install the checkout, pip install . (or '.[extra]')"
    return None


def command_problems(words: list[str], extras: set[str]) -> list[str]:
    if words == ["<unbalanced quotes>"]:
        return ["its quotes do not balance"]
    if words[0] == "tuner":
        return [p for argv in variants(words[1:]) if (p := parse_problem(argv))]
    if words[0].startswith("scripts/"):
        path = ROOT / words[0]
        return [] if path.is_file() and os.access(path, os.X_OK) else [f"{words[0]} is missing or not executable"]
    if "pip" in words and words[words.index("pip") + 1:][:1] == ["install"]:
        return [f"{t}: {p}" for t in pip_targets(words[words.index("pip") + 2:]) if (p := install_problem(t, extras))]
    return []


PIP_VALUE_OPTIONS = {"-i", "--index-url", "--extra-index-url", "-t", "--target", "-c", "--constraint",
                     "-r", "--requirement", "-f", "--find-links", "--prefix", "--root"}


def pip_targets(words: list[str]) -> list[str]:
    """What `pip install WORDS` installs: the words that are neither options nor their values."""
    targets, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word in PIP_VALUE_OPTIONS:
            skip = True
        elif not word.startswith("-"):
            targets.append(word)
    return targets


def test_every_documented_command_works_in_a_fresh_clone() -> None:
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    found = doc_commands()
    assert sum(words[0] == "tuner" for _, words in found) >= 20
    assert any(words[:2] == ["pip", "install"] for _, words in found)
    problems = [f"{where}\n    {p}" for where, words in found for p in command_problems(words, extras)]
    assert not problems, "documented commands that do not work as written:\n" + "\n".join(problems)


@pytest.mark.parametrize(("line", "problem"), [
    ("tuner search model.py --trails 8", "unrecognized arguments: --trails 8"),
    ("tuner db upgrade [--db URL] [--verbose]", "--verbose"),
    ("pip install ./tuner", "not a package name, nor the checkout (.)"),
    ("python -m pip install -U --target /tmp/x tuner", "tuner is not on PyPI"),
    ("pip install 'tuner[postgres]'", "tuner is not on PyPI"),
    ("pip install '.[postgress]'", "extra(s) postgress not in pyproject.toml"),
    ("scripts/nothing.sh --all", "scripts/nothing.sh is missing or not executable"),
])
def test_a_command_that_drifted_is_caught(line: str, problem: str) -> None:
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    (words,) = commands(line)
    found = command_problems(words, extras)
    assert found and problem in found[0]


def test_shell_lines_come_from_shell_blocks_only() -> None:
    text = ("```bash\nA=1 tuner best m.py && \\\n  tuner trials m.py  # both\n```\n"
            "```python\ntuner.compile(m)\n```\n```\n$ scripts/demo.sh\n```\n```text\ntuner oops\n```\n")
    assert shell_lines(text) == ["A=1 tuner best m.py && tuner trials m.py  # both", "scripts/demo.sh"]
    assert commands(shell_lines(text)[0]) == [["tuner", "best", "m.py"], ["tuner", "trials", "m.py"]]
    assert inline_installs("Use `pip install '.[x]'` here.\n```\n`pip install y`\n```\n") == ["pip install '.[x]'"]


def test_the_readme_links_every_doc() -> None:
    readme = (ROOT / "README.md").read_text()
    unlinked = [d.name for d in sorted((ROOT / "docs").glob("*.md")) if f"(docs/{d.name})" not in readme]
    assert not unlinked, f"README.md does not link: {', '.join(unlinked)}"


def test_the_readme_stays_a_front_door() -> None:
    """README.md says what tuner is, how to install it, the two commands, one example and the
    commands, and links the rest: the manual lives in docs/, so the README stays short."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; move the detail into docs/ and link it"


def test_the_cli_reference_is_generated_from_the_parser() -> None:
    """docs/cli.md is what scripts/cli_reference.py renders from the CLI's own parser now, and the
    rendering names every flag of every command (so a new flag cannot be left out of the docs)."""
    import importlib.util
    import subprocess
    import sys

    script = ROOT / "scripts" / "cli_reference.py"
    done = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True,
                          cwd=ROOT / "docs", timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    spec = importlib.util.spec_from_file_location("cli_reference", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rendered = module.render()

    def flags(parser) -> set[str]:
        found = set()
        for action in parser._actions:
            found.update(s for s in action.option_strings if s not in ("-h", "--help", "--debug"))
            if isinstance(action.choices, dict):     # a group of subcommands
                for sub in action.choices.values():
                    found |= flags(sub)
        return found

    missing = sorted(f for f in flags(build_parser()) if f"`{f}" not in rendered and f", {f}" not in rendered)
    assert not missing and "## `tuner db upgrade`" in rendered, missing


# -- what the documents name ----------------------------------------------------

ARCHITECTURE = ROOT / "docs" / "architecture.md"
# Every document that describes the product as it is; CHANGELOG.md names what the code was, so
# only what it names outside the repository is checked (below).
REFERENCE_DOCS = [*DOCS, ROOT / "bench" / "README.md"]


def test_every_path_and_module_the_architecture_names_exists() -> None:
    text = ARCHITECTURE.read_text()
    assert len(REPO_PATH.findall(text)) >= 50 and len(DOTTED.findall(text)) >= 30
    problems = reference_problems(text)
    assert not problems, "docs/architecture.md names what the code no longer has:\n" + "\n".join(problems)


def test_every_path_and_module_the_docs_name_exists() -> None:
    problems = [f"{doc.relative_to(ROOT)}: {p}" for doc in REFERENCE_DOCS for p in reference_problems(doc.read_text())]
    assert not problems, "documents name what the repository does not have:\n" + "\n".join(problems)


def test_a_path_or_module_the_code_lacks_is_caught() -> None:
    assert not reference_problems("`tuner/lookup/decision.py` `storage/schema.py:SCHEMA_HEAD` `tuner/cli/` "
                                  "`tests/fixtures/tuner-<revision>.sqlite` tuner.lookup.decision.decide_tier, tuner.compile, "
                                  "`tuner.storage.Store.record_trial` `tuner.workers.placement` tuner.migrations.")
    assert reference_problems("`tuner/search/confirming.py`") == ["tuner/search/confirming.py: no such file"]
    assert reference_problems("(`storage/schema.py:SCHEMA_TAIL`)") == [
        "storage/schema.py:SCHEMA_TAIL: storage/schema.py does not define SCHEMA_TAIL"]
    assert reference_problems("tuner.lookup.decide_tier") == ["tuner.lookup.decide_tier: tuner.lookup has no decide_tier"]
    assert reference_problems("`tuner.pipeline`") == ["tuner.pipeline: tuner has no pipeline"]
    assert reference_problems("`tuner.storage.Store.record_trials`") == [
        "tuner.storage.Store.record_trials: tuner.storage has no Store.record_trials"]


def test_the_design_lives_in_the_repository() -> None:
    """docs/design.md holds the design the code follows, and docs/architecture.md, the map of how
    the code realises it, opens with a link to it."""
    design = ROOT / "docs" / "design.md"
    assert design.is_file() and "(design.md)" in ARCHITECTURE.read_text().split("\n## ", 1)[0]


def test_no_file_of_the_repository_names_a_path_outside_it() -> None:
    files = tracked_text_files()
    assert len(files) >= 300 and ROOT / "tuner" / "keys.py" in files and ROOT / "docs" / "cli.md" in files
    problems = [f"{path.relative_to(ROOT)}: {p}" for path in files for p in outside_problems(path, path.read_text())]
    assert not problems, "files name what is outside the repository:\n" + "\n".join(problems)


def test_a_path_outside_the_repository_is_caught() -> None:
    up, notes = "../", "DESIGN" + ".md"     # spelled in pieces, so that this file names nothing outside
    doc = ROOT / "docs" / "lookup.md"
    assert outside_problems(doc, f"see `{up}{up}notes/plan.txt` and [the design]({up}shared/{notes})") == [
        f"{up}{up}notes/plan.txt: climbs out of the repository",
        f"{up}shared/{notes}: no such document in the repository"]
    assert outside_problems(ROOT / "tuner" / "keys.py", f"the workload key of {notes}") == [
        f"{notes}: no such document in the repository"]
    assert not outside_problems(doc, f"[results](results.md), `docs/ray.md`, cli.md, {up}README.md, "
                                     f"`{up}jemalloc` (a hostile value, inside), /tmp/torchinductor_USER")


def test_every_section_a_file_names_exists() -> None:
    files = tracked_text_files()
    problems = [f"{path.relative_to(ROOT)}: {p}" for path in files for p in section_problems(path, path.read_text())]
    assert not problems, "files name sections their documents do not have:\n" + "\n".join(problems)


def test_a_section_that_moved_is_caught() -> None:
    doc = ROOT / "docs" / "troubleshooting.md"
    named = 'see docs/ray.md, "Security", [lookup.md](lookup.md), "Shape buckets" and (docs/ray.md, \\"GPU platforms\\")'
    assert len(SECTION_REF.findall(named)) == 3 and not section_problems(doc, named)
    moved = "Trial throughput, as it was"   # in a variable, so that this file names no such section
    assert section_problems(doc, f'(docs/search.md, "{moved}")') == [f'docs/search.md, "{moved}": no such section']

