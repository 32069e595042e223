"""The Ray executor on a real two-node cluster on this machine, with every fault injected for real.

The head advertises this machine's platform (A), a worker node a stand-in platform B
(custom resources standing in for two kinds of hardware), both started with Ray's
`cluster_utils.Cluster` and one auth token; teardown stops only these nodes. Trials here run
the tests' stand-in body (tests/helpers/ray_stand_ins.py: no trial process) or fault the Ray worker
itself, so the file spends its time on Ray, not on compiling.
"""
from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import pytest

from helpers.ray_cluster import LocalCluster, running_tasks
from helpers.ray_stand_ins import EXIT, HANG, stand_in_executor, stand_in_request
from tuner.errors import UsageError
from tuner.platform import current_platform
from tuner.trial import Status, TrialRequest
from tuner.workers import describe_platform
from tuner.workers.placement import cluster_platforms, platform_resource
from tuner.workers.ray_pool import TASK_NAME_PREFIX, RayExecutor

pytestmark = pytest.mark.ray
PLAT_A = current_platform("cpu").key     # the head stands for this machine's real platform
PLAT_B, PLAT_C = "b" * 24, "c" * 24      # the others are stand-ins


class Cluster:
    def __init__(self, group: LocalCluster, node_ids: dict[str, str]):
        self.group, self.node_ids = group, node_ids


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    group = LocalCluster()
    with pytest.MonkeyPatch.context() as env, group:
        for name, value in group.env().items():
            env.setenv(name, value)
        env.delenv("RAY_ADDRESS", raising=False)
        import ray
        group.start_head(resources={platform_resource(PLAT_A): 1})
        group.add_node(resources={platform_resource(PLAT_B): 1})
        first = RayExecutor(workers=1, address=group.address)   # joins: ray.init(address=...)
        try:
            group.wait_for_nodes(2)
            ids = {key: node["NodeID"] for node in ray.nodes() if node["Alive"]
                   for key in (PLAT_A, PLAT_B) if platform_resource(key) in node["Resources"]}
            yield Cluster(group, ids)
        finally:
            first.close()
            ray.shutdown()


def job(number: int, stand_in: str | None = None, platform: str | None = PLAT_B, *, sleep_s: float = 0.0,
        timeout_s: float = 60.0) -> TrialRequest:
    return stand_in_request(number, stand_in=stand_in, sleep_s=sleep_s, platform=platform, timeout_s=timeout_s)


def drain(executor: RayExecutor) -> dict[int, list]:
    results: dict[int, list] = {}
    while executor.pending():
        request, measurement = executor.next_result()
        results.setdefault(request.number, []).append(measurement)
    return results


def test_trials_run_only_on_their_platforms_node(cluster: Cluster) -> None:
    assert cluster_platforms() == {PLAT_A: 1, PLAT_B: 1}
    executor = stand_in_executor(workers=6, address=cluster.group.address)
    for number in range(6):
        executor.submit(job(number, platform=PLAT_A if number % 2 else PLAT_B, sleep_s=0.2))
    results = drain(executor)
    assert sorted(results) == list(range(6))
    for number, [measurement] in results.items():
        node = cluster.node_ids[PLAT_A if number % 2 else PLAT_B]
        assert measurement.ok and measurement.worker.startswith(f"ray:{node}/"), (number, measurement.worker)
    with pytest.raises(UsageError, match="no node of the Ray cluster advertises platform"):
        executor.submit(job(9, platform="f" * 24))
    assert executor.pending() == 0


def test_a_platform_is_described_by_a_node_of_it(cluster: Cluster) -> None:
    assert describe_platform(PLAT_A) == current_platform("cpu")
    with pytest.raises(LookupError, match="no node"):
        describe_platform("f" * 24)


def test_dead_ray_worker_is_a_crash_and_is_replaced(cluster: Cluster) -> None:
    executor = stand_in_executor(workers=2, address=cluster.group.address)
    for request in (job(0, EXIT), job(1), job(2, EXIT)):
        executor.submit(request)
    results = drain(executor)
    assert {n: [m.status for m in ms] for n, ms in results.items()} == {
        0: [Status.CRASHED], 1: [Status.OK], 2: [Status.CRASHED]}
    assert "Ray worker running the trial died" in results[0][0].error
    # The node is named when its "started" value reached the driver before the worker died.
    assert results[0][0].worker in (None, f"ray:{cluster.node_ids[PLAT_B]}")
    executor.submit(job(3))                          # a new worker takes the next trial
    assert drain(executor)[3][0].ok


def test_task_past_its_deadline_is_cancelled_and_a_timeout(cluster: Cluster) -> None:
    executor = stand_in_executor(workers=2, address=cluster.group.address, grace_s=1.0)
    started = time.monotonic()
    executor.submit(job(0, HANG, timeout_s=1.0))
    executor.submit(job(1, sleep_s=0.5))
    results = drain(executor)
    assert {n: [m.status for m in ms] for n, ms in results.items()} == {0: [Status.TIMEOUT], 1: [Status.OK]}
    assert "cancelled by force" in results[0][0].error
    assert time.monotonic() - started < 30
    executor.submit(job(2))                          # the cancelled worker was replaced
    assert drain(executor)[2][0].ok


