"""The `tuner` Dynamo backend: per graph, apply the stored best config for this machine.

`torch.compile(model, backend="tuner")` reaches `tuner_backend` through the
`torch_dynamo_backends` entry point, without the user importing tuner. For each graph
Dynamo hands it, the backend

1. fingerprints the graph (`tuner.workload.fingerprint_graph`, the search's own key) and
   reads the best config for this platform (`tuner.lookup`: exact tier, then same
   hardware under other software; cached per process; never raises);
2. compiles with Inductor (`tuner.inductor.compiler.make_backend`), the user's `mode=` and
   `options=` underneath and the stored config on top: **for a knob both set, the stored
   config wins**; knobs the stored config does not set keep the user's values. On a miss
   the user's mode and options are all there is, exactly as with `backend="inductor"`.
   Where the stored verdict is "eager won", the graph runs uncompiled (`gm.forward`).
   A graph with symbolic sizes that tuned shape buckets bind (`tuner search --shapes`) gets one
   compiled copy per bucket config and a `tuner.lookup.dispatch.Dispatcher` that runs each call's
   nearest bucket (`_per_bucket`).

The backend applies only configs that were measured as such (`tuner.lookup.choice.backend_choice`).
A stored config whose precision is not fp32 (`tuner search --precision`) applies only where
the compile call opted in to that precision, `options={"precision": "bf16-autocast"}`, and one
whose search ran with `--unsafe` only where it opted in with `options={"unsafe": True}` (the
backend takes those keys out before Inductor sees the options: `tuner.lookup.opt_in`); elsewhere the graph gets
Inductor's defaults, and the backend says why once per process (a WARNING on `tuner.lookup`).
A stored config that turns freezing on applies, freezing included, to a graph compiled with
grad disabled (`torch.no_grad()` or `torch.inference_mode()`): the backend binds the graph's
parameter and buffer inputs as constants itself (`tuner.inductor.freezing`) and re-freezes or
runs unfrozen when the weights change. With grad enabled it applies the config measured without
freezing (`BestConfig.unfrozen_params`), or Inductor's defaults where none was measured, and
says why once per process at INFO. Every compile under a stored config is guarded
(`tuner.lookup.fallback`): a config that fails here gives Inductor's defaults and one warning.
A stored verdict's runtime knobs (`tuner.runtime`: the allocator, OpenMP's policy) apply where the
verdict applies as stored: what a running process can still set (glibc's malloc parameters) is
set at that graph's compile, and what it cannot is named once, in one WARNING (`apply_runtime_once`).

Logging: one INFO line per graph on the `tuner.lookup` logger (hit or miss; silent by
default, since Python's default level is WARNING). `TUNER_EXPLAIN=1` prints the full
decision per graph to stderr, once per graph and platform: the backend asks
`tuner.lookup.explanation` after the lookup decided, under the lookup's guard.
"""
from __future__ import annotations

import copy
import itertools
import logging
import threading
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from tuner.errors import UsageError
from tuner.inductor import CompileConfig, make_backend
from tuner.lookup.choice import NO_UNFROZEN, Applies, Choice, backend_choice
from tuner.lookup.decision import Decision, Tier, short
from tuner.lookup.dispatch import Dispatcher, symbol_sites
from tuner.lookup.explanation import Explanation, config_text, explain_graph, print_explanation
from tuner.lookup.fallback import compile_stored
from tuner.lookup.kernel_feed import gemm_feed, triton_feed
from tuner.lookup.lookup import GraphLookup, Lookup, process_lookup
from tuner.lookup.opt_in import split_opt_ins
from tuner.workload import fingerprint_graph

if TYPE_CHECKING:
    import torch.fx

    from tuner.keys import GraphFingerprint, Platform

log = logging.getLogger("tuner.lookup")

_once_lock = threading.Lock()
_said_unmeasured = False
_said_precision = False


