"""A stored verdict as code that applies it with torch alone (`tuner best MODEL --emit python|json`).

Many teams will not add a package to a serving image to apply a few compile flags. This turns
the best configs stored for one model's graphs into the `torch.compile(model, mode=..., options=...)`
call that applies them, plus what `options=` cannot carry, set around the compiled model's first
call (the call that traces and compiles): freezing through `torch._inductor.config` (Dynamo decides
at trace time whether weights are constants, so an `options` entry would change nothing) and
`torch._functorch.config` knobs. It also states the conditions the verdict was measured under and,
plainly, what plain `torch.compile` cannot express (graphs with different configs, an eager graph
among compiled ones, a reduced precision, tuned kernel configs) and what `backend="tuner"` adds.

Rows are untrusted input and become source code here, so every row passes the lookup's own check
(`tuner.storage.best_problem`) and the allow-list (`tuner.inductor.compile_config`) first, and every
`options` entry passes torch's own check of `torch.compile(options=...)`; values are written with
`repr` of plain JSON scalars only. A row that fails raises UsageError naming it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tuner.errors import UsageError
from tuner.precision import FP32
from tuner.text import key_values

if TYPE_CHECKING:
    from tuner.keys import Platform
    from tuner.storage import BestConfig
    from tuner.workload import Workload

FROZEN = "freezing"
FORMAT = 1                 # the --emit json format


@dataclass(frozen=True)
class Portable:
    """One model's stored verdict as plain torch: `mode`/`options` for `torch.compile`; `inductor_first`
    and `functorch_first` set around the first call; `compiled` False when the verdict is eager."""

    model: str
    platform: str
    workload_key: str
    verdict: str                                  # "config", "defaults", "eager" or "mixed"
    summary: str                                  # the applied verdict and its confirmed figure
    compiled: bool
    mode: str | None
    options: tuple[tuple[str, Any], ...]
    inductor_first: tuple[tuple[str, Any], ...]
    functorch_first: tuple[tuple[str, Any], ...]
    no_grad: bool                                 # freezing: inference under torch.no_grad() only
    train: bool                                   # measured on training steps
    conditions: tuple[str, ...]
    not_expressed: tuple[str, ...]
    graphs: tuple[dict[str, Any], ...]

    def as_json(self) -> dict[str, Any]:
        """The same as data, for scripts (`--emit json`)."""
        return {"format": FORMAT, "model": self.model, "platform": self.platform, "workload": self.workload_key,
                "verdict": self.verdict, "summary": self.summary,
                "torch_compile": {"compiled": self.compiled, "mode": self.mode, "options": dict(self.options)},
                "mode": "train" if self.train else "inference",
                "around_first_call": {"torch._inductor.config": dict(self.inductor_first),
                                      "torch._functorch.config": dict(self.functorch_first),
                                      "no_grad": self.no_grad},
                "conditions": list(self.conditions), "not_expressed": list(self.not_expressed),
                "graphs": list(self.graphs), "python": self.python()}

    def python(self) -> str:
        """A snippet that defines `tuned_compile(model)` and `first_call()` (`--emit python`)."""
        lines = [f"# tuner's stored verdict for {self.model}, applied with torch alone (no tuner, no database).",
                 f"# Verdict: {self.summary}.", f"# Platform: {self.platform}."]
        lines += [f"# Measured: {c}" for c in self.conditions]
        lines += [f"# Not expressed here: {n}" for n in self.not_expressed]
        lines += ["import contextlib", "", "import torch", "", "", "def tuned_compile(model):",
                  '    """The model compiled as tuner measured it (make its first call inside first_call())."""']
        lines.append(f"    return {self._compile_call()}" if self.compiled else
                     "    return model      # the verdict is eager: uncompiled ran faster than every compile")
        lines += ["", "", "@contextlib.contextmanager", "def first_call():",
                  '    """Around the compiled model\'s first call, which traces and compiles: what `options=` cannot set."""',
                  "    with contextlib.ExitStack() as stack:"]
        if self.no_grad:
            lines.append("        stack.enter_context(torch.no_grad())     # freezing is for inference only")
        if self.inductor_first:
            lines.append(f"        stack.enter_context(torch._inductor.config.patch({_literal(self.inductor_first)}))")
        if self.functorch_first:
            lines += ["        import torch._functorch.config",
                      f"        stack.enter_context(torch._functorch.config.patch({_literal(self.functorch_first)}))"]
        lines += ["        yield", "", "", "# compiled = tuned_compile(model)", "# with first_call():",
                  "#     compiled(*inputs)    # compiles; later calls need nothing more"]
        if self.train:
            lines.append("# In training the first backward compiles too: run it inside first_call() as well.")
        return "\n".join(lines) + "\n"

    def _compile_call(self) -> str:
        if self.mode and not self.options:
            return f"torch.compile(model, mode={self.mode!r})"
        if self.options:
            return f"torch.compile(model, options={_literal(self.options)})"
        return "torch.compile(model)"


def _literal(items: tuple[tuple[str, Any], ...]) -> str:
    """A dict literal of plain JSON scalars (anything else was refused before)."""
    return "{" + ", ".join(f"{k!r}: {v!r}" for k, v in items) + "}"


