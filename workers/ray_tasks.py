"""What a Ray task of the executor runs on its node (`workers/ray_pool.py` is the driver's side).

A trial task measures in a fresh trial process (`run_isolated`), a confirmation task likewise
(`confirm_isolated`), with the environment `node_env` gives: this Ray worker's, without Ray's
OMP_NUM_THREADS (`trial_env`), and with the search's compile caches in its folder under this node's
temporary folder (`workers/caches.py`). Where that folder cannot be had, the trial is CRASHED with the
reason and the worker lives on. Nothing here imports torch: Ray tasks run beside other trials'
timed sections, and the trial process imports what it needs under the node's locks.
"""
from __future__ import annotations

import os
import socket
from dataclasses import replace
from typing import Any, Callable, Iterator

from tuner.trial import (ConfirmFailed, ConfirmRequest, MeasureSpec, Measurement, ProcessRequest, ProcessTiming, Status,
                         TrialRequest)
from tuner.workers.caches import CacheFolderError, node_cache_env
from tuner.workers.isolation import confirm_isolated, run_isolated, time_isolated
from tuner.workers.spares import process_spares, timing_spares


def measure_on_node(request: TrialRequest, *, cache: str | None = None, warm: bool = True) -> Measurement:
    """How a Ray task measures a trial by default: `run_isolated`, in a fresh trial process on its node
    (this Ray worker's spare when `warm` and its environment fits), its compile caches in the search's
    folder `cache` on this node (`node_env`). CRASHED, with the reason, where that folder cannot be had."""
    try:
        env = node_env(request.spec, cache)
    except CacheFolderError as exc:
        return Measurement.failed(Status.CRASHED, str(exc))
    return run_isolated(request, env=env, spares=process_spares() if warm else None)


def node_env(spec: MeasureSpec, cache: str | None) -> dict[str, str] | None:
    """`trial_env`, with the search's compile caches in its folder named `cache` under this node's
    temporary folder (`node_cache_env`: made private, CacheFolderError where it cannot be); None
    `cache`: the user named their own folder (the driver decided), which the environment holds.
    Never imports torch: Ray tasks run beside other trials' timed sections."""
    env = trial_env(spec)
    return env if cache is None else node_cache_env(cache, env)


def trial_env(spec: MeasureSpec) -> dict[str, str] | None:
    """The environment of a trial or confirmation process started by a Ray task (None: the task's own).

    Ray sets OMP_NUM_THREADS=1 for tasks with under one CPU. The trial process would inherit
    it and measure single-threaded under a platform key for torch's default thread count, so
    unless `spec` fixes `threads`, the process gets this worker's environment without it. The
    Ray worker's own environment is left as it is.
    """
    if spec.threads is not None or "OMP_NUM_THREADS" not in os.environ:
        return None
    return {name: value for name, value in os.environ.items() if name != "OMP_NUM_THREADS"}


def with_assigned_gpus(spec: MeasureSpec, driver_gpus: tuple[str, ...] | None = None) -> MeasureSpec:
    """`spec` with the GPUs Ray assigned this task (`ray.get_gpu_ids()`, run inside it) and `driver_gpus`
    (`ray_pool.visible_gpus`): its trial process sees only those GPUs, and maps the model file's `cuda:N`,
    the driver's cuda:N, onto them (`tuner.workload.normal_cuda`). Unchanged without GPUs."""
    import ray

    ids = tuple(str(i) for i in ray.get_gpu_ids())
    return replace(spec, gpu_ids=ids, driver_gpus=driver_gpus) if ids else spec


def trial_task_for(measure: Callable[[TrialRequest], Measurement],
                   driver_gpus: tuple[str, ...] | None = None) -> Callable[[dict[str, Any]], Iterator[dict]]:
    """The Ray task body, measuring with `measure`: report where it started, then yield the Measurement."""

    def trial_task(request_json: dict[str, Any]) -> Iterator[dict[str, Any]]:
        import ray

        node_id = ray.get_runtime_context().get_node_id()
        yield {"started": node_id}
        request = TrialRequest.from_json(request_json)
        measurement = measure(replace(request, spec=with_assigned_gpus(request.spec, driver_gpus)))
        where = measurement.worker or f"{socket.gethostname()}:{os.getpid()}"
        yield replace(measurement, worker=f"ray:{node_id}/{where}").to_json()

    return trial_task


def confirm_task(request_json: dict[str, Any], cache: str | None = None, warm: bool = True,
                 driver_gpus: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The Ray task body of a confirmation: one fresh process on this node, like a trial.
    Returns {"result": ConfirmResult JSON} or {"failed": ConfirmFailed JSON}."""
    request = ConfirmRequest.from_json(request_json)
    request = replace(request, spec=with_assigned_gpus(request.spec, driver_gpus))
    try:
        env = node_env(request.spec, cache)
    except CacheFolderError as exc:
        return {"failed": ConfirmFailed(Status.CRASHED, str(exc)).to_json()}
    outcome = confirm_isolated(request, env=env, spares=process_spares() if warm else None)
    return {"failed" if isinstance(outcome, ConfirmFailed) else "result": outcome.to_json()}


def process_task(request_json: dict[str, Any], cache: str | None = None, warm: bool = True,
                 driver_gpus: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The Ray task body of a timing process (`tuner.search.process_stage`): one fresh process on this
    node started with the request's runtime knobs, which this node resolves (an allocator to the
    system's own library here), from this worker's zygote of that environment when `warm`
    (`timing_spares`). Returns the ProcessTiming JSON; a cache folder this node cannot have is a
    CRASHED one."""
    request = ProcessRequest.from_json(request_json)
    request = replace(request, spec=with_assigned_gpus(request.spec, driver_gpus))
    try:
        env = node_env(request.spec, cache)
    except CacheFolderError as exc:
        return ProcessTiming.failed(request.label, Status.CRASHED, str(exc)).to_json()
    return time_isolated(request, env=env, spares=timing_spares() if warm else None).to_json()
