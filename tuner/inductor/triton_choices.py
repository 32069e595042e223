"""Inductor's generated Triton kernels (CUDA): the tile config each one settled on, harvested where
a config is measured, fed back at lookup through Inductor's `autotune_lookup_table`.

On CUDA every pointwise and reduction kernel Inductor generates is a `CachingAutotuner` holding a
list of candidate tile configs (several under `max_autotune`; coordinate descent refines the
winner). At its first launch it benchmarks them and keeps one launcher. torch 2.13 keeps no
record of that choice outside its own cache folder, but it reads a process-wide table before it
builds a kernel: `config.autotune_lookup_table` maps `generate_lookup_hash_from_source_code(
str(size_hints), source)` to one config (block sizes, `num_warps`, `num_stages`), and a kernel
found there gets that single config, so it benchmarks nothing (only kernels whose source holds
"_fused_", Inductor's rule). The table is an ordinary config entry, so a per-graph patch sets it.

- `harvesting()` + `attributing(graph_key)`: around a verified trial's first call, every kernel
  built while a graph compiles (a `gc` scan before and after: torch offers no creation hook) is
  attributed to that graph; after the call, `Harvest.choices()` reads the config each settled on.
- `table(records)`: the stored configs of one graph as the `autotune_lookup_table` patch.

Rows live in `kernel_configs` as `inductor-triton:<graph key>` (one per kernel and graph), so a
lookup reads only its own graph's kernels and the patch (part of Inductor's cache key) changes
only when that graph is re-harvested. Inductor keeps no per-config timing once a kernel settles;
`latency_ms` is the winner's benchmark when this module saw it (`_observe_timings`), else 0.
"""
from __future__ import annotations

import contextlib
import gc
import hashlib
import math
import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping

if TYPE_CHECKING:
    from tuner.keys import Platform
    from tuner.storage import KernelConfig

KEY_FORMAT = 1
KERNEL_PREFIX = "inductor-triton:"     # kernel_configs.kernel_name: prefix + graph key
LAUNCH_OPTIONS = ("num_warps", "num_stages")
TUNED_HEURISTICS = {"POINTWISE", "REDUCTION", "PERSISTENT_REDUCTION", "SPLIT_SCAN"}   # HeuristicType names
AUTOTUNE_KNOBS = ("max_autotune", "max_autotune_pointwise", "coordinate_descent_tuning")

_state = threading.local()             # .harvest: Harvest | None
_install_lock = threading.Lock()
_observing = False


@dataclass(frozen=True)
class TritonChoice:
    """The config one generated kernel of one graph settled on: Inductor's kernel name, its size
    hints and lookup hash as Inductor computes them, the config (block sizes, `num_warps`,
    `num_stages`), the winner's benchmark in ms (0.0: not reported) and how many configs it had."""

    graph_key: str
    kernel: str
    size_hints: str
    lookup_hash: str
    config: tuple[tuple[str, int], ...]
    latency_ms: float
    configs_tried: int

    @property
    def key(self) -> str:
        """The `kernel_configs` key: one row per (graph, kernel) and platform."""
        text = f"{KEY_FORMAT}|{self.graph_key}|{self.lookup_hash}"
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def to_record(self, platform: "Platform", *, user: str, host: str) -> "KernelConfig":
        """This choice as a `kernel_configs` row on `platform` (`storage/kernel_table.py`)."""
        from tuner.storage import KernelConfig

        software = dict(platform.software)
        key_args = (("kernel", self.kernel[:255]), ("size_hints", self.size_hints[:255]),
                    ("lookup_hash", self.lookup_hash))
        return KernelConfig(
            kernel_key=self.key, kernel_name=(KERNEL_PREFIX + self.graph_key)[:255], platform_key=platform.key,
            key_args=key_args, dtypes="", config=self.config, latency_ms=self.latency_ms, spread_ms=0.0,
            configs_tried=self.configs_tried, space_size=self.configs_tried, user=user[:255], host=host[:255],
            tuner_version=software.get("tuner", "")[:64], torch_version=software.get("torch", "")[:128],
            triton_version=software.get("triton", "")[:128])


def lookup_hash(size_hints: str, source: str) -> str:
    """Inductor's own key of a generated kernel in `autotune_lookup_table`."""
    from torch._inductor.runtime.triton_heuristics import generate_lookup_hash_from_source_code

    return generate_lookup_hash_from_source_code(size_hints, source)


def autotunes_triton(patches: Mapping[str, Any] | Iterable[tuple[str, Any]] | None) -> bool:
    """Whether compiling with these Inductor config patches (`CompileConfig.inductor`'s pairs, or
    a mapping; None: eager) lets Inductor tune its generated Triton kernels beyond its default heuristics:
    `max_autotune`, `max_autotune_pointwise` or coordinate descent."""
    patches = dict(patches or ())
    return any(bool(patches.get(knob)) for knob in AUTOTUNE_KNOBS)


class Harvest:
    """The kernels built per graph while a `harvesting` context is open on this thread."""

    def __init__(self) -> None:
        self.graphs: list[tuple[str, list[weakref.ref]]] = []

    def choices(self) -> list[TritonChoice]:
        """The config every attributed kernel settled on; call after the first call ran them.
        A kernel not yet launched (or not one Inductor tunes) is left out."""
        found = []
        for graph_key, refs in self.graphs:
            for ref in refs:
                autotuner = ref()
                choice = None if autotuner is None else settled_choice(autotuner, graph_key)
                if choice is not None:
                    found.append(choice)
        return found


