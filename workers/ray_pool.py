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
What the tasks run on their nodes is `workers/ray_tasks.py`. A trial or a search that no alive
node of a joined cluster can run (its platform absent; for a CUDA search, no GPU among those
nodes) fails fast with a UsageError naming the fix (`tuner.workers.placement.why_unplaceable`).
Ray is imported lazily: only when an executor is built.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from tuner.errors import UsageError
from tuner.settings import Settings
from tuner.trial import (ConfirmFailed, ConfirmRequest, ConfirmResult, Measurement, ProcessRequest, ProcessTiming, Status,
                         TrialRequest)
from tuner.workers.caches import new_cache_name, remove_node_cache, user_cache_folder
from tuner.workers.placement import platforms_in, trial_resources, why_unplaceable
from tuner.workers.ray_session import RaySession, connect
from tuner.workers.ray_tasks import confirm_task, measure_on_node, process_task, trial_task_for

# What one trial reserves. Trials spend most of their time in a child process that
# compiles, or waiting for the measure lock, so a quarter CPU lets 8 trials share 2 cores;
# the measure lock, not Ray, keeps timings apart. On GPU platforms a trial holds a whole GPU.
TRIAL_CPUS = 0.25
DEFAULT_GRACE_S = 30.0       # beyond the trial's own deadline, before the driver cancels the task
UNPLACED_CHECK_S = 10.0      # how often to check that a queued trial's platform still has a node
CLEANUP_S = 10.0             # at close, how long to wait for the nodes to remove the search's cache folder
TASK_NAME_PREFIX = "tuner-trial-"   # + trial number: the task's name, and its worker's process title


