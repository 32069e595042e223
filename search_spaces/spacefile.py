"""User space files: a JSON file that declares knobs, or extends a built-in table.

    {"name": "my-space", "extends": "cpu", "exclude": ["cpp_wrapper"],
     "knobs": [{"name": "max_fusion_size", "kind": "int", "low": 16, "high": 128, "log": true}]}

`read_space_file` parses and checks one file against the allow-list
(`tuner.search_spaces.catalogue`): every knob must be one tuner knows, with a domain inside
the allowed one and Inductor's default as its default. It does not look at the installed
torch; `load_space` resolves the result against it like a built-in table. Every problem is
a SpaceError of one line: `space file PATH: problem; fix`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from tuner.errors import SpaceError
from tuner.jsoncheck import is_kind, unknown_keys
from tuner.search_spaces import catalogue
from tuner.search_spaces.catalogue import TABLES
from tuner.search_spaces.knobs import GROUPS, KINDS, Knob, run_order, same_value

_TOP_KEYS = {"name", "knobs", "extends", "exclude", "description"}
_KNOB_KEYS = {"name", "kind", "choices", "low", "high", "log", "step", "default", "parent", "group", "description"}

Fail = Callable[[str, str], SpaceError]


@dataclass(frozen=True)
class SpaceFile:
    """What a space file declares, checked against the allow-list (not yet against torch)."""

    name: str
    knobs: tuple[Knob, ...]          # in define-by-run order
    declared: frozenset[str]         # the knobs the file itself lists (notices name only these)
    notices: tuple[str, ...]         # knobs of the extended table left out, one line each


def read_space_file(path: str, device_type: str) -> SpaceFile:
    """Parse the space file at `path` for a search on `device_type` ("cpu" or "cuda").

    Raises SpaceError naming the first problem and its fix.
    """

    def fail(problem: str, fix: str) -> SpaceError:
        return SpaceError(f"space file {path}: {problem}; {fix}")

    data = _load(path, fail)
    name, entries, extends = _top_level(data, device_type, fail)
    base = {k.name: k for k in TABLES[extends]} if extends else {}
    knobs: dict[str, Knob] = dict(base)
    declared: set[str] = set()
    for i, entry in enumerate(entries):
        knob = _parse_knob(entry, i, base, fail)
        if knob.name in declared:
            raise fail(f"knob {knob.name!r} is listed twice", "keep one entry per knob")
        declared.add(knob.name)
        knobs[knob.name] = knob
    _exclude(data.get("exclude", []), knobs, declared, fail)
    notices = _drop_orphans(knobs, declared, fail)
    _check_parent_values(knobs, fail)
    try:
        ordered = run_order(list(knobs.values()))
    except SpaceError as exc:
        raise fail(str(exc), "remove one parent link") from None
    return SpaceFile(name=name, knobs=tuple(ordered), declared=frozenset(declared), notices=tuple(notices))


def _load(path: str, fail: Fail) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        raise fail("not found", "pass the path of an existing JSON file") from None
    except json.JSONDecodeError as exc:
        raise fail(f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})",
                   "fix the JSON syntax") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(f"cannot be read ({exc})", "check the file's permissions and encoding") from None


def _top_level(data: Any, device_type: str, fail: Fail) -> tuple[str, list[Any], str | None]:
    """The file's name, knob entries and the table it extends (None: none)."""
    if not is_kind(data, dict):
        raise fail("the top level is not an object", 'write {"name": ..., "knobs": [...]}')
    extra = unknown_keys(data, _TOP_KEYS)
    if extra:
        raise fail(f"unknown key(s) {', '.join(map(repr, extra))}", f"use only {', '.join(sorted(_TOP_KEYS))}")
    name = data.get("name")
    if not is_kind(name, str) or not name.strip():
        raise fail('"name" is missing or not a string', 'add "name": "my-space"')
    entries = data.get("knobs", [])
    if not is_kind(entries, list):
        raise fail('"knobs" is not a list', 'write "knobs": [{"name": ..., "kind": ...}, ...]')
    extends = data.get("extends")
    if extends is not None:
        if extends not in TABLES:
            raise fail(f'"extends" is {extends!r}', f"use one of {', '.join(map(repr, TABLES))} or leave it out")
        if extends != device_type:
            raise fail(f'it extends {extends!r} but the search is for device {device_type!r}',
                       f'set "extends": "{device_type}" or search on {extends}')
    if extends is None and not entries:
        raise fail("it declares no knobs and extends no built-in space", 'add knobs or "extends": "cpu"')
    return name.strip(), entries, extends


def _exclude(exclude: Any, knobs: dict[str, Knob], declared: set[str], fail: Fail) -> None:
    if not is_kind(exclude, list) or not all(is_kind(e, str) for e in exclude):
        raise fail('"exclude" is not a list of knob names', 'write "exclude": ["cpp_wrapper", ...]')
    for gone in exclude:
        if gone not in knobs:
            raise fail(f'"exclude" names {gone!r}, which is not in the space', "remove it from \"exclude\"")
        del knobs[gone]
        declared.discard(gone)


