"""The folder -> package mapping holds however tuner is imported."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
IMPORTS = "import tuner.workers.lock, tuner.storage.urls, tuner.search_spaces; print(tuner.storage.urls.__file__)"


def test_subpackages_import_from_a_source_checkout_on_sys_path() -> None:
    """What a Ray worker started in the repository root sees: the source `tuner/` first on sys.path."""
    out = subprocess.run([sys.executable, "-c", IMPORTS], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(REPO / "storage" / "urls.py")


def test_subpackages_import_from_the_install_elsewhere(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", IMPORTS], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("urls.py")
