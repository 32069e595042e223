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
- Every repository path and `tuner.` module name docs/architecture.md names exists: a path under
  tuner/, search_spaces/, storage/, workers/, alembic/, scripts/, bench/, tests/ or docs/ is a
  file (a `path.py:name` defines the name), and for a dotted name the longest prefix that is a
  module is a file of the package-dir mapping, whose top level defines what follows (a `def`,
  `class`, assignment, import or `__all__` entry; `Class.method` a member of the class).
  Skipped by design: folders (`tuner/cli/`), paths outside the repository (`../shared/DESIGN.md`)
  and bare file names (`space.py` in a list of one folder's modules).
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


# -- module paths -------------------------------------------------------------

ARCHITECTURE = ROOT / "docs" / "architecture.md"
REPO_PATH = re.compile(r"(?<![\w./-])((?:tuner|search_spaces|storage|workers|alembic|scripts|bench|tests|docs)"
                       r"/[\w./-]*)(?::(\w+))?")
DOTTED = re.compile(r"(?<![\w./-])tuner(?:\.\w+)+")


def module_file(name: str) -> Path | None:
    """The file (or namespace folder) of module `name` under the package-dir mapping, or None."""
    dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    package = max((p for p in dirs if name == p or name.startswith(p + ".")), key=len, default=None)
    if package is None:
        return None
    base = ROOT / dirs[package] / Path(*name.split(".")[package.count(".") + 1:])
    for path in (base.with_suffix(".py"), base / "__init__.py", base):
        if path.exists():
            return path
    return None


def _members(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """Names a module or class body binds: defs, classes, assignments, imports (also inside
    top-level `if`/`try` blocks) and the entries of a literal `__all__` (a lazy face's names)."""
    found: dict[str, ast.AST] = {}
    listed: list[str] = []
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Name):
                    found[target.id] = node
                    if target.id == "__all__" and node.value is not None:
                        listed += ast.literal_eval(node.value)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            found.update((a.asname or a.name.split(".")[0], node) for a in node.names)
        elif isinstance(node, (ast.If, ast.Try)):
            found.update(_members([*node.body, *node.orelse, *getattr(node, "finalbody", [])]))
    return {**dict.fromkeys(listed, ast.Pass()), **found}


def defines(path: Path, attributes: list[str]) -> bool:
    """Whether module `path` defines attributes[0] at its top level, and attributes[1] (if any)
    as a member of that class (followed through a face's `from module import Class`)."""
    if path.is_dir():
        return False
    members = _members(ast.parse(path.read_text(), filename=str(path)).body)
    first = members.get(attributes[0])
    if first is None or len(attributes) == 1:
        return first is not None
    if isinstance(first, ast.ImportFrom) and first.level == 0 and (source := module_file(first.module or "")):
        return defines(source, attributes)
    return not isinstance(first, ast.ClassDef) or attributes[1] in _members(first.body)


def reference_problems(text: str) -> list[str]:
    """The repository paths and `tuner.` names of `text` that do not exist, one line each."""
    problems = []
    for match in REPO_PATH.finditer(text):
        named, name = match.group(1).rstrip(".-"), match.group(2)
        if named.endswith("/"):          # a folder
            continue
        if not (ROOT / named).is_file():
            problems.append(f"{named}: no such file")
        elif name and named.endswith(".py") and not defines(ROOT / named, [name]):
            problems.append(f"{named}:{name}: {named} does not define {name}")
    for dotted in dict.fromkeys(DOTTED.findall(text)):
        parts = dotted.split(".")
        cut = next(i for i in range(len(parts), 0, -1) if module_file(".".join(parts[:i])))
        rest = parts[cut:]
        if rest and not defines(module_file(".".join(parts[:cut])), rest):
            problems.append(f"{dotted}: {'.'.join(parts[:cut])} has no {rest[0]}"
                            + (f".{rest[1]}" if len(rest) > 1 else ""))
    return problems


def test_every_path_and_module_the_architecture_names_exists() -> None:
    text = ARCHITECTURE.read_text()
    assert len(REPO_PATH.findall(text)) >= 50 and len(DOTTED.findall(text)) >= 30
    problems = reference_problems(text)
    assert not problems, "docs/architecture.md names what the code no longer has:\n" + "\n".join(problems)


def test_a_path_or_module_the_code_lacks_is_caught() -> None:
    assert not reference_problems("`tuner/lookup/decision.py` `storage/schema.py:SCHEMA_HEAD` `tuner/cli/` "
                                  "`../shared/DESIGN.md` tuner.lookup.decision.decide_tier, tuner.compile, "
                                  "`tuner.storage.Store.record_trial` `tuner.workers.placement` tuner.migrations.")
    assert reference_problems("`tuner/search/confirming.py`") == ["tuner/search/confirming.py: no such file"]
    assert reference_problems("(`storage/schema.py:SCHEMA_TAIL`)") == [
        "storage/schema.py:SCHEMA_TAIL: storage/schema.py does not define SCHEMA_TAIL"]
    assert reference_problems("tuner.lookup.decide_tier") == ["tuner.lookup.decide_tier: tuner.lookup has no decide_tier"]
    assert reference_problems("`tuner.pipeline`") == ["tuner.pipeline: tuner has no pipeline"]
    assert reference_problems("`tuner.storage.Store.record_trials`") == [
        "tuner.storage.Store.record_trials: tuner.storage has no Store.record_trials"]
