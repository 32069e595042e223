"""The compile caches a search's trials share, and nothing they must not share.

Each executor (one per search, or per `record-space` run) gives its trial processes, spares
included, an environment that points Inductor at one folder of the search's own:
`TORCHINDUCTOR_CACHE_DIR` (the FX graph cache, AOTAutograd's and the autotune results) and
`TRITON_CACHE_DIR` (compiled Triton kernels). The default compile that every trial pairs with is
then a cache hit after the first trial. A candidate's Inductor config is part of the FX graph
cache key, so one config's artifact is never served to another (tests/workers/test_caches.py).

The folder is private: made 0700 by this user, never through a symlink, and refused (`CacheFolderError`,
one line naming the fix) where something of that name exists that is a symlink, not a folder, not
this user's or open to others; so are its `inductor/` and `triton/` subfolders (`cache_env`). The
trials load Python modules and shared objects from it, so another user who made it first could
otherwise run code in them. A search starts from an empty cache, so its first trials measure real
compiles, no artifact of another torch or of another user's run can reach it, and nothing grows
without bound. A resumed search pays its first compiles again, the cost of that guarantee.

- The local executor makes it in its scratch folder (itself private) and removes it at `close`.
- Under Ray the driver ships a name (`new_cache_name`, random), and each node makes the folder
  under its own temporary folder (`node_cache_env`), where its trials need it first. The driver's
  `close` removes the folder on every node still alive (`remove_node_cache`, run there) and on its
  own machine. A node lost mid-search, or a driver killed outright, leaves its folder
  (`tuner-cache-*` in that node's temporary folder) until that folder is cleaned; remove such
  leftovers when no search of yours runs there.

Where the user named Inductor's cache folder (`TORCHINDUCTOR_CACHE_DIR` set in the environment
the search starts from), the trials use that folder instead: it is the user's choice, shared with
their own compiles and their other searches (a repeated search then starts from hits), and the
cache key still keeps configs apart. Inductor's own default folder does not count as named: torch
writes it into `os.environ` the first time a process uses Inductor's cache
(`cache_dir_utils.cache_dir`), so the driver's environment may hold it without the user having set
anything. Only the driver, which has torch imported, tells the two apart (`user_cache_folder`),
once per search; Ray tasks and the trial side get its answer and never import torch for this
(an import there takes CPU-seconds beside other trials' timed sections).
"""
from __future__ import annotations

import os
import secrets
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Mapping

from tuner.errors import TunerError

INDUCTOR_CACHE = "TORCHINDUCTOR_CACHE_DIR"
TRITON_CACHE = "TRITON_CACHE_DIR"
NODE_CACHE_PREFIX = "tuner-cache-"


class CacheFolderError(TunerError):
    """A search's cache folder cannot be made, or what is there is not a private folder of this user's."""


def cache_env(folder: str | os.PathLike[str], base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (None: this process's environment) with Inductor's and Triton's caches in `folder`,
    whose parent must exist. `folder`, `folder/inductor` and `folder/triton` are made 0700, or
    accepted where they already are private folders of this user's (`private_folder`)."""
    inductor, triton = Path(folder) / "inductor", Path(folder) / "triton"
    for path in (Path(folder), inductor, triton):
        private_folder(path)
    return {**(os.environ if base is None else base), INDUCTOR_CACHE: str(inductor), TRITON_CACHE: str(triton)}


def search_cache_env(folder: str | None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a search's trial processes: `cache_env(folder, base)`, or `base` (None: this
    process's environment) as it is where `folder` is None: the user named their own cache folder
    (the driver's decision, `user_cache_folder`). Never imports torch."""
    env = dict(os.environ if base is None else base)
    return env if folder is None else cache_env(folder, env)


def user_cache_folder(base: Mapping[str, str] | None = None) -> str | None:
    """The Inductor cache folder the user named in `base` (None: this process's environment): its
    TORCHINDUCTOR_CACHE_DIR, unless that is Inductor's own default, which torch sets by itself (the
    module docstring). None where the user named none. Asks torch: call it in the driver, once per
    search, and ship the answer; never in a Ray task or beside a timed section."""
    named = (os.environ if base is None else base).get(INDUCTOR_CACHE)
    default = inductor_default_folder() if named else None
    if named and (default is None or os.path.abspath(named) != os.path.abspath(default)):
        return named
    return None


def inductor_default_folder() -> str | None:
    """The folder Inductor caches in when TORCHINDUCTOR_CACHE_DIR is unset (torch's own
    `cache_dir_utils.default_cache_dir`); None where this torch does not have that function.
    Imports torch: for the driver only (`user_cache_folder`)."""
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:
        return None
    return default_cache_dir()


def new_cache_name() -> str:
    """A new search's cache folder name for its Ray nodes: random, so nobody can make it first."""
    return NODE_CACHE_PREFIX + secrets.token_hex(8)


def node_cache_env(name: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """On a Ray node: `cache_env` with the search's folder `name` under this node's temporary folder
    (`tempfile.gettempdir()`); CacheFolderError, one line, where it cannot be had."""
    return cache_env(node_cache_folder(name), base)


def node_cache_folder(name: str) -> Path:
    """Where the search's folder `name` lives on this node: under its temporary folder."""
    if not name.startswith(NODE_CACHE_PREFIX) or os.sep in name or name in (".", ".."):
        raise ValueError(f"not a search's cache folder name: {name!r}")
    return Path(tempfile.gettempdir()) / name


def remove_node_cache(name: str) -> None:
    """Remove the search's folder `name` from this node's temporary folder, if it is a folder of this
    user's (never a symlink or another user's); nothing if it is not there. Run on each node at close."""
    folder = node_cache_folder(name)
    try:
        info = os.lstat(folder)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid():
        shutil.rmtree(folder, ignore_errors=True)


def private_folder(path: Path) -> None:
    """Make `path` (its parent must exist) a folder only this user can use, mode 0700, or accept it
    where it already is one; CacheFolderError, one line, where it cannot be made, is a symlink (never
    followed), is not a folder, belongs to another user or is open to others."""
    try:
        os.mkdir(path, 0o700)
        made = True
    except FileExistsError:
        made = False
    except OSError as exc:
        raise CacheFolderError(f"cannot make the compile cache folder {path} ({exc.strerror}); "
                               f"set TMPDIR on this node to a folder you can write") from exc
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:    # ELOOP: a symlink; ENOTDIR: a file
        what = "is a symlink" if os.path.islink(path) else f"is not a folder ({exc.strerror})"
        raise _refused(path, what) from exc
    try:
        if made:                  # ours since this call: 0700 whatever the umask
            os.fchmod(fd, 0o700)
        info = os.fstat(fd)
    finally:
        os.close(fd)
    if info.st_uid != os.getuid():
        raise _refused(path, f"belongs to user {info.st_uid}")
    if info.st_mode & 0o077:
        raise _refused(path, f"is open to other users (mode {stat.S_IMODE(info.st_mode):04o})")


def _refused(path: Path, what: str) -> CacheFolderError:
    return CacheFolderError(
        f"compile cache folder {path} {what}, not a private folder of yours (uid {os.getuid()}, mode 0700), "
        f"so trials would load compiled code others could plant there; remove it, then run the search again")
