"""Token authentication of the Ray cluster a search starts: a client without the token is
refused, a client with it joins (docs/ray.md, "Security").

The cluster is started exactly as `tuner search` starts it (`RayExecutor()` with no address),
in its own process with a HOME of its own and no token anywhere, so Ray generates one into
that HOME's `~/.ray/auth_token`, as it would for a user. Clients are separate processes.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

pytestmark = pytest.mark.ray

SERVER = """
import sys
import ray
from tuner.workers.ray_pool import RayExecutor
executor = RayExecutor(workers=1)
print(ray.get_runtime_context().gcs_address, flush=True)
sys.stdin.readline()          # the test closes stdin to stop the cluster
executor.close()
"""
RAW_CLIENT = """
import sys
import ray
try:
    ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
    print("JOINED", ray.get(ray.remote(lambda: 41 + 1).remote()))
except ConnectionError as exc:
    print("REFUSED", exc)
"""
TUNER_CLIENT = """
import sys
from tuner.workers.ray_pool import RayExecutor
executor = RayExecutor(workers=1, address=sys.argv[1])
print("JOINED", len(executor.platforms() or {}))
"""


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "TUNER_"))}
    env.update(HOME=str(home), **extra)
    return env


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[str, Path]]:
    """(GCS address, the HOME whose ~/.ray/auth_token the cluster was started with)."""
    root = Path(tempfile.mkdtemp(prefix="tuner-auth-", dir="/tmp"))   # short: Ray's socket paths
    home = root / "home"
    home.mkdir()
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True,
                              env=_env(home, RAY_TMPDIR=str(root / "ray")), cwd=root)
    try:
        address = server.stdout.readline().strip()
        assert address, "the cluster did not start"
        yield address, home
    finally:
        server.stdin.close()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(root, ignore_errors=True)


def _client(code: str, address: str, env: dict[str, str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, address], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=env, cwd=cwd)


def _answer(proc: subprocess.Popen) -> str:
    out, _ = proc.communicate(timeout=120)
    return out.strip().splitlines()[-1] if out.strip() else f"no output, exit {proc.returncode}"


def test_token_auth_is_on_and_only_clients_with_the_token_join(cluster: tuple[str, Path], tmp_path: Path) -> None:
    address, home = cluster
    token_file = home / ".ray" / "auth_token"
    assert token_file.is_file() and token_file.stat().st_size >= 32   # Ray generated it for the user
    stranger_home = tmp_path / "stranger"
    stranger_home.mkdir()
    token = token_file.read_text().strip()
    # Started together: a refused join takes Ray about 20 s of retries.
    procs = {
        "no token": _client(RAW_CLIENT, address, _env(stranger_home), tmp_path),
        "wrong token": _client(RAW_CLIENT, address, _env(stranger_home, RAY_AUTH_MODE="token",
                                                         RAY_AUTH_TOKEN="0" * len(token)), tmp_path),
        "token in env": _client(RAW_CLIENT, address, _env(stranger_home, RAY_AUTH_MODE="token",
                                                          RAY_AUTH_TOKEN=token), tmp_path),
        # tuner itself joining by address finds ~/.ray/auth_token without RAY_AUTH_MODE
        "tuner, token file": _client(TUNER_CLIENT, address, _env(home), tmp_path),
    }
    answers = {name: _answer(proc) for name, proc in procs.items()}
    assert answers["no token"].startswith("REFUSED"), answers
    assert answers["wrong token"].startswith("REFUSED"), answers
    assert answers["token in env"] == "JOINED 42", answers
    assert answers["tuner, token file"].startswith("JOINED"), answers
    assert token not in "".join(answers.values())
