"""Inductor's GEMM autotuning choices (CPU and CUDA): harvested where a config is measured, fed back at lookup.

With `max_autotune` (and, on CPU, real freezing), Inductor lowers each GEMM to
`autotune_select_algorithm`, which benchmarks every choice and keeps the fastest: on CPU the C++
GEMM template (whose blocking the `cpp.gemm_*` knobs set) against the mkldnn/mkl/ATen externs, on
CUDA the Triton GEMM templates (each tile config its own choice), decompose-k and ATen/cuBLAS.
torch 2.13 offers two process-wide hooks there, the same on both devices, and this module owns both:

- `harvesting()`: Inductor's feedback saver (`add_feedback_saver`) reports every autotuned GEMM
  with the timing of each choice; inside the context they become `GemmChoice` values.
- `feeding(find)`: Inductor's preprocessing hook (`add_preprocessing_fn`) filters the choices of
  each GEMM before autotuning; inside the context a GEMM whose stored winner is among its choices
  keeps only that one, and Inductor takes a single choice without benchmarking anything.

A GEMM is identified by `gemm_key`: the hash of its choices, each as (`ChoiceCaller.hash_key()`,
the choice's own inputs: device, dtype, sizes, strides). The C++ and Triton templates' hashes cover
their generated source (hence blocking knobs and tile configs), and the externs' cover their
arguments; on CPU both were checked to be equal across processes (on CUDA, bench/gpu_check.py
checks it). The platform (torch version, thread count, CPU or GPU) is the other half of the key.
Inductor's CUDA-only `config.lookup_table` is not used: it acts only through `LookupTableChoices`
installed as Inductor's choices handler (replacing any the user installed), and it covers template
choices only, where these hooks cover every choice, externs included, on both devices.
Anything unexpected in the feed (another choice set, a winner not among the choices, an error
while reading) leaves the choices as they are, so Inductor autotunes as it would without tuner.

Both hooks act only inside their context and only on the thread that opened it: Inductor lowers a
graph on the thread that called `compile_fx`. The hooks are registered once per process and stay
(torch offers no way to remove one hook but not the others).
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence

from tuner.keys import canonical_json

if TYPE_CHECKING:
    from tuner.keys import Platform
    from tuner.storage import KernelConfig

log = logging.getLogger("tuner.lookup")

GEMM_KEY_FORMAT = 1
KERNEL_PREFIX = "inductor-gemm:"      # kernel_configs.kernel_name of a harvested GEMM: prefix + op
WINNER = "choice"                     # the config entry naming the winning choice
TIMING_PREFIX = "ms:"                 # config entries "ms:<choice>": that choice's timing

_state = threading.local()           # .harvest: list[GemmChoice] | None; .feed: GemmFeed | None
_install_lock = threading.Lock()
_installed = False
_said_bug = False


@dataclass(frozen=True)
class GemmChoice:
    """One GEMM Inductor autotuned: its op (e.g. "packed_linear"), its inputs as Inductor keys them,
    its key (`gemm_key`) and every choice's timing in ms (finite ones only), by choice identity."""

    op: str
    inputs: str
    key: str
    timings: tuple[tuple[str, float], ...]

    @property
    def winner(self) -> str:
        """The choice Inductor kept: the fastest (ties to the first by identity)."""
        return min(self.timings, key=lambda item: (item[1], item[0]))[0]

    def to_record(self, platform: "Platform", *, user: str, host: str) -> "KernelConfig":
        """This GEMM as a `kernel_configs` row (`storage/kernel_table.py`) on `platform`: the winner and
        every timing in `config`, the winner's timing as `latency_ms` (no spread: Inductor reports one number)."""
        from tuner.storage import KernelConfig

        software = dict(platform.software)
        config = ((WINNER, self.winner),) + tuple((TIMING_PREFIX + name, ms) for name, ms in self.timings)
        return KernelConfig(
            kernel_key=self.key, kernel_name=(KERNEL_PREFIX + self.op)[:255], platform_key=platform.key,
            key_args=(("inputs", self.inputs[:1000]),), dtypes="", config=config,
            latency_ms=dict(self.timings)[self.winner], spread_ms=0.0, configs_tried=len(self.timings),
            space_size=len(self.timings), user=user[:255], host=host[:255],
            tuner_version=software.get("tuner", "")[:64], torch_version=software.get("torch", "")[:128],
            triton_version=software.get("triton", "")[:128])


class GemmFeed:
    """What one `feeding` context did: `fed` GEMMs got their stored winner (benchmarking nothing),
    `missed` ones were left to Inductor's autotuning. `find(key)` names a stored winner or None."""

    def __init__(self, find: Callable[[str], str | None]) -> None:
        self.find = find
        self.fed = 0
        self.missed = 0


def gemm_key(choices: Sequence[tuple[str, str]]) -> str:
    """The key of one GEMM from its choices as (identity, inputs key) pairs, in any order."""
    text = canonical_json({"format": GEMM_KEY_FORMAT, "choices": sorted([list(c) for c in choices])})
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def autotunes_gemms(patches: Mapping[str, Any] | Iterable[tuple[str, Any]] | None) -> bool:
    """Whether compiling with these Inductor config patches (`CompileConfig.inductor`'s pairs, or
    a mapping; None: eager) lets Inductor autotune GEMMs: `max_autotune` or `max_autotune_gemm` among them (a
    max-autotune mode is expanded into them)."""
    patches = dict(patches or ())
    return bool(patches.get("max_autotune") or patches.get("max_autotune_gemm"))


