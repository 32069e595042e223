"""The kernel database behind a guard: what `tuner.autotune` and Inductor's hooks call.

The kernels floor's part of the kernel database (the storage floor's is the `kernel_configs`
table, `tuner.storage.find_kernel_config`, `save_kernel_config` and `kernel_configs`): which
database (`search_database`, else the settings), read before a search, written after one, and
never breaking the user's program. A missing database is a miss (the first save creates it,
with the current schema). A database that cannot be used (corrupt, unreachable, locked or
stalled past `Settings.lookup_timeout_s`, on another schema revision, read-only when saving,
holding a row tuner cannot read: any exception) turns into one `KernelWarning` for the whole
process, naming the database and the fix; the kernels are then tuned in the process without
storing, and that database is not opened again. Every read and write is bounded by the same
budget and guard as the compile-time lookup's (`tuner.storage.within`).
"""
from __future__ import annotations

import logging
import socket
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from tuner.errors import StorageError
from tuner.keys import Platform
from tuner.settings import Settings

if TYPE_CHECKING:
    from tuner.storage import KernelConfig

log = logging.getLogger("tuner.kernels")


class KernelWarning(UserWarning):
    """The tuning database could not be used for kernel configs, or timings mean nothing."""


_lock = threading.Lock()
_failed: dict[str, str] = {}          # database URL -> why it is not used in this process
_warned: set[str] = set()             # topics already warned about in this process
_search_urls: list[str] = []          # `search_database` contexts open in this process, innermost last


@contextmanager
def search_database(url: str | None) -> Iterator[None]:
    """While open, every KernelDatabase made without a URL (`tuner.autotune` without `db=`)
    uses `url`: `tuner search` and its trial processes point the model's kernels at the
    search's database. Process-wide (all threads); None changes nothing."""
    if url is None:
        yield
        return
    with _lock:
        _search_urls.append(url)
    try:
        yield
    finally:
        with _lock:
            _search_urls.remove(url)


def warn_once(topic: str, message: str) -> None:
    """One KernelWarning per topic per process; repeats go to the `tuner.kernels` logger."""
    with _lock:
        first = topic not in _warned
        _warned.add(topic)
    if first:
        warnings.warn(message, KernelWarning, stacklevel=3)
    else:
        log.info("%s", message)


class KernelDatabase:
    """The database at `url` (None: the open `search_database`'s URL, else
    `Settings.from_env().db_url`, read at first use)."""

    def __init__(self, url: str | None = None) -> None:
        self._url = url
        self._settings: Settings | None = None

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = Settings.from_env()
        return self._settings

    @property
    def url(self) -> str:
        if self._url:
            return self._url
        searched = _search_urls[-1:]        # one read: another thread may close its context
        return searched[0] if searched else self.settings.db_url

    def usable(self) -> bool:
        """False once this database failed in this process."""
        return self.url not in _failed

    def find(self, kernel_key: str, platform_key: str) -> "KernelConfig | None":
        """The stored config for the kernel key on this platform. None on a miss, on a
        missing database, and on a database that cannot be used or a row that cannot be read
        (any exception, warned about once), within `Settings.lookup_timeout_s` even when the
        server stalls (`tuner.storage.within`)."""
        from tuner.storage import Store, find_kernel_config, parse_url, sqlite_path, within

        if not self.usable():
            return None
        url, budget = self.url, self.settings.lookup_timeout_s

        def read() -> "KernelConfig | None":
            path = sqlite_path(parse_url(url))
            if path is not None and not path.exists():
                return None
            with Store.open(url, readonly=True, connect_timeout_s=budget) as store:
                record = find_kernel_config(store, kernel_key, platform_key)
            if record is not None:
                record.config_dict()        # a row whose config is not a JSON object fails here
            return record

        try:
            return within(budget, read, url=url)
        except Exception as exc:  # noqa: BLE001 - a kernel launch must not fail for its database
            self._fail(exc, "tuning kernels in this process without storing their configs")
            return None

    def find_all(self, platform_key: str, kernel_name: str) -> "list[KernelConfig]":
        """Every stored config of kernels named `kernel_name` on this platform (the caller
        checks which belong to its kernel); empty on a miss and on the failures `find` warns of."""
        from tuner.storage import Store, kernel_configs, parse_url, sqlite_path, within

        if not self.usable():
            return []
        url, budget = self.url, self.settings.lookup_timeout_s

        def read() -> "list[KernelConfig]":
            path = sqlite_path(parse_url(url))
            if path is not None and not path.exists():
                return []
            with Store.open(url, readonly=True, connect_timeout_s=budget) as store:
                records = kernel_configs(store, platform_key=platform_key, kernel_name=kernel_name)
            for record in records:
                record.config_dict()
            return records

        try:
            return within(budget, read, url=url)
        except Exception as exc:  # noqa: BLE001 - a compile must not fail for its database
            self._fail(exc, "tuning kernels in this process without storing their configs")
            return []

    def save(self, record: "KernelConfig", platform: Platform) -> bool:
        """Offer a search's winner (kept only if better, see `save_kernel_config`); returns
        whether it was stored. Creates a missing database. False, warned about once, when
        the database cannot be used (any exception), within `Settings.lookup_timeout_s`
        (waits for other writers that long; a stalled server too)."""
        from tuner.storage import Store, ensure_schema, save_kernel_config, within

        if not self.usable():
            return False
        url, budget = self.url, self.settings.lookup_timeout_s

        def write() -> bool:
            ensure_schema(url)
            with Store.open(url, connect_timeout_s=budget) as store:
                store.ensure_platform(platform)
                return save_kernel_config(store, record)

        try:
            return within(budget, write, url=url)
        except Exception as exc:  # noqa: BLE001 - a kernel launch must not fail for its database
            self._fail(exc, "the kernel configs found here are not stored")
            return False

    def provenance(self) -> tuple[str, str]:
        """(user, host) to record with a saved config."""
        return self.settings.user, socket.gethostname()

    def _fail(self, exc: Exception, consequence: str) -> None:
        from tuner.storage import safe_url

        if not isinstance(exc, StorageError):     # a row tuner cannot read, or a bug in tuner
            log.debug("tuner.autotune: the kernel database failed", exc_info=exc)
            exc = StorageError(f"database {safe_url(self.url)} holds a kernel config tuner cannot read "
                               f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]}); re-tune the "
                               f"kernel with its database moved aside, or report it if it persists")
        with _lock:
            _failed[self.url] = str(exc)
        warn_once(f"db:{self.url}", f"tuner.autotune: {exc}; {consequence} "
                                    f"(tuner will not use this database again in this process)")