class TunerBackend:
    """A Dynamo backend that looks up and applies stored configs.

    `tuner_backend` (the entry point) is the plain instance; `tuner.compile` makes its own, with
    its own `lookup` where `db=` is given. `lookup` defaults to the process-wide
    `tuner.lookup.lookup.process_lookup()`.
    """

    def __init__(self, *, mode: str | None = None, options: Mapping[str, Any] | None = None,
                 lookup: Lookup | None = None) -> None:
        self.mode = mode
        self.options = dict(options) if options else None
        self._lookup = lookup
        self._index = itertools.count()

    @property
    def lookup(self) -> Lookup:
        return self._lookup if self._lookup is not None else process_lookup()

    def __call__(self, gm: "torch.fx.GraphModule", example_inputs: Sequence[Any], **kwargs: Any) -> Callable:
        import torch

        mode = kwargs.pop("mode", self.mode)
        options = kwargs.pop("options", self.options)
        if kwargs:
            raise UsageError(f"the tuner backend takes mode= and options= only, got {', '.join(sorted(kwargs))}; "
                             f"pass Inductor settings as options={{...}}")
        opt_in, options = split_opt_ins(options)
        precision, unsafe = opt_in.precision, opt_in.unsafe
        index = next(self._index)
        lookup = self.lookup
        found = lookup.decide_graph(gm, example_inputs, index=index)
        decision, fingerprint = found.decision, found.fingerprint
        explanation = _explanation(lookup, found, index) if lookup.settings.explain else None
        build = _Build(lookup, gm, example_inputs, index, mode, options, precision, unsafe)
        if decision.tier is Tier.MISS and fingerprint is not None and decision.platform is not None:
            dispatcher = _per_bucket(build, fingerprint, decision.platform)
            if dispatcher is not None:      # a dynamic graph of tuned shape buckets (tuner.lookup.dispatch)
                return dispatcher
        choice = backend_choice(decision, can_freeze=not torch.is_grad_enabled(), precision=precision, unsafe=unsafe)
        _report(index, decision, explanation, note=choice.note)
        if choice.applies is Applies.UNMEASURED:
            _say_unmeasured_once(decision)
        if choice.applies is Applies.NOT_OPTED_IN:
            _say_not_opted_in_once(decision, choice.note)
        if choice.applies in (Applies.CONFIG, Applies.EAGER) and decision.hit and decision.best is not None:
            apply_runtime_once(decision.best.runtime, lookup.settings)
        return build.compiled(decision, choice, gm, fingerprint)


class _Build:
    """How one graph handed to the backend gets compiled: under a stored choice (guarded by
    `tuner.lookup.fallback`, with the GEMM and Triton feeds), or with the user's own mode and
    options only (Inductor's defaults)."""

    def __init__(self, lookup: Lookup, gm: "torch.fx.GraphModule", example_inputs: Sequence[Any], index: int,
                 mode: str | None, options: Mapping[str, Any] | None, precision: str, unsafe: bool) -> None:
        self.lookup, self.gm, self.inputs, self.index = lookup, gm, example_inputs, index
        self.mode, self.options, self.precision, self.unsafe = mode, options, precision, unsafe

    def defaults(self, gm: "torch.fx.GraphModule") -> Callable:
        return make_backend(CompileConfig())(gm, self.inputs, mode=self.mode, options=self.options)

    def compiled(self, decision: Decision, choice: Choice, gm: "torch.fx.GraphModule",
                 fingerprint: "GraphFingerprint | None") -> Callable:
        """The compiled graph `gm` (this graph, or a per-bucket copy of it) under `choice`."""
        if choice.applies is Applies.EAGER:
            return gm.forward
        if choice.config.is_default:
            return self.defaults(gm)
        thaw = None
        if choice.config.freezing:      # with grad enabled (or weights that keep changing): measured without
            thawed = backend_choice(decision, can_freeze=False, precision=self.precision, unsafe=self.unsafe)
            thaw = (lambda g, inputs: g.forward) if thawed.applies is Applies.EAGER else (
                lambda g, inputs: make_backend(thawed.config)(g, inputs, mode=self.mode, options=self.options))

        def stored() -> Callable:
            kernels = triton_feed(self.lookup, decision, choice.config, self.index,
                                   graph_key=_own_key(self.lookup, gm, self.inputs, fingerprint, self.index))
            with gemm_feed(self.lookup, decision, choice.config, self.index):
                return make_backend(choice.config, user_patches=kernels, thaw=thaw)(
                    gm, self.inputs, mode=self.mode, options=self.options)

        what = f"graph {self.index} (key {short(decision.graph_key)}: {config_text(choice.config)})"
        return compile_stored(f"{decision.graph_key} {choice.config!r}", what, stored,
                              lambda: self.defaults(gm), self.lookup.warn_once)


def _per_bucket(build: _Build, fingerprint: "GraphFingerprint", platform: "Platform") -> Dispatcher | None:
    """For a graph with symbolic sizes that tuned shape buckets bind (`Lookup.bucket_decisions`):
    one copy of the graph per distinct config the buckets apply (`backend_choice` per bucket),
    compiled now (each under `fallback`'s guard), and the `tuner.lookup.dispatch.Dispatcher` that runs each
    call's nearest bucket. None for a static graph or when no bucket binds (the graph is then a
    plain miss)."""
    import torch

    sites = symbol_sites(fingerprint.code)
    buckets = build.lookup.bucket_decisions(fingerprint, platform) if sites else []
    if not buckets:
        return None
    copies: list[Callable] = []
    copy_of: dict[str, int] = {}
    rows = []
    for sizes, bucket in buckets:
        choice = backend_choice(bucket, can_freeze=not torch.is_grad_enabled(), precision=build.precision,
                                unsafe=build.unsafe)
        key = "eager" if choice.applies is Applies.EAGER else repr(choice.config)
        if key not in copy_of:          # buckets that apply the same config share one compiled copy
            copy_of[key] = len(copies)
            copies.append(build.compiled(bucket, choice, copy.deepcopy(build.gm), fingerprint))
        rows.append((sizes, copy_of[key]))
    log.info("tuner: graph %d (key %s): symbolic sizes; %d tuned shape bucket(s) bind it (%s); %d compiled "
             "copies, each call runs its nearest bucket's", build.index, short(fingerprint.key), len(rows),
             "; ".join(b.reason.split(" of this dynamic graph")[0] for _, b in buckets), len(copies))
    return Dispatcher(sites, rows, copies, warn=build.lookup.warn_once)