def test_lost_node_mid_trial_is_a_crash(cluster: Cluster) -> None:
    node = cluster.group.add_node(resources={platform_resource(PLAT_C): 1})
    cluster.group.wait_for_nodes(3)
    executor = stand_in_executor(workers=3, address=cluster.group.address)
    for request in (job(0, platform=PLAT_C, sleep_s=120), job(1, platform=PLAT_C, sleep_s=120),
                    job(2, platform=PLAT_A)):
        executor.submit(request)
    deadline = time.monotonic() + 60
    while running_tasks(node, TASK_NAME_PREFIX) < 2:
        assert time.monotonic() < deadline, "the trials never started on node c"
        time.sleep(0.2)
    node.kill_raylet()                                 # SIGKILL: a lost node

    results = drain(executor)

    assert {n: [m.status for m in ms] for n, ms in results.items()} == {
        0: [Status.CRASHED], 1: [Status.CRASHED], 2: [Status.OK]}
    assert "node running the trial was lost" in results[0][0].error
    deadline = time.monotonic() + 90                    # until Ray's health checks mark the node dead
    while PLAT_C in cluster_platforms():
        assert time.monotonic() < deadline, "the killed node still counts as alive"
        time.sleep(0.5)
    with pytest.raises(UsageError):                    # its platform left with its only node
        RayExecutor(workers=1, address=cluster.group.address).submit(job(3, platform=PLAT_C))


def test_a_result_recorded_twice_is_stored_once(cluster: Cluster, tmp_path: Path) -> None:
    from tuner.platform import Platform
    from tuner.storage import Store, TrialRecord, upgrade
    from tuner.keys import GraphFingerprint, Workload

    executor = stand_in_executor(workers=2, address=cluster.group.address)
    request = job(0)
    executor.submit(request)
    executor.submit(request)                           # as if re-sent after a crash before recording
    results = drain(executor)
    assert len(results[0]) == 2

    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    upgrade(url)
    with Store.open(url) as store:
        platform = Platform(key=PLAT_B, hardware_key="hw", software_key="sw", device="cpu",
                            hardware=(("cpu_model", "test"),), software=(("torch", "test"),))
        workload = Workload(key="wl", name="tiny", graphs=(GraphFingerprint(
            key="g", index=0, num_nodes=1, input_meta="{}", code="graph"),))
        store.ensure_platform(platform)
        store.ensure_workload(workload)
        study = store.create_study(workload_key="wl", platform_key=PLAT_B, space_hash="s", sampler="tpe",
                                   seed=0, trials_requested=1, user="test", host="test", tuner_version="0")
        recorded = [store.record_trial(study.id, TrialRecord(
            number=request.number, candidate_key=request.candidate.key, params={}, measurement=measurement,
            finished_at=datetime.now(timezone.utc))) for measurement in results[0]]
        assert recorded == [True, False]
        assert [t.number for t in store.trials(study.id)] == [0]


def test_a_node_that_cannot_have_the_search_cache_folder_fails_the_trial_with_the_reason(
        cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each node makes the search's cache folder, private, under its own temporary folder. Something
    else where it should be is a recorded failure with the reason, never a crash of the Ray worker,
    for trials and confirmations alike; `close` removes the folder from every alive node."""
    import shutil
    import tempfile

    import ray

    from helpers import MODELS
    from tuner.trial import EAGER, ConfirmFailed, ConfirmRequest, MeasureSpec
    from tuner.workers.placement import trial_resources

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)    # the search's own folder, not the suite's
    executor = RayExecutor(workers=1, address=cluster.group.address)
    node_tmp = Path(ray.get(ray.remote(tempfile.gettempdir).options(resources=trial_resources(PLAT_A)).remote()))
    folder = node_tmp / executor._cache
    try:
        shutil.rmtree(folder, ignore_errors=True)
        folder.write_text("")                      # another user's file where the folder should be
        spec = MeasureSpec(str(MODELS / "tiny_mlp.py"), platform_key=PLAT_A, timeout_s=60)
        executor.submit(TrialRequest(spec=spec, params=(), number=0))
        [measurement] = drain(executor)[0]
        assert measurement.status is Status.CRASHED, measurement
        assert measurement.error.startswith(f"compile cache folder {folder} is not a folder"), measurement.error
        assert "\n" not in measurement.error and "remove it" in measurement.error
        failed = executor.run_confirmation(ConfirmRequest(spec=spec, variants=((EAGER, None),), rounds=2,
                                                          samples_per_round=1))
        assert isinstance(failed, ConfirmFailed) and failed.status is Status.CRASHED, failed
        assert failed.error.startswith(f"compile cache folder {folder} is not a folder"), failed.error

        from tuner.workers.caches import node_cache_env

        folder.unlink()                            # a trial on node B makes it; close removes it there
        ray.get(ray.remote(node_cache_env).options(resources=trial_resources(PLAT_B)).remote(executor._cache))
        assert folder.is_dir()
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))   # not the driver's own: the nodes remove it
    finally:
        executor.close()
    assert not folder.exists()


def test_a_cuda_search_on_a_cluster_without_gpus_fails_at_once_naming_the_fix(cluster: Cluster) -> None:
    """Each trial of a CUDA search holds a GPU (num_gpus=1): on a joined cluster none of whose alive
    nodes has one (this one, or a GPU node where Ray's NVML finds none), Ray would keep it waiting
    without a word."""
    executor = RayExecutor(workers=1, address=cluster.group.address, device="cuda")
    try:
        for platform in (PLAT_A, None):
            with pytest.raises(UsageError, match=r"has a GPU for Ray to give.*"
                                                 r"start a GPU node with: ray start --address ADDRESS --num-gpus N"):
                executor.submit(job(0, platform=platform))
        assert executor.pending() == 0
    finally:
        executor.close()
