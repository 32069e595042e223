"""The folder -> package mapping holds however tuner is imported, Ray workers included."""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
IMPORTS = "import tuner.node_lock, tuner.storage.urls, tuner.search_spaces; print(tuner.storage.urls.__file__)"


def test_subpackages_import_from_the_install_elsewhere(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", IMPORTS], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("urls.py")


@pytest.mark.ray
def test_ray_workers_import_the_tuner_the_driver_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    """A driver started in the repository root. Ray puts a driver's working directory first on
    its workers' sys.path; there the source `tuner/` folder (without its storage/workers
    subpackages) would shadow an installed, non-editable tuner in every worker."""
    import tuner.workers
    from ray_cluster import auth_env
    from ray_stand_ins import travel_by_value, where_tuner_is
    from tuner.workers.ray_pool import RayExecutor

    ray_tmp = tempfile.mkdtemp(prefix="tuner-ray-", dir="/tmp")   # short: Ray's socket paths have a limit
    for name, value in auth_env().items():      # before Ray is first imported: it reads them then
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("RAY_TMPDIR", ray_tmp)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.chdir(REPO)
    try:
        executor = RayExecutor(workers=1)
        import ray

        travel_by_value()
        try:
            seen = ray.get(ray.remote(where_tuner_is).remote(), timeout=120)
        finally:
            executor.close()
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert str(REPO) not in seen["sys_path"]
    assert seen["tuner.workers"] == tuner.workers.__file__
