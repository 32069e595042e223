"""The compile cache a search's trials share (workers/caches.py): a candidate's config is part of
Inductor's cache key, so one config's artifact is never served to another."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
    from tuner.workers.caches import search_cache_env

    mine = {INDUCTOR_CACHE: str(tmp_path / "mine"), "OTHER": "1"}
    assert search_cache_env(str(tmp_path / "search"), mine) == mine
    env = search_cache_env(str(tmp_path / "search"), {"OTHER": "1"})
    assert env[INDUCTOR_CACHE].startswith(str(tmp_path / "search")) and env["OTHER"] == "1"


def test_inductors_default_folder_which_torch_sets_by_itself_is_not_the_users_choice(tmp_path: Path) -> None:
    """Once a process has used Inductor's cache, torch has written its default folder into
    TORCHINDUCTOR_CACHE_DIR (cache_dir_utils.cache_dir); a search started there still gives its
    trials a folder of its own (every CLI search shared the default folder before)."""
    import os

    from tuner.workers.caches import inductor_default_folder, search_cache_env

    script = "import os\nfrom torch._inductor.runtime.cache_dir_utils import cache_dir\ncache_dir()\n" \
             "print(os.environ['TORCHINDUCTOR_CACHE_DIR'])"
    unset = {k: v for k, v in os.environ.items() if k != INDUCTOR_CACHE}
    set_by_torch = subprocess.run([sys.executable, "-c", script], env=unset, capture_output=True, text=True,
                                  check=True).stdout.strip()
    assert set_by_torch == os.path.abspath(inductor_default_folder())
    env = search_cache_env(str(tmp_path / "search"), {INDUCTOR_CACHE: set_by_torch})
    assert env[INDUCTOR_CACHE].startswith(str(tmp_path / "search"))
