"""Ray executor: each trial is a Ray task that runs `run_isolated` on a node of its platform.

The task still measures in a fresh, spawned process with a deadline (`run_isolated`);
Ray only chooses the node, carries the request there and the Measurement back.
Trials compile in parallel; timings never overlap on a node, because every trial process
takes that node's measure lock (`tuner/measure/node_lock.py`) around its timed section.

Faults become Measurements here, the Ray side of the measurement boundary:
- the Ray worker process dies (segfault, `os._exit`, OOM kill) -> CRASHED; Ray starts a
  new worker, and `max_retries=0` keeps Ray from measuring the trial a second time;
- the node is lost mid-trial -> CRASHED;
- no result within `timeout_s + grace_s` of the task starting -> cancelled by force and
  TIMEOUT (Ray never retries a force-cancelled task, so it is recorded here).

Each task streams two values: a "started" marker as soon as it runs (so a deadline counts
from the start, not from time spent queued behind other work) and then the Measurement.
Ray is imported lazily: only when an executor is built.
"""
from __future__ import annotations

import os
import socket
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator

from tuner.errors import UsageError
from tuner.trial import (ConfirmFailed, ConfirmRequest, ConfirmResult, MeasureSpec, Measurement, Status,
                         TrialRequest)
from tuner.workers.caches import search_cache_env
from tuner.workers.isolation import confirm_isolated, run_isolated
from tuner.workers.placement import platform_resource, trial_resources
from tuner.workers.spares import process_spares
from tuner.workers.ray_session import RaySession, connect

# What one trial reserves. Trials spend most of their time in a child process that
# compiles, or waiting for the measure lock, so a quarter CPU lets 8 trials share 2 cores;
# the measure lock, not Ray, keeps timings apart. On GPU platforms a trial holds a whole GPU.
TRIAL_CPUS = 0.25
DEFAULT_GRACE_S = 30.0       # beyond the trial's own deadline, before the driver cancels the task
UNPLACED_CHECK_S = 10.0      # how often to check that a queued trial's platform still has a node
TASK_NAME_PREFIX = "tuner-trial-"   # + trial number: the task's name, and its worker's process title


def measure_on_node(request: TrialRequest, *, cache: str | None = None, warm: bool = True) -> Measurement:
    """How a Ray task measures a trial by default: `run_isolated`, in a fresh trial process on its node
    (this Ray worker's spare when `warm` and its environment fits), its compile caches in `cache`."""
    return run_isolated(request, env=node_env(request.spec, cache), spares=process_spares() if warm else None)


def node_env(spec: MeasureSpec, cache: str | None) -> dict[str, str] | None:
    """`trial_env`, with the search's compile caches in `cache` on this node (None: Inductor's own)."""
    env = trial_env(spec)
    return env if cache is None else search_cache_env(cache, env)


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


def with_assigned_gpus(spec: MeasureSpec) -> MeasureSpec:
    """`spec` with the GPUs Ray assigned this task (`ray.get_gpu_ids()`), run inside the task: the
    trial process it starts sees only them (Ray's CUDA_VISIBLE_DEVICES), so the model file's
    `cuda:N` is mapped onto them there (`tuner.workload.normal_cuda`). Unchanged without GPUs."""
    import ray

    ids = tuple(str(i) for i in ray.get_gpu_ids())
    return replace(spec, gpu_ids=ids) if ids else spec


def _trial_task_for(measure: Callable[[TrialRequest], Measurement]) -> Callable[[dict[str, Any]], Iterator[dict]]:
    """The Ray task body, measuring with `measure`: report where it started, then yield the Measurement."""

    def trial_task(request_json: dict[str, Any]) -> Iterator[dict[str, Any]]:
        import ray

        node_id = ray.get_runtime_context().get_node_id()
        yield {"started": node_id}
        request = TrialRequest.from_json(request_json)
        measurement = measure(replace(request, spec=with_assigned_gpus(request.spec)))
        where = measurement.worker or f"{socket.gethostname()}:{os.getpid()}"
        yield replace(measurement, worker=f"ray:{node_id}/{where}").to_json()

    return trial_task


