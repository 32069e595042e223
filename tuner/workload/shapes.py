"""Shape buckets (`tuner search model.py --shapes "batch=1,8,32"`): the values and the arithmetic.

A bucket is one assignment of sizes to named dimensions, with a weight (how often that shape
occurs). The model file's `get_inputs` takes each dimension as a keyword argument, e.g.
`def get_inputs(batch=8):`, and builds inputs of that size; `tuner search` tunes one config
per bucket (`tuner.search.buckets`), each on that bucket's inputs, so each bucket's graphs get their
own keys and their own stored config. The summary reports the weighted latency.

Syntax: dimensions separated by ";", each `name=size[:weight],...`, e.g. `batch=1,8,32`
(equal weights) or `batch=1:6,8:3,32:1`; several dimensions give their cross product, whose
weight is the product of the dimensions' weights. Weights are normalised to sum to 1.
At compile time (`tuner.lookup.decision.decide_nearest_bucket`) a static graph that no search saw takes
the config of the nearest tuned bucket of the same graph, by `size_distance` and `nearest`:
the rule is written there and in docs/lookup.md. Standard library only: a leaf module.
"""
from __future__ import annotations

import inspect
import itertools
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

from tuner.errors import ModelFileError, UsageError

__all__ = ["Bucket", "MAX_BUCKETS", "ShapeBuckets", "check_get_inputs", "closest", "nearest", "parse_shapes", "shape_label",
           "size_distance", "weighted", "workload_name"]

# torch.compile(..., dynamic=False) compiles each shape once, up to Dynamo's recompile limit (8);
# past it the frame silently runs in eager, so more buckets than that could never all apply.
MAX_BUCKETS = 8
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# A size in a graph's canonical text (tuner.workload): digits not inside a name (float32, %3, v1)
# nor after a decimal point (0.125), so dtypes, node numbers and constants stay in the skeleton.
_SIZE = re.compile(r"(?<![A-Za-z0-9_%.])[0-9]+(?![0-9.])")
_EXAMPLE = 'e.g. --shapes "batch=1,8,32" or --shapes "batch=1:6,8:3,32:1"'


@dataclass(frozen=True)
class Bucket:
    """One shape: `sizes` maps each dimension name to its size; `weight` is its share (0..1]."""

    sizes: tuple[tuple[str, int], ...]
    weight: float

    def label(self) -> str:
        """`batch=8` (several dimensions: `batch=8,seq=128`), the bucket's name in output and workloads."""
        return shape_label(self.sizes)


@dataclass(frozen=True)
class ShapeBuckets:
    """The buckets of one `--shapes` text, in the order given (cross product: first dimension slowest)."""

    names: tuple[str, ...]
    buckets: tuple[Bucket, ...]


def shape_label(sizes: Sequence[tuple[str, int]]) -> str:
    """`batch=8` (several dimensions: `batch=8,seq=128`): a bucket's name in output and workload names."""
    return ",".join(f"{name}={size}" for name, size in sizes)


def workload_name(model_path: str | Path, sizes: Sequence[tuple[str, int]]) -> str:
    """The workload name of a model file at one bucket: `stem[batch=8]` (the stem alone for ()).
    The lookup's nearest-bucket candidates are the workloads named so (`Store.bucket_configs`)."""
    stem = Path(model_path).stem
    return f"{stem}[{shape_label(sizes)}]" if sizes else stem


def parse_shapes(text: str) -> ShapeBuckets:
    """Parse a `--shapes` value. Raises UsageError (one line, with an example) for a malformed
    text, a repeated dimension or size, a size below 1, a weight that is not positive, or more
    than MAX_BUCKETS buckets."""
    dims: list[tuple[str, list[tuple[int, float]]]] = []
    for part in (p.strip() for p in text.split(";")):
        name, eq, values = part.partition("=")
        name = name.strip()
        if not eq or not _NAME.match(name):
            raise UsageError(f"--shapes {text!r}: {part!r} is not name=size,size,...; {_EXAMPLE}")
        if name in (d for d, _ in dims):
            raise UsageError(f"--shapes {text!r} names dimension {name} twice; give each dimension once")
        dims.append((name, _parse_sizes(text, name, values)))
    combos = list(itertools.product(*(sizes for _, sizes in dims)))
    if len(combos) > MAX_BUCKETS:
        raise UsageError(f"--shapes {text!r} gives {len(combos)} buckets, more than {MAX_BUCKETS} (Dynamo compiles "
                         f"at most {MAX_BUCKETS} shapes of a model with dynamic=False); give fewer sizes")
    names = tuple(name for name, _ in dims)
    total = sum(math.prod(w for _, w in combo) for combo in combos)
    buckets = tuple(Bucket(sizes=tuple(zip(names, (s for s, _ in combo))),
                           weight=math.prod(w for _, w in combo) / total) for combo in combos)
    return ShapeBuckets(names=names, buckets=buckets)


