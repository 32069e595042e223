"""Plain text that several layers print the same way.

A leaf module: it imports nothing of tuner, so storage, lookup and the CLI can all use it.
"""
from __future__ import annotations

import re
from typing import Any, Iterable

__all__ = ["key_values", "printable"]

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")     # C0, DEL and C1: terminal commands, not text


def key_values(pairs: Iterable[tuple[str, Any]]) -> str:
    """Knob values as `k=v, k=v`, in the order given; "" when there are none.

    Callers choose the order (`sorted(params.items())` for a dict) and the word for
    no knobs at all (`key_values(...) or "defaults"`).
    """
    return ", ".join(f"{k}={v}" for k, v in pairs)


def printable(text: Any, *, newlines: bool = False) -> str:
    """`str(text)` with every C0/C1 control character written as `\\xNN`: what any stored string
    goes through before a terminal shows it, since a row written by someone else may hold escape
    sequences (cursor moves, clipboard writes) that imports refuse but raw SQL does not.
    `newlines` keeps line breaks (a message of several lines)."""
    return _CONTROL.sub(lambda found: found.group() if newlines and found.group() == "\n"
                        else f"\\x{ord(found.group()):02x}", str(text))
