"""The compile cache a search's trials share (workers/caches.py): a candidate's config is part of
Inductor's cache key, so one config's artifact is never served to another."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tuner.workers.caches import INDUCTOR_CACHE, TRITON_CACHE, cache_env

# Run in a fresh process whose environment points Inductor at the shared folder, as a trial's does.
COMPILE_THREE = """
import json, torch
from torch._dynamo.utils import counters
from torch._inductor.utils import run_and_get_code
from tuner.inductor import compile_config, compile_model

def compiled(params):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU())
    hits, misses = counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"]
    with torch.no_grad():
        out, code = run_and_get_code(compile_model(model, compile_config(params)), torch.randn(4, 16))
    return {"code": "".join(code), "out": out.tolist(), "hit": counters["inductor"]["fxgraph_cache_hit"] - hits,
            "miss": counters["inductor"]["fxgraph_cache_miss"] - misses}

print(json.dumps([compiled({}), compiled({"cpp.simdlen": 128}), compiled({})]))
"""


def test_two_configs_in_one_cache_folder_get_their_own_artifacts(tmp_path: Path) -> None:
    env = cache_env(str(tmp_path / "cache"))
    assert Path(env[INDUCTOR_CACHE]).is_dir() and Path(env[TRITON_CACHE]).is_dir()
    done = subprocess.run([sys.executable, "-c", COMPILE_THREE], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    default, narrow, again = json.loads(done.stdout.splitlines()[-1])
    assert (default["hit"], default["miss"]) == (0, 1)
    assert (narrow["hit"], narrow["miss"]) == (0, 1)        # not served the defaults' artifact
    assert narrow["code"] != default["code"]                 # 128-bit vectors: other generated code
    assert (again["hit"], again["miss"]) == (1, 0) and again["code"] == default["code"]
    assert any(Path(env[INDUCTOR_CACHE]).rglob("*.py"))      # the artifacts went to the shared folder


def test_a_cache_folder_the_user_named_is_the_one_trials_use(tmp_path: Path) -> None:
    """TORCHINDUCTOR_CACHE_DIR in the search's environment is kept; without it the search's own folder."""
    from tuner.workers.caches import search_cache_env, user_cache_folder

    mine = {INDUCTOR_CACHE: str(tmp_path / "mine"), "OTHER": "1"}
    assert user_cache_folder(mine) == mine[INDUCTOR_CACHE] and user_cache_folder({"OTHER": "1"}) is None
    assert search_cache_env(None, mine) == mine
    env = search_cache_env(str(tmp_path / "search"), {"OTHER": "1"})
    assert env[INDUCTOR_CACHE].startswith(str(tmp_path / "search")) and env["OTHER"] == "1"


def test_inductors_default_folder_which_torch_sets_by_itself_is_not_the_users_choice(tmp_path: Path) -> None:
    """Once a process has used Inductor's cache, torch has written its default folder into
    TORCHINDUCTOR_CACHE_DIR (cache_dir_utils.cache_dir); a search started there still gives its
    trials a folder of its own (every CLI search shared the default folder before)."""
    import os

    from tuner.workers.caches import inductor_default_folder, user_cache_folder

    script = "import os\nfrom torch._inductor.runtime.cache_dir_utils import cache_dir\ncache_dir()\n" \
             "print(os.environ['TORCHINDUCTOR_CACHE_DIR'])"
    unset = {k: v for k, v in os.environ.items() if k != INDUCTOR_CACHE}
    set_by_torch = subprocess.run([sys.executable, "-c", script], env=unset, capture_output=True, text=True,
                                  check=True).stdout.strip()
    assert set_by_torch == os.path.abspath(inductor_default_folder())
    assert user_cache_folder({INDUCTOR_CACHE: set_by_torch}) is None


# Run in a fresh interpreter, as a Ray worker is: what a task does for its trial's environment.
NODE_SIDE = """
import json, os, sys, tempfile
tempfile.tempdir = sys.argv[1]                      # this node's temporary folder
os.environ["OMP_NUM_THREADS"] = "1"                 # as Ray sets it in a task
os.environ["TORCHINDUCTOR_CACHE_DIR"] = sys.argv[2] # as a worker inherits it from a driver that used Inductor's cache
from tuner.trial import MeasureSpec
from tuner.workers.caches import search_cache_env
search_cache_env(os.path.join(sys.argv[1], "local"), dict(os.environ))
assert "torch" not in sys.modules, "search_cache_env imported torch"
from tuner.workers.ray_tasks import node_env
env = node_env(MeasureSpec("m.py"), "tuner-cache-0123456789abcdef")
assert "torch" not in sys.modules, "node_env imported torch"
print(json.dumps(env))
"""


def test_a_ray_task_makes_its_trials_cache_folder_without_importing_torch(tmp_path: Path) -> None:
    """The driver decides whether the user named a folder (`user_cache_folder`, torch imported there);
    a Ray task only makes the search's folder, private, under its node's temporary folder: importing
    torch there would take CPU-seconds beside other trials' timed sections."""
    import os
    import stat

    from tuner.workers.caches import inductor_default_folder

    done = subprocess.run([sys.executable, "-c", NODE_SIDE, str(tmp_path), inductor_default_folder()],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    env = json.loads(done.stdout)
    folder = tmp_path / "tuner-cache-0123456789abcdef"
    assert (env[INDUCTOR_CACHE], env[TRITON_CACHE]) == (str(folder / "inductor"), str(folder / "triton"))
    assert "OMP_NUM_THREADS" not in env
    for path in (folder, folder / "inductor", folder / "triton"):
        info = os.lstat(path)
        assert stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == os.getuid()


def test_a_new_cache_folder_is_private_whatever_the_umask(tmp_path: Path) -> None:
    import os
    import stat

    previous = os.umask(0)
    try:
        env = cache_env(tmp_path / "cache")
    finally:
        os.umask(previous)
    for path in (tmp_path / "cache", Path(env[INDUCTOR_CACHE]), Path(env[TRITON_CACHE])):
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o700, path


def test_a_cache_folder_someone_made_first_is_refused(tmp_path: Path) -> None:
    """Trials load Python modules and shared objects from the cache: a folder others can write, a
    symlink (never followed) or a file where it should be is refused with one line naming the fix."""
    import os

    from tuner.errors import TunerError

    open_folder = tmp_path / "open"
    open_folder.mkdir()
    os.chmod(open_folder, 0o777)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(elsewhere)
    (tmp_path / "file").write_text("")
    inner = tmp_path / "inner"                   # a private folder whose inductor/ is a symlink
    inner.mkdir(mode=0o700)
    (inner / "inductor").symlink_to(elsewhere)
    for name, why in (("open", "is open to other users (mode 0777)"), ("link", "is a symlink"),
                      ("file", "is not a folder"), ("inner", "is a symlink")):
        with pytest.raises(TunerError, match=re.escape(why)) as refused:
            cache_env(tmp_path / name)
        assert "remove it" in str(refused.value) and "\n" not in str(refused.value), name
    assert not any(elsewhere.iterdir())           # nothing was made through the symlinks
