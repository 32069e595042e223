"""The package's import graph has no cycles and keeps its floors and faces (scripts/import_graph.py),
and the checker can fail on each rule it checks."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "import_graph.py"
LAZY = "def f():\n    {}\n"


def run_graph(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_the_package_has_no_cycle_no_floor_or_face_breach_and_no_long_module() -> None:
    result = run_graph("--root", str(ROOT))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 problem(s)" in result.stdout


def _problems(root: Path, files: dict[str, str], *args: str) -> list[str]:
    root.mkdir(exist_ok=True)
    (root / "pyproject.toml").write_text('[tool.setuptools.package-dir]\n"tuner" = "tuner"\n'
                                         '"tuner.storage" = "storage"\n"tuner.workers" = "workers"\n')
    for name in ("tuner/__init__.py", "storage/__init__.py", "workers/__init__.py"):
        files.setdefault(name, "")
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    result = run_graph("--root", str(root), *args)
    lines = result.stdout.splitlines()[:-1]
    assert result.returncode == (1 if lines else 0), result.stdout + result.stderr
    return lines


def test_a_clean_tree_passes(tmp_path: Path) -> None:
    assert _problems(tmp_path, {"tuner/errors.py": "", "tuner/keys.py": "from tuner.errors import E\n",
                                "storage/store.py": "from tuner.keys import k\n"}) == []


def test_a_cycle_through_a_lazy_import_fails(tmp_path: Path) -> None:
    problems = _problems(tmp_path, {"tuner/errors.py": "from tuner import keys\n",
                                    "tuner/keys.py": LAZY.format("import tuner.errors")})
    assert problems == ["cycle: tuner.errors <-> tuner.keys"]


def test_a_cycle_through_a_type_checking_import_fails(tmp_path: Path) -> None:
    problems = _problems(tmp_path, {"storage/store.py": "from tuner.storage import failures\n",
                                    "storage/failures.py": "from typing import TYPE_CHECKING\n"
                                                           "if TYPE_CHECKING:\n"
                                                           "    from tuner.storage.store import Store\n"})
    assert problems == ["cycle: tuner.storage.failures <-> tuner.storage.store"]


def test_an_import_of_a_higher_floor_fails_type_only_and_lazy_too(tmp_path: Path) -> None:
    problems = _problems(tmp_path, {
        "tuner/lookup/__init__.py": "",
        "storage/store.py": LAZY.format("from tuner.lookup import Lookup"),
        "storage/records.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tuner.lookup import x\n"})
    assert len(problems) == 2, problems
    assert problems[0].startswith("floor: tuner.storage.records imports tuner.lookup (tc): "
                                  "tuner.lookup is a higher floor")
    assert problems[1].startswith("floor: tuner.storage.store imports tuner.lookup (lazy)")


def test_an_import_of_a_sibling_on_the_same_floor_fails(tmp_path: Path) -> None:
    problems = _problems(tmp_path, {"tuner/lookup/__init__.py": "", "tuner/measure/__init__.py": "",
                                    "tuner/measure/core.py": "from tuner.lookup import Lookup\n"})
    assert len(problems) == 1 and "tuner.lookup is a sibling on its floor" in problems[0], problems


def test_an_inner_module_imported_from_outside_its_package_fails(tmp_path: Path) -> None:
    problems = _problems(tmp_path, {"storage/records.py": "", "storage/store.py": "from tuner.storage import records\n",
                                    "tuner/lookup/__init__.py": "from tuner.storage.records import TrialRecord\n"})
    assert problems == ["face: tuner.lookup imports tuner.storage.records: outside tuner.storage, import its face"]


def test_a_submodule_the_face_lists_may_be_imported_through_the_package_only(tmp_path: Path) -> None:
    face = {"tuner/inductor/__init__.py": '__all__ = ["gemm_choices"]\n', "tuner/inductor/gemm_choices.py": ""}
    assert _problems(tmp_path / "a", {**face, "tuner/lookup/backend.py": "from tuner.inductor import gemm_choices\n",
                                      "tuner/lookup/__init__.py": ""}) == []
    problems = _problems(tmp_path / "b", {**face, "tuner/lookup/__init__.py": "",
                                          "tuner/lookup/backend.py": "from tuner.inductor.gemm_choices import x\n"})
    assert problems == ["face: tuner.lookup.backend imports tuner.inductor.gemm_choices: outside tuner.inductor, "
                        "import its face"]


def test_a_never_rule_fails_though_the_floors_allow_it(tmp_path: Path) -> None:
    problems = _problems(tmp_path, {"tuner/workload/__init__.py": "",
                                    "workers/local.py": LAZY.format("from tuner.workload import capture")})
    assert len(problems) == 1 and problems[0].startswith("never: tuner.workers.local imports tuner.workload"), problems


def test_a_module_on_no_floor_fails(tmp_path: Path) -> None:
    assert _problems(tmp_path, {"tuner/gadgets/__init__.py": ""}) == [
        "floor: tuner.gadgets belongs to no unit of FLOORS (add it to a floor)"]


def test_subfolders_without_a_mapping_of_their_own_are_read(tmp_path: Path) -> None:
    """tuner/report/ has no package-dir entry: it installs under tuner's, and is checked."""
    problems = _problems(tmp_path, {"tuner/report/__init__.py": "", "tuner/cli/__init__.py": "",
                                    "tuner/report/deep/__init__.py": "",
                                    "tuner/report/deep/page.py": "import tuner.cli\n"})
    assert len(problems) == 1 and problems[0].startswith("floor: tuner.report.deep.page imports tuner.cli"), problems


def test_a_long_module_fails(tmp_path: Path) -> None:
    files = {"tuner/errors.py": "x = 1\n" * 12}
    assert _problems(tmp_path, dict(files), "--max-lines", "20") == []
    problems = _problems(tmp_path, dict(files), "--max-lines", "10")
    assert len(problems) == 1 and problems[0].startswith("length: tuner.errors"), problems


def test_a_module_over_380_lines_fails_by_default(tmp_path: Path) -> None:
    assert _problems(tmp_path / "a", {"tuner/errors.py": "x = 1\n" * 380}) == []
    problems = _problems(tmp_path / "b", {"tuner/errors.py": "x = 1\n" * 381})
    assert len(problems) == 1 and problems[0].endswith("has 381 lines, over 380"), problems


def test_a_face_over_20_names_fails_unless_its_docstring_says_why(tmp_path: Path) -> None:
    names = repr([f"n{i}" for i in range(21)])
    problems = _problems(tmp_path / "a", {"storage/__init__.py": f'"""The store."""\n__all__ = {names}\n'})
    assert len(problems) == 1 and problems[0].startswith("face: tuner.storage exports 21 names, over 20"), problems
    said = f'"""The store.\n\nOver 20 names: each is a row type another package reads.\n"""\n__all__ = {names}\n'
    assert _problems(tmp_path / "b", {"storage/__init__.py": said}) == []


def test_a_test_module_importing_another_fails(tmp_path: Path) -> None:
    problems = _problems(tmp_path / "a", {"tests/helpers/__init__.py": "MODELS = 1\n",
                                          "tests/lookup/test_lookup.py": "from helpers import MODELS\n",
                                          "tests/cli/test_cli.py": LAZY.format("from test_lookup import store_configs"),
                                          "tests/cli/test_other.py": "import conftest\n"})
    assert problems == [
        "tests: tests/cli/test_cli.py imports test_lookup.store_configs: a test module never imports another; "
        "move what they share to tests/helpers/",
        "tests: tests/cli/test_other.py imports conftest: a test module never imports another; "
        "move what they share to tests/helpers/"]
