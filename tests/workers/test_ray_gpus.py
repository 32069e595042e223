"""The Ray executor on a cluster of two logical GPUs: Ray assigns each task given `num_gpus` its GPUs
and names them in its CUDA_VISIBLE_DEVICES, and the trial process measures on the one it was given.

The head node is started with `num_gpus=2` (logical GPUs: Ray needs no driver for them) and
advertises the platform of the CUDA dry run's stand-in machine (tests/helpers/cuda_dry_run.py), whose
model file makes every process that loads it a machine of two GPUs with CPU tensors; the Ray
workers' trial processes inherit CUDA_VISIBLE_DEVICES from the task, as on a GPU node.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.dry_run_matrix import device_calls, dry_run_env, gpu_locks, run_python, write_model
from helpers.ray_cluster import LocalCluster
from tuner.trial import MeasureSpec
from tuner.workers.ray_pool import RayExecutor, with_assigned_gpus

pytestmark = pytest.mark.ray
TESTS = Path(__file__).resolve().parents[1]


def stand_in_platform(tmp_path: Path) -> dict[str, float]:
    """The resources a node of the stand-in machine advertises (its platform, as a driver on it computes it)."""
    script = ("import json; from helpers.cuda_dry_run import install; install(); "
              "from tuner.workers.placement import local_node_resources; "
              "print(json.dumps(local_node_resources('cuda')))")
    done = run_python(["-c", script], TESTS, dry_run_env(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def gpu_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, Path]]:
    """A head of two logical GPUs, its processes (and the trial processes they start) in a dry-run
    environment whose log and lock folder are the returned folder's."""
    folder = tmp_path_factory.mktemp("gpus")
    group = LocalCluster()
    with pytest.MonkeyPatch.context() as env, group:
        for name, value in {**group.env(), **{k: v for k, v in dry_run_env(folder).items()
                                               if k in ("DRY_RUN_LOG", "TMPDIR", "TORCHINDUCTOR_CACHE_DIR")}}.items():
            env.setenv(name, value)
        env.delenv("RAY_ADDRESS", raising=False)
        env.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        import ray

        group.start_head(num_cpus=2, num_gpus=2, resources=stand_in_platform(folder))
        joined = RayExecutor(workers=1, address=group.address)    # joins from a neutral folder (not the checkout)
        try:
            yield group, folder
        finally:
            joined.close()
            ray.shutdown()


def _assigned(num_gpus: int) -> tuple[tuple[str, ...] | None, str | None]:
    """In a task: what `with_assigned_gpus` gives a spec, and the task's CUDA_VISIBLE_DEVICES."""
    return with_assigned_gpus(MeasureSpec("m.py")).gpu_ids, os.environ.get("CUDA_VISIBLE_DEVICES")


def test_a_task_given_gpus_passes_their_node_ids_to_its_trial(gpu_cluster) -> None:
    import sys

    import ray

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])   # workers cannot import tests/
    task = ray.remote(_assigned)
    one = ray.get([task.options(num_gpus=1).remote(1) for _ in range(4)])
    assert all(ids in (("0",), ("1",)) and visible == ids[0] for ids, visible in one), one
    assert ray.get(task.options(num_gpus=2).remote(2)) == (("0", "1"), "0,1")
    assert ray.get(task.options(num_gpus=0).remote(0))[0] is None       # no GPU: the spec as it was


def test_a_cuda_search_through_ray_measures_each_trial_on_the_gpu_ray_gave_it(gpu_cluster, tmp_path: Path) -> None:
    """Two trials at once hold both GPUs: each trial process (CUDA_VISIBLE_DEVICES one GPU) maps
    DEVICE = "cuda" onto it, selects, times and locks it, and nothing else."""
    group, folder = gpu_cluster
    model = write_model(tmp_path, "cuda", '"cuda"')
    env = {**dry_run_env(folder), **group.env(), "TUNER_DB": f"sqlite:///{tmp_path / 'tuner.db'}"}
    before = set(device_calls(folder)) if (folder / "log").exists() else set()
    done = run_python(["-m", "tuner", "search", str(model), "--address", group.address, "--workers", "2",
                       "--trials", "2", "--repeat", "2", "--rounds", "12"], tmp_path, env)
    assert done.returncode == 0 and "2/2 trials, 0 failed" in done.stderr, done.stderr[-3000:]
    calls = {pid: c for pid, c in device_calls(folder).items() if pid not in before}
    timed = {pid: {gpu for call, gpu in c if call != "properties"} for pid, c in calls.items() if
             any(call == "record" for call, _ in c)}
    assert len(timed) >= 3 and all(len(gpus) == 1 for gpus in timed.values()), calls   # 2 trials, a confirmation
    assert set().union(*timed.values()) == {0, 1}, timed
    assert gpu_locks(folder) >= {"gpu-dry-run-0.lock", "gpu-dry-run-1.lock"}
