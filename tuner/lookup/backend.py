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
   compiled copy per bucket config and a `tuner.lookup.Dispatcher` that runs each call's
   nearest bucket (`_per_bucket`).

The backend applies only configs that were measured as such (`tuner.lookup.backend_choice`).
A stored config whose precision is not fp32 (`tuner search --precision`) applies only where
the compile call opted in to that precision, `options={"precision": "bf16-autocast"}`, and one
whose search ran with `--unsafe` only where it opted in with `options={"unsafe": True}` (the
backend takes those keys out before Inductor sees the options: `tuner.lookup.opt_in`); elsewhere the graph gets
Inductor's defaults, and the backend says why once per process (a WARNING on `tuner.lookup`).
Freezing is decided by Dynamo before any backend runs, so this plain backend cannot turn it
on: beside a stored config that needs freezing it applies the config measured without
freezing (`BestConfig.unfrozen_params`), or Inductor's defaults where none was measured (a
row from before that field), and then says why once per process at INFO.
`tuner.compile` (see `tuner.lookup.api`) applies the freezing config itself.

Logging: one INFO line per graph on the `tuner.lookup` logger (hit or miss; silent by
default, since Python's default level is WARNING). `TUNER_EXPLAIN=1` prints the full
decision per graph to stderr, once per graph and platform: the backend asks
`tuner.lookup.explanation` after the lookup decided, under the lookup's guard.
"""
from __future__ import annotations

import contextlib
import itertools
import logging
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

from tuner.errors import UsageError
from tuner.lookup.decision import NO_UNFROZEN, Applies, Decision, Tier, backend_choice, short
from tuner.lookup.explanation import Explanation, explain_graph, print_explanation
from tuner.lookup.lookup import GraphLookup, Lookup, process_lookup
from tuner.lookup.opt_in import split_opt_ins
from tuner.precision import FP32

if TYPE_CHECKING:
    import torch.fx

    from tuner.inductor import CompileConfig
    from tuner.keys import GraphFingerprint, Platform
    from tuner.lookup.dispatch import Dispatcher

log = logging.getLogger("tuner.lookup")

_once_lock = threading.Lock()
_said_unmeasured = False
_said_precision = False


class TunerBackend:
    """A Dynamo backend that looks up and applies stored configs.

    `tuner_backend` (the entry point) is the plain instance. `tuner.compile` makes its own
    instances with a `FreezingPlan`, which lets a stored freezing config take effect.
    `lookup` defaults to the process-wide `tuner.lookup.process_lookup()`.
    """

    def __init__(self, *, mode: str | None = None, options: Mapping[str, Any] | None = None,
                 lookup: Lookup | None = None, freezing: "FreezingPlan | None" = None) -> None:
        self.mode = mode
        self.options = dict(options) if options else None
        self._lookup = lookup
        self.freezing = freezing
        self._index = itertools.count()

    @property
    def lookup(self) -> Lookup:
        return self._lookup if self._lookup is not None else process_lookup()

    def __call__(self, gm: "torch.fx.GraphModule", example_inputs: Sequence[Any], **kwargs: Any) -> Callable:
        mode = kwargs.pop("mode", self.mode)
        options = kwargs.pop("options", self.options)
        if kwargs:
            raise UsageError(f"the tuner backend takes mode= and options= only, got {', '.join(sorted(kwargs))}; "
                             f"pass Inductor settings as options={{...}}")
        opt_in, options = split_opt_ins(options)
        precision, unsafe = opt_in.precision, opt_in.unsafe
        index = next(self._index)
        decision = self.freezing.decision_for_frozen_trace() if self.freezing is not None else None
        explanation, note = None, "frozen re-trace, decided from the first call"
        fingerprint: "GraphFingerprint | None" = None
        if decision is None:
            lookup, note = self.lookup, ""
            found = lookup.decide_graph(gm, example_inputs, index=index)
            decision, fingerprint = found.decision, found.fingerprint
            explanation = _explanation(lookup, found, index) if lookup.settings.explain else None
            if self.freezing is not None and self.freezing.probe(decision, precision=precision, unsafe=unsafe):
                _report(index, decision, explanation,
                        note="runs uncompiled this once; compiled with freezing from the next call")
                return gm.forward
            if decision.tier is Tier.MISS and found.fingerprint is not None and decision.platform is not None:
                dispatcher = _per_bucket(lookup, gm, example_inputs, found.fingerprint, decision.platform, index,
                                         mode=mode, options=options, precision=precision, unsafe=unsafe)
                if dispatcher is not None:      # a dynamic graph of tuned shape buckets (tuner.lookup.dispatch)
                    return dispatcher
        choice = backend_choice(decision, traced_frozen=_traced_frozen(), precision=precision, unsafe=unsafe)
        _report(index, decision, explanation, note="; ".join(n for n in (note, choice.note) if n))
        if choice.applies is Applies.UNMEASURED:
            _say_unmeasured_once(decision)
        if choice.applies is Applies.NOT_OPTED_IN:
            _say_not_opted_in_once(decision, choice.note)
        if choice.applies is Applies.EAGER:
            return gm.forward
        from tuner.inductor import make_backend

        kernels = _triton_feed(self.lookup, decision, choice.config, index,
                               graph_key=_own_key(self.lookup, gm, example_inputs, fingerprint, index))
        with _gemm_feed(self.lookup, decision, choice.config, index):
            return make_backend(choice.config, user_patches=kernels)(gm, example_inputs, mode=mode, options=options)


class FreezingPlan:
    """How one `tuner.compile`d model gets a stored freezing config applied.

    Phase 1 (the first call with grad off, traced normally): each graph is looked up by its key. If a
    graph's config turns freezing on and grad is off, that graph runs uncompiled for this
    one call (`probe`) and the plan asks for phase 2. Phase 2 (every later call, under
    `trace_context`): Dynamo re-traces with parameters as constants; those graphs have
    other keys than the stored ones, so the n-th frozen graph gets the n-th decision of
    phase 1 (`decision_for_frozen_trace`). Graphs traced beyond them (new shapes) are
    looked up by their own key, which misses for a frozen graph.
    """

    def __init__(self) -> None:
        self.decisions: list[Decision] = []     # phase 1's graphs, in Dynamo's order
        self.probing = False                    # set by tuner.compile around the first no-grad call
        self.requested = False                  # some graph of that call wants freezing
        self._frozen_seen = 0

    def probe(self, decision: Decision, *, precision: str = FP32, unsafe: bool = False) -> bool:
        """Phase 1: remember the decision; True when its graph should run uncompiled this once
        because its config turns freezing on (and grad is off) in fp32 or the opted-in `precision`,
        from a search without --unsafe unless the call opted in (`unsafe`)."""
        import torch

        if not self.probing or torch.is_grad_enabled():
            return False
        self.decisions.append(decision)
        if (decision.hit and decision.config.freezing and decision.config.precision in (FP32, precision)
                and (unsafe or decision.best is None or not decision.best.unsafe)):
            self.requested = True
            return True
        return False

    def decision_for_frozen_trace(self) -> Decision | None:
        """Phase 2: the phase-1 decision for the graph Dynamo is tracing now, when it is a
        frozen trace (prepare_freezing on, grad off) within phase 1's graph count."""
        import torch
        import torch._dynamo.config as dynamo_config

        if not (self.requested and not self.probing and dynamo_config.prepare_freezing
                and not torch.is_grad_enabled()):
            return None
        n, self._frozen_seen = self._frozen_seen, self._frozen_seen + 1
        return self.decisions[n] if n < len(self.decisions) else None


def _per_bucket(lookup: Lookup, gm: "torch.fx.GraphModule", example_inputs: Sequence[Any],
                fingerprint: "GraphFingerprint", platform: "Platform", index: int, *, mode: str | None,
                options: Mapping[str, Any] | None, precision: str, unsafe: bool = False) -> "Dispatcher | None":
    """For a graph with symbolic sizes that tuned shape buckets bind (`Lookup.bucket_decisions`):
    one copy of the graph per distinct config the buckets apply (`backend_choice` per bucket),
    compiled now, and the `tuner.lookup.Dispatcher` that runs each call's nearest bucket.
    None for a static graph or when no bucket binds (the graph is then a plain miss)."""
    import copy

    from tuner.inductor import make_backend
    from tuner.lookup.dispatch import Dispatcher, symbol_sites

    sites = symbol_sites(fingerprint.code)
    buckets = lookup.bucket_decisions(fingerprint, platform) if sites else []
    if not buckets:
        return None
    copies: list[Callable] = []
    copy_of: dict[str, int] = {}
    rows = []
    for sizes, bucket in buckets:
        choice = backend_choice(bucket, traced_frozen=_traced_frozen(), precision=precision, unsafe=unsafe)
        eager = choice.applies is Applies.EAGER
        key = "eager" if eager else repr(choice.config)
        if key not in copy_of:          # buckets that apply the same config share one compiled copy
            copy_of[key] = len(copies)
            copies.append(gm.forward if eager else make_backend(choice.config)(
                copy.deepcopy(gm), example_inputs, mode=mode, options=options))
        rows.append((sizes, copy_of[key]))
    log.info("tuner: graph %d (key %s): symbolic sizes; %d tuned shape bucket(s) bind it (%s); %d compiled "
             "copies, each call runs its nearest bucket's", index, short(fingerprint.key), len(rows),
             "; ".join(b.reason.split(" of this dynamic graph")[0] for _, b in buckets), len(copies))
    return Dispatcher(sites, rows, copies)


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
    lookup's fingerprint, or for a frozen re-trace (decided from the first call, so never
    fingerprinted) its own, the key its kernels were harvested under in a freezing trial."""
    if fingerprint is not None:
        return lambda: fingerprint.key

    def compute() -> str | None:
        from tuner.workload import fingerprint_graph

        found = lookup.guarded("fingerprint", index, lambda: fingerprint_graph(gm, list(example_inputs), index=index))
        return None if found is None else found.key

    return compute


def _triton_feed(lookup: Lookup, decision: Decision, config: "CompileConfig", index: int, *,
                 graph_key: Callable[[], str | None]) -> dict[str, Any] | None:
    """For a CUDA graph whose applied config tunes Inductor's Triton kernels: the configs they
    settled on when that config was measured on this graph (`graph_key()`, the graph as traced now:
    `tuner.inductor.triton_choices`), as the `autotune_lookup_table` patch, so those kernels benchmark
    nothing; None when there are none."""
    from tuner.inductor import triton_choices

    platform = decision.platform
    if platform is None or platform.device != "cuda" or not triton_choices.autotunes_triton(config.inductor):
        return None
    key = graph_key()
    table = None if key is None else lookup.guarded("read the Triton kernel configs of", index,
                                                    lambda: lookup.triton_table(key, platform.key))
    if not table:
        return None
    log.info("tuner: graph %d (key %s): %d Triton kernel(s) take their stored tile config",
             index, short(key), len(table))
    return {"autotune_lookup_table": table}


@contextlib.contextmanager
def _gemm_feed(lookup: Lookup, decision: Decision, config: "CompileConfig", index: int) -> Iterator[None]:
    """Around the compile of a graph whose applied config turns on `max_autotune`: each GEMM
    Inductor would autotune takes the winner harvested when that config was measured
    (`tuner.inductor.gemm_choices`), benchmarking nothing; GEMMs without one are autotuned as usual."""
    from tuner.inductor import gemm_choices

    platform = decision.platform
    if platform is None or platform.device not in ("cpu", "cuda") or not gemm_choices.autotunes_gemms(config.inductor):
        yield
        return

    with gemm_choices.feeding(lambda key: lookup.gemm_winner(key, platform.key)) as feed:
        yield
    if feed.fed or feed.missed:
        log.info("tuner: graph %d (key %s): %d GEMM(s) took their stored choice, %d autotuned by Inductor",
                 index, short(decision.graph_key), feed.fed, feed.missed)


def _traced_frozen() -> bool:
    """Dynamo is tracing with parameters as constants (prepare_freezing, grad off): only then
    can a config that needs freezing apply as stored."""
    import torch
    import torch._dynamo.config as dynamo_config

    return bool(dynamo_config.prepare_freezing) and not torch.is_grad_enabled()


def _say_unmeasured_once(decision: Decision) -> None:
    """Once per process, at INFO: why a graph whose stored config needs freezing got Inductor's defaults."""
    global _said_unmeasured
    with _once_lock:
        first, _said_unmeasured = not _said_unmeasured, True
    if first:
        log.info("tuner: graph %s: %s(model) under torch.no_grad(). Until then backend=\"tuner\" compiles "
                 "such graphs with Inductor's defaults", short(decision.graph_key), NO_UNFROZEN)


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