@contextlib.contextmanager
def harvesting(enabled: bool = True) -> Iterator[list[GemmChoice]]:
    """Collect every GEMM Inductor autotunes on this thread while open, in order, into the
    yielded list. A GEMM served from Inductor's own autotune cache is reported too (with the
    cached timings); one served by `feeding`, or with a single choice, is not autotuned and not reported.
    With `enabled` False (a compile that autotunes no GEMM: `autotunes_gemms`) it collects
    nothing and installs no hook."""
    if not enabled:
        yield []
        return
    _install()
    records: list[GemmChoice] = []
    with on_this_thread(_state, "harvest", records):
        yield records


@contextlib.contextmanager
def feeding(find: Callable[[str], str | None]) -> Iterator[GemmFeed]:
    """While open, each GEMM Inductor is about to autotune on this thread keeps only the choice
    `find(gemm_key)` names, when that choice is among its current ones; otherwise (None, an
    unknown choice, any error) its choices stay as they are. Never raises into the compile."""
    _install()
    feed = GemmFeed(find)
    with on_this_thread(_state, "feed", feed):
        yield feed


@contextlib.contextmanager
def on_this_thread(state: threading.local, name: str, value: Any) -> Iterator[None]:
    """`state.<name>` is `value` while open, then what it was: Inductor's process-wide hooks read
    it on the thread that compiles, so only that thread's compiles are harvested or fed."""
    previous = getattr(state, name, None)
    setattr(state, name, value)
    try:
        yield
    finally:
        setattr(state, name, previous)


def _install() -> None:
    global _installed
    with _install_lock:
        if _installed:
            return
        from torch._inductor import select_algorithm

        select_algorithm.add_feedback_saver(_save_feedback)
        select_algorithm.add_preprocessing_fn(_feed_choices)
        _installed = True


def _choice_pairs(choices: Sequence[Any]) -> list[tuple[str, str]]:
    from torch._inductor.select_algorithm import create_inputs_key

    return [(str(c.hash_key()), create_inputs_key(c.input_nodes)) for c in choices]


def _save_feedback(timings: Any, name: str, input_nodes: Any, choices: Sequence[Any], *_: Any) -> None:
    """Inductor's feedback hook: inside `harvesting`, record the GEMM just autotuned."""
    records = getattr(_state, "harvest", None)
    if records is None:
        return
    from torch._inductor.select_algorithm import create_inputs_key

    finite = {str(c.hash_key()): float(ms) for c, ms in timings.items() if math.isfinite(ms)}
    if finite:
        records.append(GemmChoice(op=str(name), inputs=create_inputs_key(input_nodes),
                                  key=gemm_key(_choice_pairs(choices)), timings=tuple(sorted(finite.items()))))


def _feed_choices(choices: list[Any]) -> list[Any]:
    """Inductor's preprocessing hook: inside `feeding`, keep only the stored winner when it is there."""
    feed = getattr(_state, "feed", None)
    if feed is None or len(choices) < 2:
        return choices
    try:
        pairs = _choice_pairs(choices)
        winner = feed.find(gemm_key(pairs))
    except Exception as exc:  # noqa: BLE001 - inside Inductor's lowering: a bug must not break the user's compile
        _report_bug(exc)
        winner = None
    index = chosen([name for name, _ in pairs], winner) if winner is not None else None
    if index is None:
        feed.missed += 1
        return choices
    feed.fed += 1
    return [choices[index]]


def _report_bug(exc: Exception) -> None:
    """A failure while feeding is a bug in tuner (the lookup handles the database's own): one
    WARNING per process on `tuner.lookup`, later ones at INFO; the GEMM is autotuned as usual."""
    global _said_bug
    with _install_lock:
        first, _said_bug = not _said_bug, True
    log.log(logging.WARNING if first else logging.INFO,
            "tuner: could not feed a GEMM its stored choice (%s: %s); Inductor autotunes it. This is a bug in "
            "tuner: please report it (the traceback is logged at DEBUG on the tuner.lookup logger)",
            type(exc).__name__, exc)
    log.debug("GEMM feed failed", exc_info=exc)


def chosen(names: Sequence[str], winner: str | None) -> int | None:
    """The position of the stored `winner` among this compile's choice identities; None when
    there is no winner or it is not among them (then Inductor autotunes)."""
    return names.index(winner) if winner is not None and winner in names else None


def save_harvest(records: Sequence[GemmChoice], *, db_url: str | None, device: str) -> int:
    """Store harvested GEMMs in `db_url`'s `kernel_configs` for this machine's `device` platform
    (each kept only if better, `save_kernel_config`); returns how many were stored. Nothing
    without records, a database or on another device than a CPU or CUDA GPU. A database that cannot be
    used is warned about once (`tuner.kernels.guarded_db`), never raised."""
    if not records or db_url is None or not (device == "cpu" or device.startswith("cuda")):
        return 0
    from tuner.kernels import KernelDatabase
    from tuner.platform import current_platform

    db = KernelDatabase(db_url)
    platform = current_platform(device)
    user, host = db.provenance()
    return sum(db.save(record.to_record(platform, user=user, host=host), platform) for record in records)
