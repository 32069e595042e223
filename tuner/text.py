"""Plain text that several layers print the same way.

A leaf module: it imports nothing of tuner, so storage, lookup and the CLI can all use it.
"""
from __future__ import annotations

from typing import Any, Iterable

__all__ = ["key_values"]


def key_values(pairs: Iterable[tuple[str, Any]]) -> str:
    """Knob values as `k=v, k=v`, in the order given; "" when there are none.

    Callers choose the order (`sorted(params.items())` for a dict) and the word for
    no knobs at all (`key_values(...) or "defaults"`).
    """
    return ", ".join(f"{k}={v}" for k, v in pairs)