@contextlib.contextmanager
def harvesting(enabled: bool = True) -> Iterator[Harvest]:
    """While open, `attributing` records on this thread the kernels each graph's compile builds.
    With `enabled` False (a compile that tunes no Triton kernel: `autotunes_triton`, or a CPU
    model) it records nothing and scans nothing."""
    harvest = Harvest()
    if not enabled:
        yield harvest
        return
    from tuner.inductor.gemm_choices import on_this_thread

    _observe_timings()
    with on_this_thread(_state, "harvest", harvest):
        yield harvest


@contextlib.contextmanager
def attributing(graph_key: Callable[[], str]) -> Iterator[None]:
    """Around one graph's compile: inside `harvesting`, the kernels it builds are that graph's
    (`graph_key()`, called only then). Outside one it does nothing."""
    harvest = getattr(_state, "harvest", None)
    if harvest is None:
        yield
        return
    before = {id(a) for a in _live_autotuners()}
    yield
    built = [weakref.ref(a) for a in _live_autotuners() if id(a) not in before]
    if built:
        harvest.graphs.append((graph_key(), built))


def settled_choice(autotuner: Any, graph_key: str) -> TritonChoice | None:
    """The config one `CachingAutotuner` settled on (its single launcher), or None: not launched
    yet, a kind Inductor's lookup table does not serve (templates, user kernels, sources without
    "_fused_"), or a config that is not plain integers."""
    launchers = list(getattr(autotuner, "launchers", None) or [])
    heuristic = getattr(getattr(autotuner, "heuristic_type", None), "name", None)
    source = getattr(getattr(autotuner, "fn", None), "src", "")
    if len(launchers) != 1 or heuristic not in TUNED_HEURISTICS or "_fused_" not in source:
        return None
    config = launchers[0].config
    entries = {name: value for name, value in config.kwargs.items() if "BLOCK" in name}
    entries.update(num_warps=config.num_warps, num_stages=config.num_stages)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in entries.values()):
        return None
    from tuner.storage import triton_config_problem

    if triton_config_problem(entries) is not None:      # a row every import and lookup would refuse
        return None
    timings = getattr(autotuner, "_tuner_timings", {}) or {}
    latency = timings.get(_config_text(config))
    size_hints = str(autotuner.size_hints)
    return TritonChoice(graph_key=graph_key, kernel=str(autotuner.fn.__name__), size_hints=size_hints,
                        lookup_hash=lookup_hash(size_hints, source), config=tuple(sorted(entries.items())),
                        latency_ms=float(latency) if latency is not None and math.isfinite(latency) else 0.0,
                        configs_tried=max(len(getattr(autotuner, "configs", ())), len(timings), 1))


def table(records: Iterable["KernelConfig"]) -> dict[str, dict[str, int]]:
    """Stored `inductor-triton:` rows as Inductor's `autotune_lookup_table` (lookup hash -> config);
    a row without a lookup hash or launch options is skipped."""
    found: dict[str, dict[str, int]] = {}
    for record in records:
        key = dict(record.key_args).get("lookup_hash")
        config = record.config_dict()
        if isinstance(key, str) and all(isinstance(config.get(name), int) for name in LAUNCH_OPTIONS):
            found[key] = {name: value for name, value in config.items() if isinstance(value, int)}
    return found


def save_harvest(choices: list[TritonChoice], *, db_url: str | None, device: str) -> int:
    """Store harvested kernel configs in `db_url`'s `kernel_configs` for this machine's `device`
    platform (kept only if better, `save_kernel_config`); how many were stored. Nothing without
    choices or a database, or off CUDA. A database that cannot be used is warned about once."""
    if not choices or db_url is None or not device.startswith("cuda"):
        return 0
    from tuner.kernels import KernelDatabase
    from tuner.platform import current_platform

    db = KernelDatabase(db_url)
    platform = current_platform(device)
    user, host = db.provenance()
    return sum(db.save(choice.to_record(platform, user=user, host=host), platform) for choice in choices)


def remember_timings(autotuner: Any, timings: Any) -> None:
    """Keep `timings` (launcher -> ms, as `benchmark_all_configs` returns them) on `autotuner`
    by config, for `settled_choice`. Never raises: an observer must not change what Inductor does."""
    try:
        autotuner._tuner_timings = {_config_text(launcher.config): float(ms) for launcher, ms in timings.items()}
    except Exception:  # noqa: BLE001 - see the docstring
        pass


def _live_autotuners() -> list[Any]:
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    # type(), not isinstance(): isinstance reads __class__, which some lazy module proxies turn into warnings.
    return [obj for obj in gc.get_objects() if issubclass(type(obj), CachingAutotuner)]


def _config_text(config: Any) -> str:
    return str(config)


def _observe_timings() -> None:
    """Keep each kernel's benchmark timings on it (`_tuner_timings`, by config) so a harvest can
    report the winner's: Inductor returns them from `benchmark_all_configs` and drops them. An
    observer only: the timings and the choice are Inductor's own. Installed once per process."""
    global _observing
    with _install_lock:
        if _observing:
            return
        from torch._inductor.runtime.triton_heuristics import CachingAutotuner

        original = CachingAutotuner.benchmark_all_configs

        def benchmark_all_configs(self: Any, *args: Any, **kwargs: Any) -> Any:
            timings = original(self, *args, **kwargs)
            remember_timings(self, timings)
            return timings

        CachingAutotuner.benchmark_all_configs = benchmark_all_configs
        _observing = True