def _parse_sizes(text: str, name: str, values: str) -> list[tuple[int, float]]:
    sizes: list[tuple[int, float]] = []
    for item in (v.strip() for v in values.split(",")):
        size_text, colon, weight_text = item.partition(":")
        try:
            size = int(size_text)
            weight = float(weight_text) if colon else 1.0
        except ValueError:
            raise UsageError(f"--shapes {text!r}: {item!r} is not size or size:weight; {_EXAMPLE}") from None
        if size < 1 or not weight > 0 or math.isinf(weight):
            raise UsageError(f"--shapes {text!r}: {item!r} needs a size of at least 1 and a positive weight; "
                             f"{_EXAMPLE}")
        if size in (s for s, _ in sizes):
            raise UsageError(f"--shapes {text!r} lists {name}={size} twice; give each size once")
        sizes.append((size, weight))
    return sizes


def check_get_inputs(path: Path, get_inputs: Callable, names: Sequence[str]) -> None:
    """Refuse (ModelFileError, one line naming the fix) a `get_inputs` that cannot take each of
    `names` as a keyword argument. Called by the model-file loader before it calls `get_inputs`."""
    try:
        params = inspect.signature(get_inputs).parameters
    except (TypeError, ValueError):      # a builtin or C callable: let the call itself decide
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    takes = {n for n, p in params.items()
             if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}
    missing = [n for n in names if n not in takes]
    if missing:
        example = ", ".join(f"{n}=8" for n in names)
        raise ModelFileError(f"get_inputs() in {path} takes no argument {missing[0]!r}, but --shapes names it; "
                             f"define `def get_inputs({example}):` and build the inputs with that size")


def weighted(buckets: Sequence[Bucket], values: Sequence[float]) -> float:
    """The sum of weight x value over the buckets (weights sum to 1: the expected value per call)."""
    return sum(b.weight * v for b, v in zip(buckets, values, strict=True))


def size_distance(code: str, other: str) -> float | None:
    """How far apart two graphs' shapes are, when they are the same graph at other sizes.

    `code` and `other` are canonical texts (`GraphFingerprint.code`). They are the same graph at
    other sizes when their parameters (the lines `tuner.workload` ends with " param") are equal
    and the rest is equal once every size (a number standing alone: shapes, strides, integer
    arguments) is blanked out: a bucket changes the inputs, never the weights. The distance is
    then the largest |ln(a/b)| over the sizes that differ (batch 5 against 8: ln 1.6), 0.0 for
    equal texts. None when the texts differ elsewhere (other weights, another graph, dtype,
    constant or a symbolic size), or a size is 0 on one side only."""
    if _SIZE.sub("#", code) != _SIZE.sub("#", other) or _params(code) != _params(other):
        return None
    worst = 0.0
    for a, b in zip(_SIZE.findall(code), _SIZE.findall(other)):
        if a != b:
            if a == "0" or b == "0":
                return None
            worst = max(worst, abs(math.log(int(a) / int(b))))
    return worst


def nearest(code: str, candidates: Sequence[str]) -> int | None:
    """The index of the candidate text nearest to `code` by `size_distance`, None when none is the
    same graph. Ties go to the candidate with the larger sizes (the sum of its differing sizes'
    logarithms), then to the first given: a shape halfway between two buckets takes the larger one."""
    ranked = []
    for i, other in enumerate(candidates):
        if size_distance(code, other) is not None:
            pairs = zip(map(int, _SIZE.findall(code)), map(int, _SIZE.findall(other)))
            ranked.append((_rank(pairs), i))
    return min(ranked)[1] if ranked else None


def closest(sizes: Sequence[int], candidates: Sequence[Sequence[int]]) -> int | None:
    """`nearest` for sizes already aligned: the index of the candidate nearest to `sizes` (the
    smallest largest ratio over the sizes that differ; ties to the larger candidate, then the
    first). None when every candidate has a 0 where `sizes` has not, or the other way round."""
    ranked = [(rank, i) for i, other in enumerate(candidates)
              if (rank := _rank(zip(sizes, other, strict=True))) is not None]
    return min(ranked)[1] if ranked else None


def _rank(pairs: Iterable[tuple[int, int]]) -> tuple[float, float] | None:
    """(largest |ln(a/b)|, minus the sum of ln(b/a)) over the pairs that differ: what `nearest` and
    `closest` minimise; None when a size is 0 on one side only."""
    worst, larger = 0.0, 0.0
    for a, b in pairs:
        if a != b:
            if a == 0 or b == 0:
                return None
            worst = max(worst, abs(math.log(a / b)))
            larger += math.log(b / a)
    return round(worst, 9), -larger


def _params(code: str) -> list[str]:
    return [line for line in code.splitlines() if line.endswith(" param")]
