"""Building a `SearchSpace` for a device: from the built-in table or a user's space file, checked
against the installed torch.

`load_space` is the one way in. It keeps the knobs of the search's scope (training or inference)
and safety (unsafe only on opt-in), sizes the C++ GEMM thread factors to the trial's thread count,
resolves each knob against this torch (`knobs.resolve`), drops knobs left with one value and
children whose parent is gone, and adds the precision knob over `--precision`'s modes. Every knob
skipped or adjusted leaves one line in `SearchSpace.notices`.
"""
from __future__ import annotations

import os
from dataclasses import replace
from typing import Sequence

from tuner.errors import SpaceError
from tuner.search_spaces import cpu
from tuner.search_spaces.catalogue import PRECISION, TABLES
from tuner.search_spaces.knobs import Knob, resolve, run_order, same_value
from tuner.search_spaces.space import SearchSpace
from tuner.search_spaces.spacefile import read_space_file


def load_space(device: str, *, training: bool = False, path: str | os.PathLike[str] | None = None,
               include_unsafe: bool = False, threads: int | None = None,
               precision: Sequence[str] = ()) -> SearchSpace:
    """The search space for `device` ("cpu", "cuda", "cuda:1"), checked against this torch.

    `training` drops inference-only knobs (freezing and its children) and keeps the
    partitioner's functorch knobs; inference does the opposite. Unsafe knobs stay out
    unless `include_unsafe`. `threads` (default: torch.get_num_threads()) sets the C++
    GEMM thread-factor choices; trials must run with that thread count.
    `path` names a user JSON space file; a malformed file raises SpaceError.
    Knobs this torch lacks are skipped and reported in `SearchSpace.notices`.
    `precision` (`tuner search --precision`, parsed by `tuner.precision.parse_precisions`) adds
    the `precision` knob over those modes, fp32 first and the default, when it lists more than
    fp32; UsageError for a mode this device cannot run (tf32 on a CPU model).
    """
    device_type = str(device).split(":")[0].lower()
    if path is None:
        if device_type not in TABLES:
            raise SpaceError(f"no built-in search space for device {device!r}; "
                             f"use one of {', '.join(TABLES)} or pass a space file with --space")
        name = device_type + ("-train" if training else "") + ("-unsafe" if include_unsafe else "")
        return _with_precision(_build(name, device_type, list(TABLES[device_type]), training=training,
                                      include_unsafe=include_unsafe, threads=threads, user=set(), notices=[]),
                               precision)
    parsed = read_space_file(os.fspath(path), device_type)
    space = _build(parsed.name, device_type, list(parsed.knobs), training=training,
                   include_unsafe=include_unsafe, threads=threads, user=set(parsed.declared),
                   notices=list(parsed.notices))
    if not space.knobs:
        raise SpaceError(f"space file {path}: no knob is left for this workload and torch "
                         f"({'; '.join(space.notices) or 'it lists none'}); add knobs that apply here")
    return _with_precision(space, precision)


def _with_precision(space: SearchSpace, modes: Sequence[str]) -> SearchSpace:
    """`space` plus the precision knob over `modes` (fp32 first); `space` itself for fp32 alone."""
    from tuner.precision import FP32, check_device, get_precision

    names = tuple(dict.fromkeys([FP32, *(get_precision(m).name for m in modes)]))
    if len(names) < 2 or "precision" in {k.name for k in space.knobs}:
        return space
    check_device(names, space.device)
    knob = replace(PRECISION, choices=names)
    return replace(space, name=f"{space.name}+precision", knobs=(*space.knobs, knob))


def _build(name: str, device: str, knobs: list[Knob], *, training: bool, include_unsafe: bool,
           threads: int | None, user: set[str], notices: list[str]) -> SearchSpace:
    wrong_scope = "inference" if training else "training"
    kept: list[Knob] = []
    for knob in knobs:
        if knob.scope == wrong_scope:
            if knob.name in user:
                notices.append(f"{knob.name} skipped: it applies to {knob.scope} only")
            continue
        if knob.unsafe and not include_unsafe:
            if knob.name in user:
                notices.append(f"{knob.name} skipped: it changes numerics; opt in with include_unsafe")
            continue
        if knob.name == cpu.THREAD_FACTORS_KNOB and knob.name not in user:
            knob = _with_thread_factors(knob, threads)
        resolved, why = resolve(knob)
        notices.extend(why)
        if resolved is None:
            continue
        if _domain_size(resolved) < 2:
            notices.append(f"{resolved.name} skipped: only one value is possible here")
            continue
        kept.append(resolved)
    kept = _drop_orphans(kept, notices)
    return SearchSpace(name=name, device=device, knobs=tuple(run_order(kept)), notices=tuple(notices))


def _with_thread_factors(knob: Knob, threads: int | None) -> Knob:
    if threads is None:
        import torch

        threads = torch.get_num_threads()
    extra = cpu.thread_factor_choices(threads) if threads > 1 else ()
    extra = tuple(c for c in extra if not any(same_value(c, h) for h in knob.choices))
    return replace(knob, choices=knob.choices + extra)


def _domain_size(knob: Knob) -> int:
    if knob.kind == "choice":
        return len(knob.choices)
    if knob.kind == "bool":
        return 2
    return 1 if knob.low == knob.high else 2


def _drop_orphans(knobs: list[Knob], notices: list[str]) -> list[Knob]:
    names = {k.name for k in knobs}
    while True:
        orphans = [k for k in knobs if k.parent is not None and k.parent[0] not in names]
        if not orphans:
            return knobs
        for k in orphans:
            notices.append(f"{k.name} skipped: its parent {k.parent[0]} is not in this space")  # type: ignore[index]
            names.discard(k.name)
        knobs = [k for k in knobs if k.name in names]
