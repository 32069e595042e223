"""Per-bucket dispatch inside one dynamic graph: each runtime size takes its shape bucket's config.

`tuner search --shapes "batch=1,8,32"` stores one config per bucket, under the keys of the static
graphs Dynamo traces at each size. A program that compiles without `dynamic=False` gets, from its
second shape on, one graph with a symbolic size (Dynamo's automatic dynamic shapes), whose key no
bucket has. For such a graph the backend compiles one copy per distinct bucket config (each
bucket's config as measured, `tuner.lookup.choice.backend_choice` rules included) and returns a
`Dispatcher`, which reads the symbolic sizes off each call's inputs and runs the copy of the
nearest bucket (`tuner.workload.closest`: the smallest largest size ratio, ties to the larger
bucket). One Dynamo graph, one compile per distinct config, no recompiles as sizes change.

Which buckets belong to a dynamic graph is recomputed from canonical texts (`GraphFingerprint.code`,
`tuner.workload`): `bind` matches the dynamic graph's text against each bucket graph's text on
their `skeleton` (the tensor operations in order, with dtypes and ranks, and the parameters with
their shapes; arguments, sizes and the symbolic-size arithmetic left out) and reads each symbol's
size in that bucket off the inputs' shapes. Standard library only, like `tuner.workload.shapes`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from tuner.workload import closest

__all__ = ["Dispatcher", "SymbolSite", "bind", "skeleton", "symbol_sites"]

MAX_SIZE = 2**40            # no tensor dimension is larger; keeps the ratios of `closest` finite
_LINE = re.compile(r"^%\d+ = (\w+) ([^(]*)\(.*?(?: :: (.*))?$")
_TENSOR = re.compile(r"^T\(\[([^\]]*)\] (.*)\)$")
_SYMBOL = re.compile(r"^[a-z]+[0-9]+$")


@dataclass(frozen=True)
class SymbolSite:
    """Where a call's inputs hold a symbolic size: `inputs[placeholder].shape[dim]`."""

    symbol: str
    placeholder: int
    dim: int


def _nodes(code: str) -> list[tuple[str, str, str, bool]]:
    """(op, target, value text, is a parameter) per node line of a canonical text."""
    nodes = []
    for line in code.splitlines()[1:]:
        param = line.endswith(" param")
        match = _LINE.match(line.removesuffix(" param"))
        if match:
            nodes.append((match.group(1), match.group(2), match.group(3) or "", param))
    return nodes


def _tensor(value: str) -> tuple[list[str], str] | None:
    """A tensor value's shape tokens and the rest of its text without strides; None if not a tensor."""
    match = _TENSOR.match(value)
    if match is None:
        return None
    rest = " ".join(part for part in match.group(2).split() if not part.startswith("stride="))
    return (match.group(1).split(",") if match.group(1) else []), rest


def skeleton(code: str) -> tuple[str, ...]:
    """What two graphs of one model at other sizes, static or symbolic, have in common: per node
    that yields tensors, its op, target, and each tensor's rank, dtype, device and grad flag (a
    parameter's full shape); nodes that yield sizes (a symbolic size and its arithmetic) and the
    output are left out, and so are arguments, which name nodes and sizes."""
    lines = []
    for op, target, value, param in _nodes(code):
        if op == "output" or "T(" not in value:
            continue
        tensor = _tensor(value)
        if param or tensor is None:     # a parameter keeps its shape; tuples of tensors keep their text
            text = value if param else re.sub(r"\[[^\]]*\]", "[]", value)
        else:
            text = f"rank{len(tensor[0])} {tensor[1]}"
        lines.append(f"{op} {target} :: {text}{' param' if param else ''}")
    return tuple(lines)


def _inputs(code: str) -> list[tuple[int, list[str]]]:
    """(placeholder position, shape tokens) of each tensor input that is not a parameter."""
    found, position = [], 0
    for op, _, value, param in _nodes(code):
        if op != "placeholder":
            continue
        tensor = _tensor(value)
        if tensor is not None and not param:
            found.append((position, tensor[0]))
        position += 1
    return found


def symbol_sites(code: str) -> tuple[SymbolSite, ...]:
    """Each symbol that is a whole dimension of a tensor input (`[s0,32]`), at its first site;
    () for a static graph."""
    sites: dict[str, SymbolSite] = {}
    for position, shape in _inputs(code):
        for dim, token in enumerate(shape):
            if _SYMBOL.match(token) and token not in sites:
                sites[token] = SymbolSite(token, position, dim)
    return tuple(sites.values())


def bind(dynamic: str, static: str) -> dict[str, int] | None:
    """Each symbol's size in the static graph `static`, when it is the symbolic graph `dynamic`
    at fixed sizes: equal skeletons, and every tensor input's shape equal where `dynamic` has a
    number, with one size per symbol. None otherwise, or when `dynamic` has no symbol."""
    if skeleton(dynamic) != skeleton(static):
        return None
    mine, theirs = _inputs(dynamic), _inputs(static)
    if len(mine) != len(theirs):
        return None
    sizes: dict[str, int] = {}
    for (_, shape), (_, fixed) in zip(mine, theirs):
        if len(shape) != len(fixed) or not all(n.isdigit() for n in fixed):
            return None
        for token, n in zip(shape, fixed):
            if int(n) > MAX_SIZE:       # a stored text with an absurd size binds nothing
                return None
            if _SYMBOL.match(token):
                if sizes.setdefault(token, int(n)) != int(n):
                    return None
            elif token.isdigit() and token != n:
                return None
    return sizes or None


class Dispatcher:
    """The compiled callable of a dynamic graph with per-bucket copies: each call runs the copy of
    the bucket nearest to its sizes. `buckets` holds each bucket's sizes by symbol and the index of
    its copy in `copies`. The choice per distinct size tuple is remembered. Choosing never raises
    into the user's call: on any error the call runs copy 0 (the first bucket's, compiled for
    every size of this dynamic graph) and `warn` says so once."""

    def __init__(self, sites: Sequence[SymbolSite], buckets: Sequence[tuple[dict[str, int], int]],
                 copies: Sequence[Callable[..., Any]], *, warn: Callable[[str], None] | None = None) -> None:
        self.sites = tuple(sites)
        self._sizes = [[sizes[site.symbol] for site in self.sites] for sizes, _ in buckets]
        self._copy_of = [copy for _, copy in buckets]
        self.copies = tuple(copies)
        self._chosen: dict[tuple[int, ...], int] = {}
        self._warn = warn
        self._warned = False
        self.calls = [0] * len(buckets)     # calls per bucket, for logs and tests

    def bucket_for(self, sizes: tuple[int, ...]) -> int:
        """The index of the bucket nearest to `sizes` (one per site)."""
        found = self._chosen.get(sizes)
        if found is None:
            found = closest(sizes, self._sizes)
            self._chosen[sizes] = found = 0 if found is None else found
        return found

    def __call__(self, *args: Any) -> Any:
        try:
            sizes = tuple(int(args[site.placeholder].shape[site.dim]) for site in self.sites)
            bucket = self.bucket_for(sizes)
        except Exception as exc:  # noqa: BLE001 - choosing a bucket must never break the user's call
            bucket = 0
            if not self._warned and self._warn is not None:
                self._warned = True
                self._warn(f"tuner: could not choose a shape bucket for a call ({type(exc).__name__}: {exc}); "
                           f"running the first bucket's compiled copy. Fix: re-run `tuner search --shapes`")
        self.calls[bucket] += 1
        return self.copies[self._copy_of[bucket]](*args)
