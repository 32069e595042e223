"""A client-side deadline on database work done inside a user's compile or kernel launch.

The server-side timeouts and libpq's TCP bounds (`tuner.storage.engine.bounded_session`) cover a
server that is slow, locked or gone. They cannot cover a peer that accepts the connection and
then stops answering while its TCP stack still acknowledges every packet (a stalled proxy or
load balancer): libpq then waits in `recv` for ever. `within` runs the work in a daemon thread
and stops waiting at the deadline, so the caller gets a StorageError it already handles (one
warning, defaults, the database not used again in this process).
"""
from __future__ import annotations

import threading
from typing import Callable, TypeVar

from tuner.errors import StorageError
from tuner.storage.urls import safe_url

T = TypeVar("T")
# Past the budget, before giving up: the server's own answer (a cancelled statement, a lock
# timeout, libpq's connect timeout), which names the cause, arrives first when it can.
GRACE_S = 0.5


def within(timeout_s: float | None, call: Callable[[], T], *, url: str) -> T:
    """`call()`'s value or exception, or StorageError once `timeout_s` (+ `GRACE_S`) has passed.

    None, or a SQLite URL, runs `call` in the caller's thread with no deadline: a local file's
    busy timeout bounds its waits.

    Past the deadline the thread is left behind, blocked where the driver is blocked; it holds
    no tuner lock, and the caller must not use that database again in this process (so at most
    one such thread is left per database). The StorageError names the database, the budget
    and the fix.
    """
    if timeout_s is None or url.startswith("sqlite"):
        return call()      # a local file: its busy timeout bounds the wait, in the caller's thread
    deadline = timeout_s + GRACE_S
    done = threading.Event()
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread as it is
            outcome["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name="tuner-db-deadline", daemon=True).start()
    if not done.wait(deadline):
        raise StorageError(f"database {safe_url(url)} did not answer within {timeout_s:g} s (the server or "
                           f"the network in between stalled); check the server, or raise TUNER_LOOKUP_TIMEOUT")
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]
