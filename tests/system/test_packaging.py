"""The folder -> package mapping holds however tuner is imported, Ray workers included."""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
IMPORTS = "import tuner.measure.node_lock, tuner.storage.urls, tuner.search_spaces; print(tuner.storage.urls.__file__)"


def test_subpackages_import_from_the_install_elsewhere(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", IMPORTS], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("urls.py")


def test_every_package_folder_ships_in_the_wheel() -> None:
    """`[tool.setuptools] packages` is an explicit list: a folder missing from it ships a wheel
    without that folder, which an editable install would never show."""
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed, dirs = set(setuptools["packages"]), setuptools["package-dir"]
    found = set()
    for package, folder in dirs.items():
        base = REPO / folder
        found.add(package)
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base)
            if "__pycache__" not in rel.parts and not any(
                    (base / Path(*rel.parts[:i])).resolve() in {(REPO / f).resolve() for f in dirs.values()}
                    for i in range(1, len(rel.parts) + 1)):
                found.add(".".join([package, *rel.parts]))
    assert found - listed == set(), f"add these to [tool.setuptools] packages: {sorted(found - listed)}"
    assert listed - found == set(), f"listed but not found: {sorted(listed - found)}"


def test_the_backend_entry_point_loads_the_lookup_face() -> None:
    """`backend="tuner"` without an import: torch resolves the installed entry point, which names a
    face (a package), so moving a file inside tuner/lookup/ never breaks it."""
    from importlib.metadata import entry_points

    from torch._dynamo.backends.registry import lookup_backend

    from tuner.lookup import tuner_backend

    found = [e for e in entry_points(group="torch_dynamo_backends") if e.name == "tuner"]
    assert [e.value for e in found] == ["tuner.lookup:tuner_backend"]
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]
    assert declared["torch_dynamo_backends"] == {"tuner": found[0].value}, "reinstall: pip install ."
    assert found[0].load() is tuner_backend
    assert lookup_backend("tuner") is tuner_backend


def test_what_the_removed_pipeline_shim_offered_imports_from_tuner_search(tmp_path: Path) -> None:
    """The `tuner.pipeline` shim is gone; what it offered imports from `tuner.search`, the face,
    in a fresh process outside the repository (the installed package, not the source tree)."""
    code = "from tuner.search import Execution, MeasureSpec, SearchOptions, run_search; print(run_search.__module__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "tuner.search.pipeline"


def test_the_trial_values_load_the_standard_library_only(tmp_path: Path) -> None:
    """A trial process sets its memory cap through tuner.trial before torch loads
    (workers/trial_process.py), and the executors exchange its values without torch."""
    code = ("import sys; before = set(sys.modules); import tuner.trial, tuner.trial.memory_limit; "
            "print(sorted({m.split('.')[0] for m in set(sys.modules) - before} - set(sys.stdlib_module_names)"
            " - {'tuner'}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"tuner.trial loads packages beyond the standard library: {out.stdout}"


@pytest.mark.ray
def test_ray_workers_import_the_tuner_the_driver_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    """A driver started in the repository root. Ray puts a driver's working directory first on
    its workers' sys.path; there the source `tuner/` folder (without its storage/workers
    subpackages) would shadow an installed, non-editable tuner in every worker."""
    import tuner.workers
    from helpers.ray_cluster import auth_env
    from helpers.ray_stand_ins import travel_by_value, where_tuner_is
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