def _drop_orphans(knobs: dict[str, Knob], declared: set[str], fail: Fail) -> list[str]:
    """Leave out table knobs whose parent was excluded (a notice each); a declared one is an error."""
    notices: list[str] = []
    while orphans := [k for k in knobs.values() if k.parent is not None and k.parent[0] not in knobs]:
        for knob in orphans:
            assert knob.parent is not None
            if knob.name in declared:
                raise fail(f"knob {knob.name!r} has parent {knob.parent[0]!r}, which is not in the space",
                           "add the parent knob or drop \"parent\"")
            notices.append(f"{knob.name} left out: its parent {knob.parent[0]} is excluded")
            del knobs[knob.name]
    return notices


def _check_parent_values(knobs: Mapping[str, Knob], fail: Fail) -> None:
    for knob in knobs.values():
        if knob.parent is not None:
            parent = knobs[knob.parent[0]]
            problem = parent.value_problem(knob.parent[1], what="parent value")
            if problem:
                raise fail(f"knob {knob.name!r}: {problem} of {parent.name}", "use a value the parent can take")


def _parse_knob(entry: Any, index: int, base: Mapping[str, Knob], fail: Fail) -> Knob:
    """One entry of "knobs", starting from the extended table's knob (or the allow-list's)."""
    where = f"knob #{index + 1}"
    if not is_kind(entry, dict):
        raise fail(f"{where} is not an object", 'write {"name": "max_fusion_size", "kind": "int", ...}')
    name = entry.get("name")
    if not is_kind(name, str):
        raise fail(f"{where} has no \"name\"", 'add "name": "<inductor config path>"')
    where = f"knob {name!r}"
    extra = unknown_keys(entry, _KNOB_KEYS)
    if extra:
        raise fail(f"{where} has unknown key(s) {', '.join(map(repr, extra))}",
                   f"use only {', '.join(sorted(_KNOB_KEYS))} (unsafe and scope come from tuner's catalogue)")
    allowed = catalogue.ALLOWED.get(name)
    if allowed is None:
        raise fail(f"{where} is not a knob tuner knows",
                   "check the spelling; tuner.search_spaces.known_knobs() lists the knobs it may set")
    start = base.get(name, allowed)
    kind = entry.get("kind", start.kind)
    if kind not in KINDS:
        raise fail(f"{where} has kind {kind!r}", f"use one of {', '.join(KINDS)}")
    if kind != allowed.kind and kind != "choice":
        fix = '"kind": "choice"' if allowed.kind == "choice" else f'"kind": "{allowed.kind}" or "choice"'
        raise fail(f"{where} has kind {kind!r}, but its values are {allowed.kind}", f"use {fix}")
    if "group" in entry and entry["group"] not in GROUPS:
        raise fail(f"{where} has group {entry['group']!r}", f"use one of {', '.join(GROUPS)}")
    if "default" in entry and not same_value(entry["default"], start.default):
        raise fail(f"{where} sets default {entry['default']!r}",
                   f"remove \"default\": a knob's default is Inductor's own ({start.default!r})")
    fields = _knob_fields(entry, kind, start, allowed, where, fail)
    try:
        knob = Knob(**fields)
    except (ValueError, TypeError) as exc:
        raise fail(f"{where}: {str(exc).removeprefix(f'knob {name!r}: ')}",
                   "fix the entry so its range or choices hold Inductor's default and fit the kind") from None
    for value in _domain_edges(knob):
        problem = allowed.value_problem(value)
        if problem is not None:
            raise fail(f"{where}: {problem} (tuner's allowed domain)", "narrow the range or choices")
    return knob


def _knob_fields(entry: dict[str, Any], kind: str, start: Knob, allowed: Knob, where: str,
                 fail: Fail) -> dict[str, Any]:
    """The Knob's fields: the entry's, else `start`'s; unsafe, scope and pattern from `allowed`."""
    fields: dict[str, Any] = {
        "name": start.name, "kind": kind, "default": start.default, "group": entry.get("group", start.group),
        "unsafe": allowed.unsafe, "scope": allowed.scope, "pattern": allowed.pattern,
        "description": entry.get("description", start.description),
        "parent": start.parent,
    }
    if kind == "choice":
        choices = entry.get("choices", start.choices if start.kind == "choice" else None)
        if choices is None and start.kind == "bool":
            choices = [False, True]
        if not isinstance(choices, list) and not isinstance(choices, tuple):
            raise fail(f"{where} has no \"choices\" list", 'add "choices": [...]')
        fields["choices"] = tuple(choices)
    elif kind in ("int", "float"):
        for key in ("low", "high", "log", "step"):
            fields[key] = entry.get(key, getattr(start, key))
    for key in ("choices", "low", "high", "log", "step"):
        if key in entry and key not in fields:
            raise fail(f"{where} sets {key!r}, which {kind} knobs do not use", f"remove {key!r}")
    if "parent" in entry:
        parent = entry["parent"]
        if parent is None:
            fields["parent"] = None
        elif isinstance(parent, list) and len(parent) == 2 and isinstance(parent[0], str):
            fields["parent"] = (parent[0], parent[1])
        else:
            raise fail(f"{where} has parent {parent!r}", 'write "parent": ["max_autotune", true] or null')
    return fields


def _domain_edges(knob: Knob) -> tuple[Any, ...]:
    if knob.kind == "choice":
        return knob.choices
    if knob.kind == "bool":
        return (False, True)
    return (knob.low, knob.high)