def visible_gpus(settings: Settings | None = None) -> tuple[str, ...] | None:
    """The GPUs this process's torch sees as cuda:0, cuda:1, ...: its CUDA_VISIBLE_DEVICES entries,
    as Ray reads them (node GPU ids or UUIDs); None where it is unset (every GPU, in order)."""
    listed = (settings or Settings.from_env()).cuda_visible_devices
    empty = listed in ("", "NoDevFiles")
    return None if listed is None else () if empty else tuple(item.strip() for item in listed.split(","))


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
        The trials share a compile cache folder (`workers/caches.py`): unless the user named one, each
        node makes it, private, under its own temporary folder, named after this search; `close`
        removes it from every alive node. `get_executor` checks `workers`."""
        import functools

        import ray

        self.capacity = workers
        self.grace_s = grace_s
        self._ray = ray
        self._num_gpus = 1 if device.startswith("cuda") else 0
        self._queue: deque[TrialRequest] = deque()
        self._running: dict[Any, _Flight] = {}             # ObjectRefGenerator -> flight
        self._finished: deque[tuple[TrialRequest, Measurement]] = deque()
        self._nodes: list[dict[str, float]] = []         # the alive nodes' resources
        self._nodes_read_at = 0.0
        self._session: RaySession | None = None      # set when this executor connected
        if not ray.is_initialized():
            self._session = _connect_keeping_sigterm(address, platform_key=platform_key, device=device,
                                                     capacity=workers)
        self._local_only = self._session is not None and self._session.owns_cluster
        # Decided here, where torch is imported, and shipped: Ray tasks never ask torch (workers/caches.py).
        self._cache = None if user_cache_folder() else new_cache_name()
        self._warm, self._driver_gpus = warm, visible_gpus()
        measure = measure or functools.partial(measure_on_node, cache=self._cache, warm=warm)
        self._task = ray.remote(trial_task_for(measure, self._driver_gpus))
        self._refresh_nodes()

    # -- the Executor protocol -------------------------------------------------------

    def submit(self, request: TrialRequest) -> None:
        """Queue one trial; it starts as soon as fewer than `capacity` are in flight.

        Raises UsageError when no alive node of a joined cluster can run it: none of its platform,
        or, for a CUDA search, none of them with a GPU.
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
        """Cancel what is still running, remove the search's cache folder from the nodes (`_remove_caches`),
        and shut down the local cluster if this executor started it."""
        self.cancel()
        if self._cache is not None:
            self._remove_caches()
        if self._session is not None:
            self._session.close()
            self._session = None

    # -- beyond the protocol ---------------------------------------------------------

    def run_confirmation(self, request: ConfirmRequest) -> ConfirmResult | ConfirmFailed:
        """Run the confirmation as one Ray task on a node of `request.platform_key` (blocking)."""
        data = self._blocking(confirm_task, request.to_json(), TrialRequest(spec=request.spec, params=()),
                              request.timeout_s, what="confirmation")
        if isinstance(data, str):
            status = Status.TIMEOUT if data.startswith("timeout") else Status.CRASHED
            return ConfirmFailed(status, data)
        if "failed" in data:
            return ConfirmFailed.from_json(data["failed"])
        return ConfirmResult.from_json(data["result"])

    def run_process(self, request: ProcessRequest) -> ProcessTiming:
        """A timing process of the process stage as one Ray task on a node of its platform (blocking):
        the node starts it with the request's runtime knobs, resolved there (`ray_tasks.process_task`)."""
        data = self._blocking(process_task, request.to_json(), TrialRequest(spec=request.spec, params=()),
                              request.timeout_s, what="timing process")
        if isinstance(data, str):
            return ProcessTiming.failed(request.label, Status.TIMEOUT if data.startswith("timeout") else Status.CRASHED,
                                        data)
        return ProcessTiming.from_json(data)

    def _blocking(self, body: Callable[..., Any], payload: dict[str, Any], probe: TrialRequest, timeout_s: float, *,
                  what: str) -> dict[str, Any] | str:
        """Run `body(payload, cache, warm, driver_gpus)` as one Ray task placed as `probe` would be, and
        wait for it: its value, or one line saying why there is none (starting "timeout" for a deadline)."""
        ray = self._ray
        task = ray.remote(body).options(num_cpus=TRIAL_CPUS, num_gpus=self._num_gpus,
                                        resources=self._placement(probe), max_retries=0)
        ref = task.remote(payload, self._cache, self._warm, self._driver_gpus)
        try:
            return ray.get(ref, timeout=timeout_s + self.grace_s)
        except KeyboardInterrupt:        # the search was interrupted: stop the task, on any cluster
            ray.cancel(ref, force=True)
            raise
        except ray.exceptions.GetTimeoutError:
            ray.cancel(ref, force=True)
            return f"timeout: no {what} within {timeout_s:g} s; the task was cancelled"
        except ray.exceptions.RayError as exc:
            return f"the {what} task failed: {_ray_failure(exc)}"

    def platforms(self) -> dict[str, int]:
        """Platform key -> alive nodes advertising it, in the connected cluster."""
        from tuner.workers.placement import cluster_platforms

        return cluster_platforms()

    # -- internals -------------------------------------------------------------------

    def _placement(self, request: TrialRequest) -> dict[str, float]:
        """The custom resources a task of `request` asks for; UsageError, naming the fix, where no alive
        node of a joined cluster can run it (`_why_unplaceable`)."""
        key = request.platform_key
        if self._local_only:     # our own one-node cluster: this machine is the only place to run
            if key is not None and key not in platforms_in(self._nodes):
                self._refresh_nodes(max_age_s=1.0)
            return trial_resources(key) if key is not None and key in platforms_in(self._nodes) else {}
        problem = self._why_unplaceable(key)
        if problem is not None:
            raise UsageError(problem)
        return {} if key is None else trial_resources(key)

    def _why_unplaceable(self, key: str | None, *, fresh: bool = False) -> str | None:
        """`why_unplaceable` for platform `key` on the alive nodes; asks the cluster again (at most once a
        second) before it finds a problem, or first when `fresh`."""
        if fresh:
            self._refresh_nodes(max_age_s=1.0)
        problem = why_unplaceable(self._nodes, key, gpu=self._num_gpus > 0)
        if problem is not None and not fresh:
            self._refresh_nodes(max_age_s=1.0)
            problem = why_unplaceable(self._nodes, key, gpu=self._num_gpus > 0)
        return problem

    def _refresh_nodes(self, *, max_age_s: float = 0.0) -> None:
        """Re-read the resources of the cluster's alive nodes, if older than `max_age_s`."""
        if self._nodes_read_at and time.monotonic() - self._nodes_read_at < max_age_s:
            return
        self._nodes = [dict(node["Resources"]) for node in self._ray.nodes() if node.get("Alive")]
        self._nodes_read_at = time.monotonic()

    def _remove_caches(self) -> None:
        """Remove the search's cache folder from every alive node (a task pinned to each: a joined
        cluster's nodes may be other machines) and from this machine; our own cluster's one node is
        this machine, its processes started with this environment. Best effort: a node that has not
        answered within CLEANUP_S keeps its folder (workers/caches.py says what is left where)."""
        ray = self._ray
        if not self._local_only and ray.is_initialized():
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            remove = ray.remote(remove_node_cache)
            refs = [remove.options(num_cpus=0, max_retries=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
                node["NodeID"], soft=False)).remote(self._cache) for node in ray.nodes() if node.get("Alive")]
            if refs:
                _, late = ray.wait(refs, num_returns=len(refs), timeout=CLEANUP_S)
                for ref in late:
                    ray.cancel(ref)
        remove_node_cache(self._cache)

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
            elif now - flight.dispatched_at > UNPLACED_CHECK_S and not self._local_only and (
                    problem := self._why_unplaceable(flight.request.platform_key, fresh=True)):
                self._ray.cancel(generator, force=True)
                self._finish(generator, Measurement.failed(
                    Status.CRASHED, f"the queued trial was cancelled, as no alive node can run it any more: {problem}"))

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
