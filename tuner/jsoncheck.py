"""A small checker for JSON that came from outside: exact keys, types, sizes, finite numbers.

A leaf module (standard library only). `tuner.storage.exchange` checks exchange files
with it and `tuner.search_spaces.spacefile` checks user space files. Every check raises
`Invalid` with one line naming where the problem is (`where`) and what it is; the caller
words that line for its user (which file, what to do next).
"""
from __future__ import annotations

import json
import math
import re
from typing import Any, Iterable, Mapping

MAX_STRING = 4096                       # bytes of UTF-8, unless a caller says otherwise
MAX_KEY = 128                           # bytes of UTF-8 of a key in a string map
INT_MAX = 2**31 - 1                     # what every database column holds
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")                  # C0, DEL and C1
_CONTROL_MULTILINE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")

# A field's expected type, or a tuple of them; None in the tuple allows null.
Kind = type | tuple[type | None, ...]


class Invalid(Exception):
    """A problem inside a document; its message is one line that says where and what."""


def loads_strict(text: str) -> Any:
    """`json.loads`, refusing a key repeated within one object and NaN/Infinity.

    Raises json.JSONDecodeError for bad syntax, RecursionError for absurd nesting and
    ValueError (one line) for a repeated key or a non-finite constant.
    """
    return json.loads(text, object_pairs_hook=no_duplicates, parse_constant=no_constant)


def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`object_pairs_hook` for json: a key repeated within one object is a ValueError."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"repeats the key {show(key)} in one JSON object")
        result[key] = value
    return result


def no_constant(text: str) -> Any:
    """`parse_constant` for json: NaN, Infinity and -Infinity are ValueErrors."""
    raise ValueError(f"contains {text}, which is not a finite number")


def show(value: Any) -> str:
    """`repr(value)`, cut to 60 characters: safe to put an untrusted value in a message."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def unknown_keys(obj: Mapping[str, Any], allowed: Iterable[str]) -> list[str]:
    """The keys of `obj` that `allowed` lacks, sorted."""
    return sorted(set(obj) - set(allowed))


def is_kind(value: Any, kind: type) -> bool:
    """JSON's view of a type: int excludes bool; float is any finite int or float."""
    if kind is int:
        return type(value) is int
    if kind is float:
        return type(value) in (int, float) and math.isfinite(value)
    return isinstance(value, kind)


def check_fields(obj: Any, spec: Mapping[str, Kind], where: str, *,
                 lengths: Mapping[str, int] | None = None, max_string: int = MAX_STRING,
                 multiline: Iterable[str] = ()) -> None:
    """Exactly the keys of `spec`, each of its kind (see `is_kind`), strings within
    `lengths[key]` (default `max_string`) bytes and without control characters (`check_string`;
    the keys in `multiline` may hold newlines), ints within +-INT_MAX."""
    if not isinstance(obj, dict):
        raise Invalid(f"{where} must be a JSON object, got {type(obj).__name__}")
    unknown = unknown_keys(obj, spec)
    if unknown:
        raise Invalid(f"{where} has unknown key(s) {', '.join(map(show, unknown[:5]))}")
    missing = sorted(set(spec) - set(obj))
    if missing:
        raise Invalid(f"{where} lacks required key(s) {', '.join(missing)}")
    limits = lengths or {}
    for key, kind in spec.items():
        value = obj[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if value is None and None in kinds:
            continue
        if not any(is_kind(value, k) for k in kinds if k is not None):
            wanted = " or ".join("null" if k is None else k.__name__ for k in kinds)
            raise Invalid(f"{where}: {key} must be {wanted}, got {show(value)}")
        if isinstance(value, str):
            check_string(value, f"{where}: {key}", limits.get(key, max_string), multiline=key in multiline)
        if isinstance(value, int) and not isinstance(value, bool) and not -INT_MAX <= value <= INT_MAX:
            raise Invalid(f"{where}: {key} {value} is out of range")


def check_string(value: str, where: str, limit: int = MAX_STRING, *, multiline: bool = False) -> None:
    """At most `limit` bytes of UTF-8, and no C0 or C1 control character (U+0000-U+001F,
    U+007F-U+009F; `multiline` allows the newline): no database column takes a NUL, and a stored
    string is shown to people (terminals, reports), where the others are commands."""
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise Invalid(f"{where} is a {size}-byte string, over the {limit}-byte limit")
    found = (_CONTROL_MULTILINE if multiline else _CONTROL).search(value)
    if found is not None:
        name = "a NUL character" if found.group() == "\x00" else f"the control character U+{ord(found.group()):04X}"
        raise Invalid(f"{where} contains {name}; stored text may not hold control characters")


def check_text_map(obj: dict[str, Any], where: str, *, max_entries: int,
                   max_string: int = MAX_STRING) -> dict[str, str]:
    """A JSON object of strings to strings: at most `max_entries` entries, keys within
    MAX_KEY bytes, values within `max_string` bytes. Returns `obj`."""
    if len(obj) > max_entries:
        raise Invalid(f"{where} has {len(obj)} entries, over the limit of {max_entries}")
    for key, value in obj.items():
        check_string(key, f"{where} key", MAX_KEY)
        if not isinstance(value, str):
            raise Invalid(f"{where}: {key} must be a string, got {show(value)}")
        check_string(value, f"{where}: {key}", max_string)
    return obj
