"""What the documents name, checked against the repository (tests/system/test_docs.py).

- `reference_problems(text)`: every repository path (`tuner/lookup/decision.py`,
  `storage/schema.py:SCHEMA_HEAD`) and `tuner.` module name (`tuner.lookup.decision.decide_tier`)
  of a text that does not exist. A path under tuner/, search_spaces/, storage/, workers/, alembic/,
  scripts/, bench/, tests/ or docs/ is a file (a `path.py:name` defines the name); for a dotted
  name the longest prefix that is a module is a file of the package-dir mapping, whose top level
  defines what follows (a `def`, `class`, assignment, import or `__all__` entry; `Class.method` a
  member of the class). Skipped by design: folders (`tuner/cli/`), patterns with a placeholder
  (`tests/fixtures/tuner-<revision>.sqlite`) and bare file names (`space.py` in a list of one
  folder's modules).
- `section_problems(path, text)`: every section of a document that a text names (`docs/ray.md,
  "Security"`, `[lookup.md](lookup.md), "Shape buckets"`) is a heading of that document, or the
  bold lead of one of its paragraphs or list items (`**GPU platforms**`), that starts with the
  name given.
- `outside_problems(path, text)`: what a file of the repository names outside it. The
  repository stands alone: a clone has nothing beside it, so a relative path that climbs out of
  the checkout from the file that names it (`../` past the root) is a problem, and so is a
  Markdown document that is not a file of the repository: a path (`docs/lookup.md`, or
  `../../README.md` from here) is resolved against the naming file's folder and the root, a bare
  name (`results.md`) must be the name of a tracked file. Notes kept outside the repository, by
  path or by name, read as dead links in a clone. Absolute system paths (`/tmp`,
  `/proc/self/maps`) are the machine's, not the repository's, and are not checked.
"""
from __future__ import annotations

import ast
import functools
import re
import subprocess
import tomllib
from pathlib import Path

from helpers import REPO as ROOT

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
        if named.endswith("/") or text[match.end():match.end() + 1] == "<":    # a folder, a pattern
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


# -- the repository stands alone ----------------------------------------------

CLIMBING = re.compile(r"(?<![\w./-])((?:\.\./)+[\w.-]+(?:/[\w.-]+)*)")
MARKDOWN = re.compile(r"(?<![\w./-])((?:\.{1,2}/)*[\w-][\w./-]*\.md)\b")
SKIPPED_FOLDERS = {".git", ".venv", ".ci-venv", ".whl", "build", "dist", "__pycache__", "test-artifacts"}


@functools.cache
def tracked_files() -> tuple[Path, ...]:
    """The repository's tracked files; without git, every file outside the folders a checkout's
    tools make."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True,
                                timeout=60).stdout.decode().split("\0")
        paths = [ROOT / name for name in listed if name]
    except (OSError, subprocess.SubprocessError):
        paths = [p for p in ROOT.rglob("*")
                 if not SKIPPED_FOLDERS.intersection(p.relative_to(ROOT).parts) and ".egg-info" not in str(p)]
    return tuple(p for p in paths if p.is_file())


def tracked_text_files() -> list[Path]:
    """The tracked files that are text: UTF-8, no NUL byte."""
    found = []
    for path in tracked_files():
        data = path.read_bytes()
        if b"\0" in data:
            continue
        try:
            data.decode()
        except UnicodeDecodeError:
            continue
        found.append(path)
    return found


def _inside(path: Path) -> bool:
    return path.resolve().is_relative_to(ROOT)


def outside_problems(path: Path, text: str) -> list[str]:
    """What `text`, the content of the repository file `path`, names outside the repository."""
    here = path.parent
    problems = [f"{named}: climbs out of the repository" for named in dict.fromkeys(CLIMBING.findall(text))
                if not _inside(here / named)]
    names = {p.name for p in tracked_files()}
    for named in dict.fromkeys(MARKDOWN.findall(text)):
        if "/" not in named and named in names:         # a bare name: a document of some folder here
            continue
        if not any(_inside(base / named) and (base / named).is_file() for base in (here, ROOT)):
            problems.append(f"{named}: no such document in the repository")
    return problems


# -- sections a text names --------------------------------------------------------

SECTION_REF = re.compile(r"(?<![\w./-])((?:\.{1,2}/)*[\w-][\w./-]*\.md)(?:`|\]\([^)]*\))?\)?,\s+\\?\"([A-Za-z`][^\"\\]*)\\?\"")
HEADING = re.compile(r"^#+\s+(.+?)\s*$|^\s*(?:[-*]|\d+\.)?\s*\*\*(.+?)\*\*", flags=re.MULTILINE)


def sections(document: Path) -> list[str]:
    """The headings of a Markdown document and the bold leads of its paragraphs and list items,
    without backticks."""
    return [(a or b).replace("`", "") for a, b in HEADING.findall(document.read_text())]


def section_problems(path: Path, text: str) -> list[str]:
    """The sections `text` (the content of `path`) names that their document does not have."""
    problems = []
    for named, section in dict.fromkeys(SECTION_REF.findall(" ".join(text.split()))):
        document = next((base / named for base in (path.parent, ROOT, ROOT / "docs")
                         if (base / named).is_file()), None)
        if document is None:
            continue                        # a document that is not there is outside_problems' to report
        wanted = section.replace("`", "")
        if not any(s.startswith(wanted) for s in sections(document)):
            problems.append(f'{named}, "{section}": no such section')
    return problems

