"""The driver's connection to Ray: a local cluster started for one run, or a cluster joined by address.

`connect` starts or joins with token authentication, quietly, from a neutral working
directory, and returns the `RaySession` whose `close` undoes it. Ray is imported lazily.
"""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from tuner.workers.placement import platform_resource


@dataclass
class RaySession:
    """What `connect` set up: whether it started the cluster (then `close` shuts it down), and
    the empty folder the driver connected from (removed by `close`)."""

    owns_cluster: bool
    driver_dir: str

    def close(self) -> None:
        import ray

        if self.owns_cluster and ray.is_initialized():
            ray.shutdown()
        shutil.rmtree(self.driver_dir, ignore_errors=True)   # workers skip a sys.path folder that is gone


def connect(address: str | None, *, platform_key: str | None, device: str, capacity: int) -> RaySession:
    """Join the cluster at `address` ("auto", "HOST:PORT"), or with None or "local" start one on
    this machine that advertises `platform_key` (default: this machine's for `device`), with
    dashboard on 127.0.0.1 and token authentication on, and at least `capacity` logical CPUs.
    For a CUDA `device` the local cluster has the GPUs torch sees (`local_gpus`), each trial's to hold.
    A local cluster refuses `RAY_AUTH_MODE=disabled` (UsageError, one line naming the risk), and
    its token file is made 0600 in a 0700 folder (`_private_token`)."""
    import ray

    quiet = {"logging_level": logging.WARNING, "log_to_driver": False}
    auth_log = logging.getLogger("ray._private.authentication.authentication_token_setup")
    previous = auth_log.level
    auth_log.setLevel(logging.ERROR)   # Ray's notice that auth is on ends with how to turn it off
    try:
        if address and address != "local":
            _token_auth_if_token_available()
            with _neutral_directory() as driver_dir:
                ray.init(address=address, **quiet)
            return RaySession(owns_cluster=False, driver_dir=driver_dir)
        if platform_key is None:
            from tuner.platform import current_platform
            platform_key = current_platform(device).key
        # "local" always starts a new cluster, even when RAY_ADDRESS is set. At least one
        # logical CPU per worker: Ray keeps that many idle worker processes warm rather
        # than killing and restarting them between trials.
        _refuse_disabled_auth()
        with _neutral_directory() as driver_dir, _private_token():
            ray.init(address="local", num_cpus=max(os.cpu_count() or 1, capacity), num_gpus=local_gpus(device),
                     resources={platform_resource(platform_key): 1.0},
                     include_dashboard=None, dashboard_host="127.0.0.1", **quiet)
        return RaySession(owns_cluster=True, driver_dir=driver_dir)
    finally:
        auth_log.setLevel(previous)


def local_gpus(device: str) -> int | None:
    """The GPUs a local cluster for `device` has: for CUDA, those torch sees in this process (after
    CUDA_VISIBLE_DEVICES), which the trials measure on; None (Ray's own count) otherwise. Ray counts
    GPUs through NVML, and where that finds none (no libnvidia-ml in a container) no trial, which
    holds a whole GPU, would ever start: the search would wait forever."""
    if not device.startswith("cuda"):
        return None
    import torch

    return torch.cuda.device_count()


def _refuse_disabled_auth() -> None:
    """A local cluster runs any code a client sends it, and Ray's GCS, raylet and worker ports
    listen on every interface (Ray 2.x has no option to bind them to loopback): without its token
    anyone who can reach this machine could run code as this user."""
    from tuner.errors import UsageError
    from tuner.settings import Settings

    if (Settings.from_env().ray_auth_mode or "").lower() == "disabled":
        raise UsageError("RAY_AUTH_MODE=disabled would start a Ray cluster without token authentication, whose "
                         "ports listen on every interface, so anyone who can reach this machine could run code "
                         "as you; unset RAY_AUTH_MODE (tuner starts its local cluster with a token)")


@contextlib.contextmanager
def _private_token() -> Iterator[None]:
    """Ray writes a new token to ~/.ray/auth_token with the process's umask (world-readable under
    the usual 022). Start the cluster under umask 077, with ~/.ray created 0700 first, then make
    the token file 0600 and its folder 0700 whatever made them (an older tuner, `ray
    get-auth-token --generate`). (The umask is process-wide: the cluster starts before any
    thread of the search.)"""
    folder = Path.home() / ".ray"
    folder.mkdir(mode=0o700, exist_ok=True)
    previous = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(previous)
        token = folder / "auth_token"
        if folder.is_dir() and not folder.is_symlink() and folder.stat().st_uid == os.getuid():
            folder.chmod(0o700)
        if token.is_file() and not token.is_symlink() and token.stat().st_uid == os.getuid():
            token.chmod(0o600)


@contextlib.contextmanager
def _neutral_directory() -> Iterator[str]:
    """Connect from a new, empty folder, not the caller's working directory.

    Ray puts the driver's working directory first on every worker's sys.path (the job's
    `py_driver_sys_path`, fixed when `ray.init` connects). Started in a source checkout, that is
    the repository root, whose `tuner/` folder (without the storage/workers subpackages) would
    shadow the installed package in every worker. The processes of a local cluster start in
    the folder, so it lives until `RaySession.close`. (The working directory is process-wide:
    build the executor before starting threads that open relative paths.)
    """
    driver_dir = tempfile.mkdtemp(prefix="tuner-ray-driver-")
    previous = os.getcwd()
    os.chdir(driver_dir)
    try:
        yield driver_dir
    except BaseException:
        shutil.rmtree(driver_dir, ignore_errors=True)
        raise
    finally:
        os.chdir(previous)


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