def _explanation(lookup: Lookup, found: GraphLookup, index: int) -> Explanation | None:
    """With TUNER_EXPLAIN: the explanation of graph `index` the first time this process meets
    it on this platform, else None. Never raises (`Lookup.guarded`)."""
    fingerprint, platform = found.fingerprint, found.decision.platform
    if fingerprint is None or platform is None or not lookup.first_explanation(found.decision):
        return None
    return lookup.guarded("explain", index, lambda: explain_graph(lookup, fingerprint, platform))


def _own_key(lookup: Lookup, gm: "torch.fx.GraphModule", example_inputs: Sequence[Any],
             fingerprint: "GraphFingerprint | None", index: int) -> Callable[[], str | None]:
    """The key of the graph being compiled, computed on first use (None if that fails): the
    lookup's fingerprint, or where that failed the graph's own (computed again, guarded)."""
    if fingerprint is not None:
        return lambda: fingerprint.key

    def compute() -> str | None:
        found = lookup.guarded("fingerprint", index, lambda: fingerprint_graph(gm, list(example_inputs), index=index))
        return None if found is None else found.key

    return compute


_applied_runtime: set[Any] = set()


def apply_runtime_once(runtime_knobs: Mapping[str, Any], settings: Any) -> None:
    """A stored verdict's runtime knobs (`tuner.runtime`), once per process and setting: what a
    running process can still set is set now; what it cannot (an allocator to preload, OpenMP's
    environment) is named in one WARNING with the way to start the program with it."""
    from tuner.errors import SpaceError
    from tuner.runtime import RuntimeConfig

    try:        # checked when the row was read (tuner.storage.trust) and again here, where it applies
        runtime = RuntimeConfig.from_dict(runtime_knobs)
    except SpaceError as exc:
        log.warning("tuner: a stored config's runtime knobs are refused (%s); the process keeps its own", exc)
        return
    with _once_lock:
        if runtime.is_default or runtime in _applied_runtime:
            return
        _applied_runtime.add(runtime)
    missing = runtime.apply_running(dict(settings.process_env))
    if missing:
        log.warning("tuner: the stored config was measured in a process with %s; not in effect here: %s; start "
                    "the program with: tuner run --model MODEL.py SCRIPT.py (docs/lookup.md, Runtime knobs)",
                    runtime.label(), "; ".join(missing))


def _say_unmeasured_once(decision: Decision) -> None:
    """Once per process, at INFO: why a graph whose stored config needs freezing got Inductor's defaults."""
    global _said_unmeasured
    with _once_lock:
        first, _said_unmeasured = not _said_unmeasured, True
    if first:
        log.info("tuner: graph %s: %s. Until then backend=\"tuner\" compiles such graphs with Inductor's "
                 "defaults when grad is enabled", short(decision.graph_key), NO_UNFROZEN)


def _say_not_opted_in_once(decision: Decision, note: str) -> None:
    """Once per process, a WARNING: a stored config changes precision and the compile call did not
    opt in, so its graph got Inductor's defaults (never an error: the program runs as untuned)."""
    global _said_precision
    with _once_lock:
        first, _said_precision = not _said_precision, True
    if first:
        log.warning("tuner: graph %s: %s", short(decision.graph_key), note)


def _report(index: int, decision: Decision, explanation: Explanation | None = None, *, note: str = "") -> None:
    """One INFO line per graph; with TUNER_EXPLAIN=1 the explanation (first time only) to stderr."""
    suffix = f"; {note}" if note else ""
    what = {Tier.EXACT: "exact hit", Tier.SAME_HARDWARE: "same-hardware hit",
            Tier.NEAREST_BUCKET: "nearest-bucket hit"}.get(decision.tier)
    if what is not None:
        log.info("tuner: graph %d (key %s): %s: %s%s", index, short(decision.graph_key), what,
                 decision.reason, suffix)
    else:
        log.info("tuner: graph %d (key %s): %s: %s; compiling with Inductor's defaults%s", index,
                 short(decision.graph_key), "miss" if decision.tier is Tier.MISS else "no lookup",
                 decision.reason, suffix)
    if explanation is not None:
        print_explanation(explanation, note=note)


_plain = TunerBackend()


def tuner_backend(gm: "torch.fx.GraphModule", example_inputs: Sequence[Any], **kwargs: Any) -> Callable:
    """The `torch_dynamo_backends` entry point: `torch.compile(model, backend="tuner")`.

    Accepts `mode=` and `options=` as `backend="inductor"` does; see the module docstring.
    """
    return _plain(gm, example_inputs, **kwargs)
