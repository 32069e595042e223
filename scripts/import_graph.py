#!/usr/bin/env python3
"""The package's module import graph: cycles, floors, faces and long modules.

    python scripts/import_graph.py [--root DIR] [--max-lines N] [--edges]

Reads the source folders the way setuptools installs them (`[tool.setuptools.package-dir]`
of pyproject.toml: `tuner/` is `tuner`, `storage/` is `tuner.storage`, ...), walking each folder
recursively (a subfolder without a mapping of its own, such as `tuner/report/`, installs under
its parent's name), and parses every module with the standard library's `ast`. Every import
counts: at module level, inside a function (a lazy import still runs) and under
`if TYPE_CHECKING:` (a type-only import is still a dependency in reading and type terms).
Importing `a.b.c` is an edge to module `a.b.c`; the implicit import of its parent packages is not.

Exit status 1, with one line per problem, when
- modules import each other in a cycle, type-only imports included (each strongly connected
  component is printed);
- a module imports one of a sibling unit on its own floor or of a higher floor (FLOORS: a unit
  may import itself and lower floors only), or breaks a NEVER rule;
- a module outside a package imports one of the package's inner modules instead of its face
  (the names of the package's `__init__`, or a submodule it lists in `__all__`, imported through
  the package: `from tuner.inductor import gemm_choices`);
- a module belongs to no unit of FLOORS;
- a module is longer than --max-lines (default 380: room before the 400 that forces a split);
- a face (a subpackage's `__init__`) lists over 20 names in `__all__` and its docstring does not
  say why (a line starting `Over 20 names:`);
- a module of the test tree (`tests/`) imports a test module (`test_*`) or `conftest`: what tests
  share lives in `tests/helpers/` (or in a `conftest.py` fixture).

The face rule binds the package's own modules only. Tests are not in the graph: a package's tests
(`tests/<package>/`) may import its inner modules, as its own modules do.
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

# The ground floor: leaf modules at the root of tuner/ that any floor may import, and which
# import only each other.
GROUND = ("tuner.errors", "tuner.settings", "tuner.version", "tuner.text", "tuner.jsoncheck", "tuner.keys",
          "tuner.platform", "tuner.precision")

# Units bottom floor first (docs/architecture.md says why each stands where it does). A unit is a
# package (the package and every module below it) or, for "tuner" and "tuner.__main__", exactly
# that module. Units on one floor import each other in neither direction.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("ground",),
    ("tuner.runtime",),
    ("tuner.trial",),
    ("tuner.search_spaces",),
    ("tuner.storage",),
    ("tuner.migrations",),
    ("tuner.workload", "tuner.kernels"),
    ("tuner.inductor",),
    ("tuner.measure", "tuner.lookup"),
    ("tuner.workers", "tuner"),
    ("tuner.search",),
    ("tuner.report",),
    ("tuner.cli",),
    ("tuner.__main__",),
)
EXACT = ("tuner", "tuner.__main__")

# Imports the floors would allow but the design forbids: the executors start trial processes and
# never run the compile-time lookup or the Dynamo capture themselves.
NEVER: dict[str, tuple[str, ...]] = {"tuner.workers": ("tuner.lookup", "tuner.workload")}

# Packages that count as inside another for the face rule: the migrations belong to the storage
# (Optuna keeps them in `storages/_rdb/alembic/`); only the repository layout puts them apart.
SAME_HOUSE = {"tuner.migrations": "tuner.storage"}

DEFAULT_PACKAGE_DIR = {"tuner": "tuner", "tuner.search_spaces": "search_spaces", "tuner.storage": "storage",
                       "tuner.workers": "workers", "tuner.migrations": "alembic",
                       "tuner.migrations.versions": "alembic/versions"}


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool


@dataclass(frozen=True)
class Edge:
    target: str
    kind: str          # "top" (module level), "lazy" (inside a function) or "tc" (under TYPE_CHECKING)


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
    """Every .py file inside each mapped folder, recursively, under its installed name. A
    subfolder with a mapping of its own is left to that mapping."""
    mapped = {(root / folder).resolve() for folder in dirs.values()}
    modules: dict[str, Module] = {}
    for package, folder in dirs.items():
        base = root / folder
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base)
            if "__pycache__" in rel.parts or any((base / Path(*rel.parts[:i])).resolve() in mapped
                                                 for i in range(1, len(rel.parts))):
                continue
            parts = [package, *rel.parts[:-1]]
            if path.stem == "__init__":
                modules[".".join(parts)] = Module(".".join(parts), path, True)
            else:
                name = ".".join([*parts, path.stem])
                modules[name] = Module(name, path, False)
        modules.setdefault(package, Module(package, base, True))
    return modules


def _type_checking_block(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> list[tuple[str, tuple[str, ...], int, str]]:
    """(module, imported names, level, kind) for every import."""
    found: list[tuple[str, tuple[str, ...], int, str]] = []

    def visit(node: ast.AST, kind: str) -> None:
        if _type_checking_block(node):
            for child in node.body:
                visit(child, "tc")
            for child in node.orelse:      # the else branch does run
                visit(child, kind)
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and kind == "top":
            kind = "lazy"
        if isinstance(node, ast.Import):
            found.extend((alias.name, (), 0, kind) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.append((node.module or "", tuple(a.name for a in node.names), node.level, kind))
        for child in ast.iter_child_nodes(node):
            visit(child, kind)

    visit(tree, "top")
    return found


def _absolute(module: Module, target: str, level: int) -> str:
    if level == 0:
        return target
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    for _ in range(level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{target}" if target else package


def edges_of(module: Module, modules: dict[str, Module]) -> dict[str, str]:
    """The project modules `module` imports, each with the strongest kind it is imported by
    (top over lazy over type-only)."""
    if module.path.is_dir():
        return {}
    tree = ast.parse(module.path.read_text(), filename=str(module.path))
    rank = {"top": 0, "lazy": 1, "tc": 2}
    out: dict[str, str] = {}

    def add(target: str, kind: str) -> None:
        if target != module.name and (target not in out or rank[kind] < rank[out[target]]):
            out[target] = kind

    for target, names, level, kind in _imports(tree):
        base = _absolute(module, target, level)
        for name in names:
            if f"{base}.{name}" in modules:     # `from pkg import submodule`
                add(f"{base}.{name}", kind)
            elif base in modules:
                add(base, kind)
        if not names and base in modules:
            add(base, kind)
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


def unit_of(module: str) -> str | None:
    """The FLOORS unit a module belongs to: the ground floor, an exact module, or the longest
    package that holds it."""
    if module in GROUND:
        return "ground"
    if module in EXACT:
        return module
    holders = [u for floor in FLOORS for u in floor
               if u not in EXACT and u != "ground" and (module == u or module.startswith(u + "."))]
    return max(holders, key=len) if holders else None


def floor_of(unit: str) -> int:
    return next(i for i, floor in enumerate(FLOORS) if unit in floor)


def floor_problems(graph: dict[str, dict[str, str]]) -> list[str]:
    """Imports of a sibling unit or a higher floor, NEVER rules, and modules on no floor."""
    problems = [f"floor: {name} belongs to no unit of FLOORS (add it to a floor)"
                for name in sorted(graph) if unit_of(name) is None]
    for source, targets in sorted(graph.items()):
        unit = unit_of(source)
        if unit is None:
            continue
        for target, kind in sorted(targets.items()):
            other = unit_of(target)
            if other is None or other == unit:
                continue
            mine, theirs = floor_of(unit), floor_of(other)
            if theirs >= mine:
                where = "a sibling on its floor" if theirs == mine else "a higher floor"
                problems.append(f"floor: {source} imports {target} ({kind}): {other} is {where} "
                                f"({theirs + 1} from {unit} at {mine + 1})")
            for forbidden in NEVER.get(unit, ()):
                if target == forbidden or target.startswith(forbidden + "."):
                    problems.append(f"never: {source} imports {target} ({kind}): {unit} never imports {forbidden}")
    return problems


def face_exports(modules: dict[str, Module]) -> dict[str, set[str]]:
    """Package -> the names its `__init__` lists in `__all__` (a literal list or tuple)."""
    out: dict[str, set[str]] = {}
    for name, module in modules.items():
        if module.is_package and module.path.is_file():
            for node in ast.parse(module.path.read_text()).body:
                if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                        for t in node.targets):
                    out[name] = set(ast.literal_eval(node.value))
    return out


def _reached(module: Module, modules: dict[str, Module]) -> list[tuple[str, str | None]]:
    """(inner module imported, the package it was imported through, or None when imported by its
    own path) for every import of a module that is not a package."""
    found: list[tuple[str, str | None]] = []
    for target, names, level, _ in _imports(ast.parse(module.path.read_text(), filename=str(module.path))):
        base = _absolute(module, target, level)
        if base in modules and not modules[base].is_package:
            found.append((base, None))
        for name in names:
            if f"{base}.{name}" in modules and not modules[f"{base}.{name}"].is_package:
                found.append((f"{base}.{name}", base))
    return found


def face_problems(graph: dict[str, dict[str, str]], modules: dict[str, Module]) -> list[str]:
    """Imports of a package's inner module from outside the package. Outside, import its face: the
    names of its `__init__`, or a submodule that `__init__` lists in `__all__`, through the package."""
    packages = {name for name, m in modules.items() if m.is_package and name != "tuner" and "." in name}
    exports = face_exports(modules)
    problems = []
    for source in sorted(graph):
        if modules[source].path.is_dir():
            continue
        house = next((h for p, h in SAME_HOUSE.items() if source == p or source.startswith(p + ".")), None)
        for target, through in sorted(set(_reached(modules[source], modules)), key=lambda t: (t[0], t[1] or "")):
            holder = max((p for p in packages if target.startswith(p + ".")), key=len, default=None)
            if holder is None or holder.count(".") > 1 or holder == house:   # faces: tuner's subpackages
                continue
            if source == holder or source.startswith(holder + "."):
                continue
            if through == holder and target.rpartition(".")[2] in exports.get(holder, ()):
                continue
            problems.append(f"face: {source} imports {target}: outside {holder}, import its face")
    return problems


def long_modules(modules: dict[str, Module], max_lines: int) -> list[str]:
    problems = []
    for module in modules.values():
        if module.path.is_file():
            lines = len(module.path.read_text().splitlines())
            if lines > max_lines:
                problems.append(f"length: {module.name} ({module.path}) has {lines} lines, over {max_lines}")
    return problems


FACE_LIMIT = 20
FACE_REASON = "Over 20 names:"


def face_size_problems(modules: dict[str, Module]) -> list[str]:
    """Faces over FACE_LIMIT names whose docstring gives no reason."""
    problems = []
    for name, names in sorted(face_exports(modules).items()):
        if len(names) <= FACE_LIMIT or name == "tuner":
            continue
        doc = ast.get_docstring(ast.parse(modules[name].path.read_text())) or ""
        if not any(line.strip().startswith(FACE_REASON) for line in doc.splitlines()):
            problems.append(f"face: {name} exports {len(names)} names, over {FACE_LIMIT}; export only what other "
                            f"packages use, or say why in its docstring ('{FACE_REASON} ...')")
    return problems


def test_tree_problems(root: Path) -> list[str]:
    """Modules of `tests/` that import a test module or conftest, with the line."""
    tests = root / "tests"
    problems = []
    for path in sorted(tests.rglob("*.py")) if tests.is_dir() else ():
        if "__pycache__" in path.parts:
            continue
        try:
            tree = ast.parse(path.read_text(), filename=str(path))
        except SyntaxError:         # the deliberately broken model files of tests/models/
            continue
        for target, names, _, _ in _imports(tree):
            named = [*target.split("."), *names]
            bad = [n for n in named if n.startswith("test_") or n == "conftest"]
            if bad:
                problems.append(f"tests: {path.relative_to(root)} imports {'.'.join([target, *names][:2])}: "
                                "a test module never imports another; move what they share to tests/helpers/")
    return problems


def check(root: Path, *, max_lines: int = 380) -> tuple[dict[str, dict[str, str]], list[str]]:
    """The import graph of the project at `root` (module -> {imported module: kind}) and every
    problem found in it."""
    modules = find_modules(root, package_dirs(root))
    graph = {name: edges_of(module, modules) for name, module in modules.items()}
    cycles = strongly_connected({name: set(targets) for name, targets in graph.items()})
    problems = [f"cycle: {' <-> '.join(c)}" for c in cycles]
    return graph, (problems + floor_problems(graph) + face_problems(graph, modules)
                   + face_size_problems(modules) + long_modules(modules, max_lines) + test_tree_problems(root))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--max-lines", type=int, default=380)
    parser.add_argument("--edges", action="store_true", help="print every module's imports")
    args = parser.parse_args(argv)
    graph, problems = check(args.root, max_lines=args.max_lines)
    if args.edges:
        for name in sorted(graph):
            shown = [t if k == "top" else f"{t} ({k})" for t, k in sorted(graph[name].items())]
            print(f"{name} -> {', '.join(shown) or '-'}")
    for problem in problems:
        print(problem)
    kinds = [k for targets in graph.values() for k in targets.values()]
    print(f"{len(graph)} modules, {len(kinds)} imports ({kinds.count('top')} at module level, "
          f"{kinds.count('lazy')} lazy, {kinds.count('tc')} type-only), {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