def _confirm_task(request_json: dict[str, Any], cache: str | None = None, warm: bool = True) -> dict[str, Any]:
    """The Ray task body of a confirmation: one fresh process on this node, like a trial.
    Returns {"result": ConfirmResult JSON} or {"failed": ConfirmFailed JSON}."""
    request = ConfirmRequest.from_json(request_json)
    request = replace(request, spec=with_assigned_gpus(request.spec))
    outcome = confirm_isolated(request, env=node_env(request.spec, cache), spares=process_spares() if warm else None)
    return {"failed" if isinstance(outcome, ConfirmFailed) else "result": outcome.to_json()}


@dataclass
class _Flight:
    """One trial handed to Ray, and what the driver knows of it."""

    request: TrialRequest
    dispatched_at: float
    started_at: float | None = None
    node_id: str | None = None

    @property
    def where(self) -> str | None:
        return f"ray:{self.node_id}" if self.node_id else None


class RayExecutor:
    """Runs trials as Ray tasks, at most `capacity` at once, on nodes of each trial's platform.

    With `address` (e.g. "auto" or "HOST:6379") it joins that cluster; without, it starts
    a local cluster for this run (dashboard on 127.0.0.1, token authentication on) that
    advertises this machine's platform, and `close` shuts it down. In a process where Ray
    is already initialised it uses that connection and leaves it open.
    """

    def __init__(self, *, workers: int = 1, address: str | None = None, platform_key: str | None = None,
                 device: str = "cpu", grace_s: float = DEFAULT_GRACE_S,
                 measure: Callable[[TrialRequest], Measurement] | None = None, warm: bool = True):
        """`platform_key`: the platform a local cluster advertises (default: this machine's for
        `device`). `device`: "cuda..." makes every trial hold one whole GPU. `grace_s`: how long
        past a trial's `timeout_s` the driver waits before it cancels the task itself.
        `measure`: what a Ray task runs for each trial (default `measure_on_node`, a trial
        process); tests and benches pass stand-ins, which Ray workers must be able to unpickle.
        `warm` (default): each Ray worker process keeps a zygote and a spare trial
        process forked from it (`workers/spares.py`).
        The trials share a compile cache folder (`workers/caches.py`), made here and on each node
        at this path; `close` removes this machine's. `get_executor` checks `workers`."""
        import functools
        import tempfile

        import ray

        self.capacity = workers
        self.grace_s = grace_s
        self._ray = ray
        self._num_gpus = 1 if device.startswith("cuda") else 0
        self._queue: deque[TrialRequest] = deque()
        self._running: dict[Any, _Flight] = {}             # ObjectRefGenerator -> flight
        self._finished: deque[tuple[TrialRequest, Measurement]] = deque()
        self._known_platforms: set[str] = set()
        self._platforms_read_at = 0.0
        self._session: RaySession | None = None      # set when this executor connected
        if not ray.is_initialized():
            self._session = _connect_keeping_sigterm(address, platform_key=platform_key, device=device,
                                                     capacity=workers)
        self._local_only = self._session is not None and self._session.owns_cluster
        self._cache, self._warm = tempfile.mkdtemp(prefix="tuner-cache-"), warm
        measure = measure or functools.partial(measure_on_node, cache=self._cache, warm=warm)
        self._task = ray.remote(_trial_task_for(measure))
        self._refresh_platforms()

    # -- the Executor protocol -------------------------------------------------------

    def submit(self, request: TrialRequest) -> None:
        """Queue one trial; it starts as soon as fewer than `capacity` are in flight.

        Raises UsageError when the request's platform has no node in a joined cluster.
        """
        self._placement(request)
        self._queue.append(request)
        self._fill()

    def next_result(self) -> tuple[TrialRequest, Measurement]:
        """Block until one trial finishes; failures, timeouts and lost nodes are Measurements."""
        while not self._finished:
            if not self._running:
                raise LookupError("no trial is pending")
            self._wait_once()
            self._fill()
        return self._finished.popleft()

    def pending(self) -> int:
        return len(self._queue) + len(self._running) + len(self._finished)

    def cancel(self) -> None:
        """Force-cancel every running trial task and drop the queued and finished ones.

        Ray kills the worker process of a force-cancelled task, and the trial process it
        started dies with it (it asked Linux for SIGKILL when its parent dies).
        """
        for generator in list(self._running):
            self._ray.cancel(generator, force=True)
        self._running.clear()
        self._queue.clear()
        self._finished.clear()

    def close(self) -> None:
        """Cancel what is still running, and shut down the local cluster if this executor started it."""
        import shutil

        self.cancel()
        if self._session is not None:
            self._session.close()
            self._session = None
        shutil.rmtree(self._cache, ignore_errors=True)

    # -- beyond the protocol ---------------------------------------------------------

    def run_confirmation(self, request: ConfirmRequest) -> ConfirmResult | ConfirmFailed:
        """Run the confirmation as one Ray task on a node of `request.platform_key` (blocking)."""
        ray = self._ray
        probe = TrialRequest(spec=request.spec, params=())
        task = ray.remote(_confirm_task).options(num_cpus=TRIAL_CPUS, num_gpus=self._num_gpus,
                                                 resources=self._placement(probe), max_retries=0)
        ref = task.remote(request.to_json(), self._cache, self._warm)
        try:
            data = ray.get(ref, timeout=request.timeout_s + self.grace_s)
        except KeyboardInterrupt:        # the search was interrupted: stop the task, on any cluster
            ray.cancel(ref, force=True)
            raise
        except ray.exceptions.GetTimeoutError:
            ray.cancel(ref, force=True)
            return ConfirmFailed(Status.TIMEOUT,
                                 f"timeout: no confirmation within {request.timeout_s:g} s; the task was cancelled")
        except ray.exceptions.RayError as exc:
            return ConfirmFailed(Status.CRASHED, f"the confirmation task failed: {_ray_failure(exc)}")
        if "failed" in data:
            return ConfirmFailed.from_json(data["failed"])
        return ConfirmResult.from_json(data["result"])

    def platforms(self) -> dict[str, int]:
        """Platform key -> alive nodes advertising it, in the connected cluster."""
        from tuner.workers.placement import cluster_platforms

        return cluster_platforms()

    # -- internals -------------------------------------------------------------------

    def _placement(self, request: TrialRequest) -> dict[str, float]:
        key = request.platform_key
        if key is None:
            return {}
        if key not in self._known_platforms:
            self._refresh_platforms(max_age_s=1.0)
        if key in self._known_platforms:
            return trial_resources(key)
        if self._local_only:
            return {}     # our own one-node cluster: this machine is the only place to run
        present = ", ".join(sorted(self._known_platforms)) or "none"
        raise UsageError(
            f"no node of the Ray cluster advertises platform {key} (resource {platform_resource(key)}); "
            f"platforms present: {present}. Start a node on that hardware with: "
            f"ray start --address ADDRESS --resources \"$(python -m tuner.workers.placement)\"")

    def _refresh_platforms(self, *, max_age_s: float = 0.0) -> None:
        """Re-read which platforms the cluster's alive nodes advertise, if older than `max_age_s`."""
        from tuner.workers.placement import platforms_in

        if self._platforms_read_at and time.monotonic() - self._platforms_read_at < max_age_s:
            return
        self._known_platforms = set(platforms_in([self._ray.cluster_resources()]))
        self._platforms_read_at = time.monotonic()

    def _fill(self) -> None:
        while self._queue and len(self._running) < self.capacity:
            request = self._queue.popleft()
            try:
                resources = self._placement(request)
            except UsageError as exc:     # its platform's nodes left after it was submitted
                self._finished.append((request, Measurement.failed(Status.CRASHED, str(exc))))
                continue
            task = self._task.options(
                num_cpus=TRIAL_CPUS, num_gpus=self._num_gpus, resources=resources,
                max_retries=0, num_returns="streaming", scheduling_strategy="SPREAD",
                name=f"{TASK_NAME_PREFIX}{request.number}")
            self._running[task.remote(request.to_json())] = _Flight(request, time.monotonic())

    def _wait_once(self) -> None:
        waiting = list(self._running)
        ready, _ = self._ray.wait(waiting, num_returns=1, timeout=self._wait_timeout())
        if ready and len(waiting) > 1:   # take every value already there: fewer wake-ups per trial
            ready, _ = self._ray.wait(waiting, num_returns=len(waiting), timeout=0)
        for generator in ready:
            self._collect(generator)
        self._enforce_deadlines()

    def _wait_timeout(self) -> float | None:
        now = time.monotonic()
        deadlines = [f.started_at + f.request.timeout_s + self.grace_s - now
                     for f in self._running.values() if f.started_at is not None]
        if any(f.started_at is None for f in self._running.values()):
            deadlines.append(UNPLACED_CHECK_S)
        return max(0.0, min(deadlines)) if deadlines else None

    def _collect(self, generator: Any) -> None:
        """Take the next value a ready task streamed: its start marker, or its Measurement."""
        flight = self._running[generator]
        ray = self._ray
        try:
            value = ray.get(next(generator))
        except ray.exceptions.RayError as exc:   # the Ray side of the measurement boundary
            self._finish(generator, Measurement.failed(Status.CRASHED, _ray_failure(exc), flight.where))
            return
        if "started" in value:
            flight.started_at, flight.node_id = time.monotonic(), value["started"]
            return
        self._finish(generator, Measurement.from_json(value))

    def _enforce_deadlines(self) -> None:
        now = time.monotonic()
        for generator, flight in list(self._running.items()):
            if flight.started_at is not None:
                limit = flight.request.timeout_s + self.grace_s
                if now - flight.started_at > limit:
                    self._ray.cancel(generator, force=True)
                    self._finish(generator, Measurement.failed(
                        Status.TIMEOUT, f"timeout: no result within {limit:g} s of the trial starting "
                                        f"(timeout {flight.request.timeout_s:g} s + grace {self.grace_s:g} s); "
                                        f"the Ray task was cancelled by force", flight.where))
            elif now - flight.dispatched_at > UNPLACED_CHECK_S and self._unplaceable(flight.request):
                self._ray.cancel(generator, force=True)
                self._finish(generator, Measurement.failed(
                    Status.CRASHED, f"no alive node of the Ray cluster advertises platform "
                                    f"{flight.request.platform_key} any more; the queued trial was cancelled"))

    def _unplaceable(self, request: TrialRequest) -> bool:
        if request.platform_key is None or self._local_only:
            return False
        self._refresh_platforms(max_age_s=1.0)
        return request.platform_key not in self._known_platforms

    def _finish(self, generator: Any, measurement: Measurement) -> None:
        flight = self._running.pop(generator)
        self._finished.append((flight.request, measurement))


