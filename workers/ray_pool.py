"""Ray executor: each trial is a Ray task that runs `run_isolated` on a node of its platform.

The task still measures in a fresh, spawned process with a deadline (`run_isolated`);
Ray only chooses the node, carries the request there and the Measurement back.
Trials compile in parallel; timings never overlap on a node, because every trial process
takes that node's measure lock (`workers/lock.py`) around its timed section.

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

import contextlib
import logging
import os
import socket
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Any, Iterator

from tuner.errors import UsageError
from tuner.trial import Measurement, Status, TrialRequest
from tuner.workers.isolation import run_isolated
from tuner.workers.placement import platform_resource, trial_resources

# What one trial reserves. Trials spend most of their time in a child process that
# compiles, or waiting for the measure lock, so a quarter CPU lets 8 trials share 2 cores;
# the measure lock, not Ray, keeps timings apart. On GPU platforms a trial holds a whole GPU.
TRIAL_CPUS = 0.25
DEFAULT_GRACE_S = 30.0       # beyond the trial's own deadline, before the driver cancels the task
UNPLACED_CHECK_S = 10.0      # how often to check that a queued trial's platform still has a node
TASK_NAME_PREFIX = "tuner-trial-"   # + trial number: the task's name, and its worker's process title

# Test and bench job kinds, handled inside the Ray task (never by a trial process):
RAY_WORKER_EXIT = "ray_worker_exit"     # os._exit of the Ray worker itself
RAY_WORKER_HANG = "ray_worker_hang"     # the Ray worker hangs: only the driver's deadline ends it
BENCH_NOOP = "bench_noop"               # an OK Measurement at once, no trial process
BENCH_SLEEP = "bench_sleep:"            # "bench_sleep:0.5": sleep, then an OK Measurement


def _trial_task(request_json: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The Ray task body: report where it started, then run the trial and yield its Measurement."""
    import ray

    node_id = ray.get_runtime_context().get_node_id()
    yield {"started": node_id}
    request = TrialRequest.from_json(request_json)
    fault = request.fault or ""
    if fault == RAY_WORKER_EXIT:
        os._exit(17)
    if fault == RAY_WORKER_HANG:
        time.sleep(10**6)
    if fault == BENCH_NOOP or fault.startswith(BENCH_SLEEP):
        measurement = _bench_job(fault)
    else:
        with _torch_default_threads(request):
            measurement = run_isolated(request)
    where = measurement.worker or f"{socket.gethostname()}:{os.getpid()}"
    yield replace(measurement, worker=f"ray:{node_id}/{where}").to_json()


def _confirm_task(request_json: dict[str, Any], timeout_s: float) -> tuple[dict | None, str]:
    """The Ray task body of a confirmation: one fresh process on this node, like a trial."""
    from tuner.workers.isolation import run_job

    return run_job("confirm", request_json, timeout_s=timeout_s)


def _bench_job(fault: str) -> Measurement:
    """The bench's stand-in trials: framework cost only, no process, no CPU."""
    if fault.startswith(BENCH_SLEEP):
        time.sleep(float(fault[len(BENCH_SLEEP):]))
    return Measurement(status=Status.OK, latency_ms=0.0, spread_ms=0.0, compile_s=0.0, reps=0)


@contextlib.contextmanager
def _torch_default_threads(request: TrialRequest) -> Iterator[None]:
    """Ray sets OMP_NUM_THREADS=1 for tasks with under one CPU. The trial process would
    inherit it and measure single-threaded under a platform key for torch's default thread
    count, so unless the request fixes `threads`, the child does not see it."""
    saved = os.environ.pop("OMP_NUM_THREADS", None) if request.threads is None else None
    try:
        yield
    finally:
        if saved is not None:
            os.environ["OMP_NUM_THREADS"] = saved


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
                 device: str = "cpu", grace_s: float = DEFAULT_GRACE_S):
        """`platform_key`: the platform a local cluster advertises (default: this machine's for
        `device`). `device`: "cuda..." makes every trial hold one whole GPU. `grace_s`: how long
        past a trial's `timeout_s` the driver waits before it cancels the task itself."""
        if workers < 1:
            raise UsageError(f"--workers must be at least 1, got {workers}")
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
        self._owns_cluster = False
        self._local_only = False
        if not ray.is_initialized():
            self._connect(address, platform_key=platform_key, device=device)
        self._task = ray.remote(_trial_task)
        self._refresh_platforms()

    def _connect(self, address: str | None, *, platform_key: str | None, device: str) -> None:
        ray = self._ray
        quiet = {"logging_level": logging.WARNING, "log_to_driver": False}
        auth_log = logging.getLogger("ray._private.authentication.authentication_token_setup")
        previous = auth_log.level
        auth_log.setLevel(logging.ERROR)   # Ray's notice that auth is on ends with how to turn it off
        try:
            if address and address != "local":
                _token_auth_if_token_available()
                ray.init(address=address, **quiet)
            else:
                if platform_key is None:
                    from tuner.platform import current_platform
                    platform_key = current_platform(device).key
                # "local" always starts a new cluster, even when RAY_ADDRESS is set. At least one
                # logical CPU per worker: Ray keeps that many idle worker processes warm rather
                # than killing and restarting them between trials.
                ray.init(address="local", num_cpus=max(os.cpu_count() or 1, self.capacity),
                         resources={platform_resource(platform_key): 1.0},
                         include_dashboard=None, dashboard_host="127.0.0.1", **quiet)
                self._owns_cluster = self._local_only = True
        finally:
            auth_log.setLevel(previous)

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

    def close(self) -> None:
        """Cancel what is still running, and shut down the local cluster if this executor started it."""
        for generator in list(self._running):
            self._ray.cancel(generator, force=True)
        self._running.clear()
        self._queue.clear()
        self._finished.clear()
        if self._owns_cluster and self._ray.is_initialized():
            self._ray.shutdown()
        self._owns_cluster = False

    # -- beyond the protocol ---------------------------------------------------------

    def run_confirmation(self, request: Any) -> tuple[dict | None, str]:
        """Run the confirmation as one Ray task on a node of `request.platform_key` (blocking)."""
        ray = self._ray
        probe = TrialRequest(model_path=request.model_path, params=(), platform_key=request.platform_key)
        task = ray.remote(_confirm_task).options(num_cpus=TRIAL_CPUS, num_gpus=self._num_gpus,
                                                 resources=self._placement(probe), max_retries=0)
        ref = task.remote(request.to_json(), request.timeout_s)
        try:
            data, failure = ray.get(ref, timeout=request.timeout_s + self.grace_s)
        except ray.exceptions.GetTimeoutError:
            ray.cancel(ref, force=True)
            return None, f"timeout: no confirmation within {request.timeout_s:g} s; the task was cancelled"
        except ray.exceptions.RayError as exc:
            return None, f"the confirmation task failed: {_ray_failure(exc)}"
        return data, failure

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


def _token_auth_if_token_available() -> None:
    """Joining by explicit address, Ray turns token auth on only when RAY_AUTH_MODE says so;
    with "auto" it does when a token exists. Do the same for any address, so that a user with a
    token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token) joins an authenticated cluster
    without setting RAY_AUTH_MODE. An explicit RAY_AUTH_MODE is left as it is."""
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
        from ray._raylet import Config
    except ImportError:   # a Ray without token authentication
        return
    Config.initialize("")   # Ray read RAY_AUTH_* when it was imported; read them again now
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
