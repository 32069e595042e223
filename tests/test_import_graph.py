"""The package's import graph has no cycles and respects its layers (scripts/import_graph.py)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "import_graph.py"


def run_graph(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_the_package_has_no_cycle_no_upward_import_and_no_long_module() -> None:
    result = run_graph("--root", str(ROOT))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 problem(s)" in result.stdout


def _write(root: Path, files: dict[str, str]) -> None:
    (root / "pyproject.toml").write_text('[tool.setuptools.package-dir]\n"tuner" = "tuner"\n'
                                         '"tuner.storage" = "storage"\n')
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_cycle_through_a_lazy_import_fails(tmp_path: Path) -> None:
    _write(tmp_path, {"tuner/__init__.py": "", "tuner/a.py": "from tuner import b\n",
                      "tuner/b.py": "def f():\n    import tuner.a\n", "storage/__init__.py": ""})
    result = run_graph("--root", str(tmp_path))
    assert result.returncode == 1
    assert "cycle: tuner.a <-> tuner.b" in result.stdout


def test_an_upward_import_fails_but_type_checking_imports_do_not_count(tmp_path: Path) -> None:
    _write(tmp_path, {"tuner/__init__.py": "", "tuner/lookup.py": "",
                      "storage/__init__.py": "from typing import TYPE_CHECKING\n"
                                             "if TYPE_CHECKING:\n    from tuner.lookup import x\n",
                      "storage/store.py": "def f():\n    from tuner.lookup import Lookup\n"})
    result = run_graph("--root", str(tmp_path))
    assert result.returncode == 1
    assert result.stdout.count("layer:") == 1
    assert "layer: tuner.storage.store imports tuner.lookup" in result.stdout


def test_a_long_module_fails(tmp_path: Path) -> None:
    _write(tmp_path, {"tuner/__init__.py": "", "tuner/big.py": "x = 1\n" * 12, "storage/__init__.py": ""})
    assert run_graph("--root", str(tmp_path), "--max-lines", "10").returncode == 1
    assert run_graph("--root", str(tmp_path), "--max-lines", "20").returncode == 0