def _connect_keeping_sigterm(address: str | None, **options: Any) -> RaySession:
    """`connect`, keeping the caller's own SIGTERM handler: `ray.init` replaces it with one
    that exits at once, and the CLI's turns SIGTERM into KeyboardInterrupt, so that the
    search records what it cancelled and closes this executor (which shuts the cluster down).
    A default or ignored handler is left as Ray sets it."""
    import signal
    import threading

    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main else None
    session = connect(address, **options)
    if callable(previous):
        signal.signal(signal.SIGTERM, previous)
    return session


def _ray_failure(exc: BaseException) -> str:
    """Why a Ray task failed, in the words a user needs: headline first, then Ray's text."""
    from ray import exceptions as ray_exceptions

    kinds = (
        (ray_exceptions.OutOfMemoryError, "the Ray worker running the trial was killed for memory (OOM)"),
        (ray_exceptions.WorkerCrashedError, "the Ray worker running the trial died (segfault, os._exit or OOM kill)"),
        (ray_exceptions.NodeDiedError, "the Ray node running the trial was lost"),
        (ray_exceptions.ObjectLostError, "the trial's result was lost with its Ray node"),
        (ray_exceptions.TaskCancelledError, "the trial's Ray task was cancelled outside the tuner"),
        (ray_exceptions.RayTaskError, "the trial's Ray task raised"),
    )
    headline = next((text for cls, text in kinds if isinstance(exc, cls)), "the trial's Ray task failed")
    return f"{headline}: {type(exc).__name__}\n{str(exc).strip()}"
