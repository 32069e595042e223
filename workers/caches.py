"""The compile caches a search's trials share, and nothing they must not share.

Each executor (one per search, or per `record-space` run) makes one cache folder and gives its
trial processes, spares included, an environment that points Inductor there:
`TORCHINDUCTOR_CACHE_DIR` (the FX graph cache, AOTAutograd's and the autotune results) and
`TRITON_CACHE_DIR` (compiled Triton kernels). The default compile that every trial pairs with is
then a cache hit after the first trial. A candidate's Inductor config is part of the FX graph
cache key, so one config's artifact is never served to another (tests/workers/test_caches.py).

The folder lives in the executor's scratch folder and goes with it at `close`: a search starts
from an empty cache, so its first trials measure real compiles, no artifact of another torch or
of another user's run can reach it, and nothing grows without bound. A resumed search pays its
first compiles again, the cost of that guarantee. A Ray node makes the folder under its own
temporary folder (`ray_cache_root`), named after the search; the driver's machine removes its own.

Where the user named Inductor's cache folder (`TORCHINDUCTOR_CACHE_DIR` set in the environment
the search starts from), the trials use that folder instead (`search_cache_env`): it is the
user's choice, shared with their own compiles and with their other searches (a resumed or
repeated search then starts from hits). The cache key still keeps configs apart. Inductor's own
default folder does not count as named: torch writes it into `os.environ` the first time a
process uses Inductor's cache (`cache_dir_utils.cache_dir`), so by the time an executor starts
the driver's environment may hold it without the user having set anything (seen: every search
of the CLI gave its trials the shared /tmp/torchinductor_USER, so a model's first search found
no hits and later ones found earlier searches' artifacts).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

INDUCTOR_CACHE = "TORCHINDUCTOR_CACHE_DIR"
TRITON_CACHE = "TRITON_CACHE_DIR"


def cache_env(folder: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (None: this process's environment) with Inductor's and Triton's caches in `folder`
    (made if missing)."""
    inductor, triton = Path(folder) / "inductor", Path(folder) / "triton"
    inductor.mkdir(parents=True, exist_ok=True)
    triton.mkdir(parents=True, exist_ok=True)
    return {**(os.environ if base is None else base), INDUCTOR_CACHE: str(inductor), TRITON_CACHE: str(triton)}


def search_cache_env(folder: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a search's trial processes: `cache_env(folder, base)`, or `base` (None: this
    process's environment) as it is where it already names an Inductor cache folder other than
    Inductor's default (which torch sets by itself: the module docstring)."""
    env = dict(os.environ if base is None else base)
    named, default = env.get(INDUCTOR_CACHE), inductor_default_folder()
    if named and (default is None or os.path.abspath(named) != os.path.abspath(default)):
        return env
    return cache_env(folder, env)


def inductor_default_folder() -> str | None:
    """The folder Inductor caches in when TORCHINDUCTOR_CACHE_DIR is unset (torch's own
    `cache_dir_utils.default_cache_dir`); None where this torch does not have that function."""
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:
        return None
    return default_cache_dir()
