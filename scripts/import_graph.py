#!/usr/bin/env python3
"""The package's module import graph: cycles, layer violations and long modules.

    python scripts/import_graph.py [--root DIR] [--max-lines N] [--edges]

Reads the source folders the way setuptools installs them (`[tool.setuptools.package-dir]`
of pyproject.toml: `tuner/` is `tuner`, `storage/` is `tuner.storage`, ...) and parses every
module with the standard library's `ast`. Every import counts, at module level or inside a
function (a lazy import still runs), except those under `if TYPE_CHECKING:`. Importing
`a.b.c` is an edge to module `a.b.c`; the implicit import of its parent packages is not.

Exit status 1, with one line per problem, when
- modules import each other in a cycle (each strongly connected component is printed);
- a module of a lower layer imports a higher one (see LAYER_RULES);
- a module is longer than --max-lines (default 400).
"""
from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = None  # type: ignore[assignment]

# Modules under these packages must not import the modules on the right: storage, spaces and
# workers sit below the CLI, the search driver, compile-time lookup and the Dynamo capture.
LAYER_RULES: dict[str, tuple[str, ...]] = {
    "tuner.storage": ("tuner.cli", "tuner.search", "tuner.pipeline", "tuner.lookup", "tuner.workload"),
    "tuner.search_spaces": ("tuner.cli", "tuner.search", "tuner.pipeline", "tuner.lookup", "tuner.workload"),
    "tuner.workers": ("tuner.cli", "tuner.search", "tuner.pipeline", "tuner.lookup", "tuner.workload"),
    "tuner.migrations": ("tuner.cli", "tuner.search", "tuner.pipeline", "tuner.lookup", "tuner.workload"),
}
DEFAULT_PACKAGE_DIR = {"tuner": "tuner", "tuner.search_spaces": "search_spaces", "tuner.storage": "storage",
                       "tuner.workers": "workers", "tuner.migrations": "alembic",
                       "tuner.migrations.versions": "alembic/versions"}


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool


def package_dirs(root: Path) -> dict[str, str]:
    """Package name -> folder, from pyproject.toml when it says, else the project's layout."""
    pyproject = root / "pyproject.toml"
    if tomllib is not None and pyproject.is_file():
        data = tomllib.loads(pyproject.read_text())
        found = data.get("tool", {}).get("setuptools", {}).get("package-dir")
        if found:
            return dict(found)
    return dict(DEFAULT_PACKAGE_DIR)


def find_modules(root: Path, dirs: dict[str, str]) -> dict[str, Module]:
    """Every .py file directly inside each mapped folder, under its installed name."""
    modules: dict[str, Module] = {}
    for package, folder in dirs.items():
        base = root / folder
        if not base.is_dir():
            continue
        for path in sorted(base.glob("*.py")):
            if path.stem == "__init__":
                modules[package] = Module(package, path, True)
            else:
                modules[f"{package}.{path.stem}"] = Module(f"{package}.{path.stem}", path, False)
        modules.setdefault(package, Module(package, base, True))
    return modules


def _type_checking_block(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> list[tuple[str, tuple[str, ...], int]]:
    """(module, imported names, level) for every import outside `if TYPE_CHECKING:`."""
    found: list[tuple[str, tuple[str, ...], int]] = []

    def visit(node: ast.AST) -> None:
        if _type_checking_block(node):
            for child in node.orelse:      # the else branch does run
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((alias.name, (), 0) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.append((node.module or "", tuple(a.name for a in node.names), node.level))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _absolute(module: Module, target: str, level: int) -> str:
    if level == 0:
        return target
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    for _ in range(level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{target}" if target else package


def edges_of(module: Module, modules: dict[str, Module]) -> set[str]:
    """The project modules `module` imports."""
    if module.path.is_dir():
        return set()
    tree = ast.parse(module.path.read_text(), filename=str(module.path))
    out: set[str] = set()
    for target, names, level in _imports(tree):
        base = _absolute(module, target, level)
        for name in names:
            if f"{base}.{name}" in modules:     # `from pkg import submodule`
                out.add(f"{base}.{name}")
            elif base in modules:
                out.add(base)
        if not names and base in modules:
            out.add(base)
    out.discard(module.name)
    return out


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm; returns the components with more than one module (the cycles)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def connect(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    for v in sorted(graph):
        if v not in index:
            connect(v)
    return cycles


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    problems = []
    for source, targets in sorted(graph.items()):
        for layer, forbidden in LAYER_RULES.items():
            if source != layer and not source.startswith(layer + "."):
                continue
            for target in sorted(targets):
                if any(target == f or target.startswith(f + ".") for f in forbidden):
                    problems.append(f"layer: {source} imports {target} (forbidden below {layer})")
    return problems


def long_modules(modules: dict[str, Module], max_lines: int) -> list[str]:
    problems = []
    for module in modules.values():
        if module.path.is_file():
            lines = len(module.path.read_text().splitlines())
            if lines > max_lines:
                problems.append(f"length: {module.name} ({module.path}) has {lines} lines, over {max_lines}")
    return problems


def check(root: Path, *, max_lines: int = 400) -> tuple[dict[str, set[str]], list[str]]:
    """The import graph of the project at `root` and every problem found in it."""
    modules = find_modules(root, package_dirs(root))
    graph = {name: edges_of(module, modules) for name, module in modules.items()}
    problems = [f"cycle: {' <-> '.join(c)}" for c in strongly_connected(graph)]
    return graph, problems + layer_violations(graph) + long_modules(modules, max_lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--max-lines", type=int, default=400)
    parser.add_argument("--edges", action="store_true", help="print every module's imports")
    args = parser.parse_args(argv)
    graph, problems = check(args.root, max_lines=args.max_lines)
    if args.edges:
        for name in sorted(graph):
            print(f"{name} -> {', '.join(sorted(graph[name])) or '-'}")
    for problem in problems:
        print(problem)
    print(f"{len(graph)} modules, {sum(map(len, graph.values()))} imports, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
