"""Which schema revisions this tuner ships: the migration scripts, found without a database.

Kept apart from `migrate` (which runs migrations and reads databases) so that `schema`, which
every `Store.open` runs, can name known revisions without a cycle; alembic loads only when a
function here is called.
"""
from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from tuner.errors import StorageError

if TYPE_CHECKING:
    from alembic.script import ScriptDirectory

__all__ = ["head_revision", "known_revisions", "script_location", "scripts"]


def script_location() -> Path:
    """The folder holding `env.py` and `versions/`.

    From a wheel this is the installed `tuner.migrations` package. Under an editable install
    setuptools cannot resolve a namespace package nested in a regular one
    (pypa/setuptools#4943), so the source tree's `alembic/` folder, beside `storage/`, is used.
    """
    spec = importlib.util.find_spec("tuner.migrations")
    candidates = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    candidates.append(Path(__file__).resolve().parent.parent / "alembic")
    for folder in candidates:
        if (folder / "env.py").is_file() and (folder / "versions").is_dir():
            return folder
    raise StorageError("tuner's migrations (package tuner.migrations) are missing from this "
                       "install; reinstall tuner from its checkout: pip install --force-reinstall .")


@lru_cache(maxsize=1)
def scripts() -> "ScriptDirectory":
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(script_location()))


def head_revision() -> str:
    """The schema revision this tuner writes and reads (for example `0001_initial`)."""
    head = scripts().get_current_head()
    if head is None:
        raise StorageError("tuner's migrations have no revisions; reinstall tuner: "
                           "pip install --force-reinstall . (in the tuner checkout)")
    return head


def known_revisions() -> list[str]:
    """Every revision this tuner ships, oldest first."""
    return [script.revision for script in reversed(list(scripts().walk_revisions()))]
