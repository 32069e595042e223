"""How a model file's mistakes are worded: a value and an exception, each on one line."""
from __future__ import annotations

from typing import Any


def describe_value(value: Any) -> str:
    """A value as an error line names it: its repr and type, or only its type when long."""
    text = repr(value)
    if len(text) > 60 or "\n" in text:
        return f"a {type(value).__name__}"
    return f"{text} ({type(value).__name__})"


def exception_line(exc: BaseException) -> str:
    """The last line of an exception as Python prints it, e.g. "ValueError: bad size"."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    name = type(exc).__qualname__
    return f"{name}: {lines[-1]}" if lines else name