def portable_verdict(bests: list[BestConfig], *, model: str, workload: Workload, platform: Platform,
                     train: bool = False, shape: str = "", kernels: int = 0) -> Portable:
    """The stored `bests` (one per graph of `workload` on `platform`, as `Store.workload_best`
    returns them) as plain torch code. `kernels` counts the tile configs stored for these graphs
    (backend="tuner" feeds them back). Raises UsageError when a row fails the lookup's checks."""
    from tuner.storage import best_problem

    for best in bests:
        problem = best_problem(best, platform)
        if problem is not None:
            raise UsageError(f"the stored config of graph {best.graph_key[:12]} is refused ({problem}); "
                             f"search again with: tuner search {model}")
    sizes = {g.key: g.num_nodes for g in workload.graphs}
    chosen = max(bests, key=lambda b: sizes.get(b.graph_key, 0))   # the largest graph's, where they differ
    same = all(_applied(b) == _applied(chosen) for b in bests)
    not_expressed = [] if same else [
        f"the model's {len(bests)} graphs hold different verdicts ({'; '.join(_describe(b) for b in bests)}); "
        f"plain torch.compile applies one config to every graph, so this applies the largest graph's. "
        f'backend="tuner" applies each graph its own.']
    params = _applied(chosen)[1]
    parts = _split(params)
    precision = params.get("precision", FP32)
    if precision != FP32:
        not_expressed.append(f"precision {precision} (the graph cast tuner measured) has no torch.compile "
                             f'option; this compiles in fp32. tuner.compile(model, precision="{precision}") '
                             "applies it.")
    if kernels:
        not_expressed.append(f"{kernels} kernel tile config(s) Inductor settled on while tuning: plain "
                             'torch.compile autotunes again; backend="tuner" feeds them back.')
    return Portable(model=model, platform=platform.describe(), workload_key=workload.key,
                    verdict=_verdict_of(chosen) if same else "mixed", summary=_describe(chosen),
                    compiled=not chosen.eager, train=train, not_expressed=tuple(not_expressed), **parts,
                    conditions=_conditions(params, platform, train=train, shape=shape),
                    graphs=tuple(_graph(b) for b in bests))


def _split(params: dict[str, Any]) -> dict[str, Any]:
    """`mode`, `options`, what is set around the first call, and `no_grad`, from knob values: the
    allow-list and torch's own check of `torch.compile(options=...)` decide what goes where."""
    from tuner.inductor import compile_config
    from tuner.search_spaces import mode_options

    config = compile_config(params)         # the allow-list and this torch's knobs; raises SpaceError
    knobs, mode = dict(config.inductor), None
    if config.mode is not None and knobs == dict(mode_options(config.mode)):
        knobs, mode = {}, config.mode       # the mode alone (torch.compile takes mode or options, not both)
    options, first = _torch_checked(knobs)
    if config.freezing:
        first[FROZEN] = True
    return {"mode": mode, "options": tuple(sorted(options.items())), "inductor_first": tuple(sorted(first.items())),
            "functorch_first": config.functorch, "no_grad": config.freezing}


def _torch_checked(knobs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(what `torch.compile(options=...)` accepts, what must be set on `torch._inductor.config`
    instead), by torch's own check of each option."""
    import torch

    options, first = {}, {}
    for name, value in knobs.items():
        if not isinstance(value, (bool, int, float, str)) and value is not None:
            raise UsageError(f"stored knob {name} holds {type(value).__name__}, not a plain value; "
                             "search again to store it anew")
        check = object.__new__(torch._TorchCompileInductorWrapper)   # its option check, not its set-up
        check.config = {}
        try:
            check.apply_options({name: value})
            options[name] = value
        except RuntimeError:
            first[name] = value
    return options, first


def _applied(best: BestConfig) -> tuple[str, dict[str, Any]]:
    """What a row makes a compile do: its kind of verdict and the knobs applied (none for eager or defaults)."""
    kind = _verdict_of(best)
    return kind, dict(best.params) if kind == "config" else {}


def _verdict_of(best: BestConfig) -> str:
    return "eager" if best.eager else "defaults" if best.is_default or not best.params else "config"


def _describe(best: BestConfig) -> str:
    what = {"eager": "eager (uncompiled)", "defaults": "Inductor's defaults"}.get(_verdict_of(best)) or \
        key_values(sorted(best.params.items()))
    return (f"{what}, confirmed {best.speedup:.2f}x [{best.ci_low:.2f}, {best.ci_high:.2f}] over the default "
            f"compile in {best.rounds} paired rounds")


def _graph(best: BestConfig) -> dict[str, Any]:
    return {"graph": best.graph_key, "verdict": _verdict_of(best), "params": dict(best.params),
            "speedup": best.speedup, "ci_low": best.ci_low, "ci_high": best.ci_high, "rounds": best.rounds}


def _conditions(params: dict[str, Any], platform: Platform, *, train: bool, shape: str) -> tuple[str, ...]:
    out = ["whole training steps (get_loss, backward, the optimizer's step), grad enabled." if train else
           "inference calls" + (" under torch.no_grad(): freezing bakes the weights in, so keep every call "
                                "in torch.no_grad() or torch.inference_mode()." if params.get(FROZEN) else ".")]
    threads = dict(platform.hardware).get("threads")
    if platform.device == "cpu" and threads:
        out.append(f"{threads} torch thread(s) (torch.set_num_threads({threads})); another count is another "
                   "platform, and its best config may differ.")
    out.append(f"inputs as the model file's get_inputs({shape}) gives them; other shapes recompile, and "
               "their best config may differ.")
    return tuple(out)


def render(portables: list[Portable], form: str) -> str:
    """The text `--emit FORM` prints: Python snippets (one block per bucket) or JSON."""
    if form == "json":
        data = [p.as_json() for p in portables]
        return json.dumps(data[0] if len(data) == 1 else data, indent=2, sort_keys=True)
    return "\n\n".join(p.python() for p in portables)
