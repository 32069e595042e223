"""Ray on clusters of two logical GPUs (Ray needs no driver for them): Ray assigns each task given
`num_gpus` its GPUs and names them in its CUDA_VISIBLE_DEVICES, and the trial process measures on the
one it was given.

The search runs on the CUDA dry run's stand-in machine (tests/helpers/cuda_dry_run.py), whose model
file makes every process that loads it a machine of two GPUs with CPU tensors; the Ray workers'
trial processes inherit CUDA_VISIBLE_DEVICES from the task, as on a GPU node.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.dry_run_matrix import device_calls, dry_run_env, gpu_locks, run_python, write_model
from helpers.ray_cluster import LocalCluster, auth_env
from tuner.trial import MeasureSpec
from tuner.workers.ray_pool import RayExecutor
from tuner.workers.ray_tasks import with_assigned_gpus

pytestmark = pytest.mark.ray


def test_a_cuda_search_through_ray_measures_each_trial_on_the_gpu_ray_gave_it(tmp_path: Path) -> None:
    """`tuner search --executor ray` starts a local cluster with the GPUs torch sees (two logical GPUs
    here: Ray's own count, through NVML, finds none, and no trial would ever start). Two trials at once
    hold both GPUs: each trial process (CUDA_VISIBLE_DEVICES one GPU) maps DEVICE = "cuda" onto it,
    selects, times and locks it, and nothing else. Runs before the module's cluster starts."""
    model = write_model(tmp_path, "cuda", '"cuda"')
    ray_tmp = tempfile.mkdtemp(prefix="tuner-ray-", dir="/tmp")     # Ray's socket paths must stay short
    env = dry_run_env(tmp_path, RAY_TMPDIR=ray_tmp, RAY_USAGE_STATS_ENABLED="0", **auth_env())
    env.pop("RAY_ADDRESS", None)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    try:
        done = run_python(["-m", "tuner", "search", str(model), "--executor", "ray", "--workers", "2",
                           "--trials", "2", "--repeat", "2", "--rounds", "12", "--no-runtime-knobs"], tmp_path, env,
                          timeout=300)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert done.returncode == 0 and "2/2 trials, 0 failed" in done.stderr, done.stderr[-3000:]
    calls = device_calls(tmp_path)
    timed = {pid: {gpu for call, gpu in c if call != "properties"} for pid, c in calls.items() if
             any(call == "record" for call, _ in c)}
    assert len(timed) >= 3 and all(len(gpus) == 1 for gpus in timed.values()), calls   # 2 trials, a confirmation
    assert set().union(*timed.values()) == {0, 1}, timed
    assert gpu_locks(tmp_path) >= {"gpu-dry-run-0.lock", "gpu-dry-run-1.lock"}


def test_cuda_n_is_the_drivers_cuda_n_on_the_gpu_ray_gives_each_trial(tmp_path: Path) -> None:
    """`CUDA_VISIBLE_DEVICES=1 tuner search --executor ray` with DEVICE = "cuda:0": the driver's torch calls
    GPU 1 of the node cuda:0, its local cluster has that one GPU (Ray names it "1"), and each trial process
    (CUDA_VISIBLE_DEVICES=1, from Ray) maps "cuda:0" through the driver's list onto it: every trial and the
    confirmation measure on GPU 1, and nothing touches GPU 0. Runs before the module's cluster starts."""
    model = write_model(tmp_path, "cuda:0", '"cuda:0"')
    ray_tmp = tempfile.mkdtemp(prefix="tuner-ray-", dir="/tmp")     # Ray's socket paths must stay short
    env = dry_run_env(tmp_path, RAY_TMPDIR=ray_tmp, RAY_USAGE_STATS_ENABLED="0", CUDA_VISIBLE_DEVICES="1",
                      **auth_env())
    env.pop("RAY_ADDRESS", None)
    try:
        done = run_python(["-m", "tuner", "search", str(model), "--executor", "ray", "--trials", "1",
                           "--repeat", "2", "--rounds", "12", "--no-runtime-knobs"], tmp_path, env, timeout=300)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert done.returncode == 0 and "1/1 trials, 0 failed" in done.stderr, done.stderr[-3000:]
    calls = device_calls(tmp_path)
    timed = [pid for pid, c in calls.items() if any(call == "record" for call, _ in c)]
    assert len(timed) >= 2, calls                     # the trial and the confirmation
    assert {gpu for c in calls.values() for call, gpu in c if call != "properties"} == {1}, calls
    locks = gpu_locks(tmp_path)
    assert "gpu-dry-run-1.lock" in locks and not any(name.startswith("gpu-dry-run-0") for name in locks), locks


@pytest.fixture(scope="module")
def gpu_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A head of two logical GPUs."""
    group = LocalCluster()
    with pytest.MonkeyPatch.context() as env, group:
        for name, value in group.env().items():
            env.setenv(name, value)
        env.delenv("RAY_ADDRESS", raising=False)
        env.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        import ray

        group.start_head(num_cpus=2, num_gpus=2)
        joined = RayExecutor(workers=1, address=group.address)    # joins from a neutral folder (not the checkout)
        try:
            yield group
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


