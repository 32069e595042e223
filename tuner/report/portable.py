"""A stored verdict as code that applies it with torch alone (`tuner best MODEL --emit python|json`).

Many teams will not add a package to a serving image to apply a few compile flags. This turns
the best configs stored for one model's graphs into a Dynamo backend of their own (Inductor's
`compile_fx` with the config's patches, a mode expanded) and `torch.compile(model, backend=...)`,
plus what must be set around the compiled model's first call, which traces and compiles: freezing
through `torch._inductor.config` (Dynamo decides at trace time whether weights are constants) and
`torch._functorch.config` knobs; and the verdict's runtime knobs, as the environment to start the
program with and what a running process can still set (`tuner.report.portable_code` writes the
snippet). It also states the conditions the verdict was measured under and, plainly, what plain
`torch.compile` cannot express (graphs with different configs, an eager graph among compiled ones,
a reduced precision, tuned kernel configs) and what `backend="tuner"` adds.

Rows are untrusted input and become source code here, so every row passes the lookup's own check
(`tuner.storage.best_problem`: its knobs against the allow-list, its runtime knobs against their
list) and `tuner.inductor.compile_config` first; values are written with `repr` of plain JSON
scalars only. A row that fails raises UsageError naming it. Text that is not a row (the model path
as the user typed it, the platform's description) goes into comments only, each on one line with
its line breaks and other unprintable characters escaped (`portable_code.comment`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tuner.errors import UsageError
from tuner.precision import FP32
from tuner.report.portable_code import snippet
from tuner.text import key_values

if TYPE_CHECKING:
    from tuner.keys import Platform
    from tuner.storage import BestConfig
    from tuner.workload import Workload

FROZEN = "freezing"
FORMAT = 2                 # the --emit json format (2: the backend's config patches, runtime knobs, stability)


@dataclass(frozen=True)
class Portable:
    """One model's stored verdict as plain torch: `patches` for the backend's `compile_fx` (empty:
    Inductor's defaults); `inductor_first` and `functorch_first` set around the first call;
    `compiled` False when the verdict is eager; `runtime` its runtime knobs, `runtime_env` the
    environment they need at start, `runtime_set` the glibc malloc parameters a running process sets."""

    model: str
    platform: str
    workload_key: str
    verdict: str                                  # "config", "defaults", "eager" or "mixed"
    summary: str                                  # the applied verdict and its confirmed figure
    compiled: bool
    patches: tuple[tuple[str, Any], ...]
    inductor_first: tuple[tuple[str, Any], ...]
    functorch_first: tuple[tuple[str, Any], ...]
    no_grad: bool                                 # freezing: inference under torch.no_grad() only
    train: bool                                   # measured on training steps
    conditions: tuple[str, ...]
    not_expressed: tuple[str, ...]
    graphs: tuple[dict[str, Any], ...]
    runtime: tuple[tuple[str, str], ...] = ()
    runtime_env: tuple[tuple[str, str], ...] = ()
    runtime_set: tuple[tuple[int, int], ...] = ()
    stability: float | None = None

    def as_json(self) -> dict[str, Any]:
        """The same as data, for scripts (`--emit json`)."""
        return {"format": FORMAT, "model": self.model, "platform": self.platform, "workload": self.workload_key,
                "verdict": self.verdict, "summary": self.summary, "stability": self.stability,
                "torch_compile": {"compiled": self.compiled, "config_patches": dict(self.patches)},
                "mode": "train" if self.train else "inference",
                "around_first_call": {"torch._inductor.config": dict(self.inductor_first),
                                      "torch._functorch.config": dict(self.functorch_first),
                                      "no_grad": self.no_grad},
                "runtime": {"knobs": dict(self.runtime), "env": dict(self.runtime_env),
                            "mallopt": [list(p) for p in self.runtime_set]},
                "conditions": list(self.conditions), "not_expressed": list(self.not_expressed),
                "graphs": list(self.graphs), "python": self.python()}

    def python(self) -> str:
        """A snippet that defines `tuned_compile(model)` and `first_call()` (`--emit python`)."""
        return snippet(self)


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
    same = all(_applied(b) == _applied(chosen) and b.runtime == chosen.runtime for b in bests)
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
    runtime = _runtime(chosen, not_expressed)
    return Portable(model=model, platform=platform.describe(), workload_key=workload.key,
                    verdict=_verdict_of(chosen) if same else "mixed", summary=_describe(chosen),
                    compiled=not chosen.eager, train=train, not_expressed=tuple(not_expressed), **parts, **runtime,
                    conditions=_conditions(params, platform, train=train, shape=shape),
                    graphs=tuple(_graph(b) for b in bests), stability=chosen.stability)


def _split(params: dict[str, Any]) -> dict[str, Any]:
    """The backend's config patches (the mode expanded, freezing included), what is set around the first
    call, and `no_grad`, from knob values (the allow-list and this torch's knobs: SpaceError otherwise)."""
    from tuner.inductor import compile_config

    config = compile_config(params)
    patches = dict(config.inductor)
    for name, value in patches.items():
        if not isinstance(value, (bool, int, float, str)) and value is not None:
            raise UsageError(f"stored knob {name} holds {type(value).__name__}, not a plain value; "
                             "search again to store it anew")
    if config.freezing:
        patches[FROZEN] = True
    first = {FROZEN: True} if config.freezing else {}
    return {"patches": tuple(sorted(patches.items())), "inductor_first": tuple(sorted(first.items())),
            "functorch_first": config.functorch, "no_grad": config.freezing}


def _runtime(best: BestConfig, not_expressed: list[str]) -> dict[str, Any]:
    """The runtime knobs of `best`: their names, the environment a process starts with (an allocator
    resolved to this machine's library), and the malloc parameters a running one sets. An allocator
    not installed here is named as not expressed instead."""
    from tuner.errors import TunerError
    from tuner.runtime import RuntimeConfig

    runtime = RuntimeConfig.from_dict(best.runtime)
    try:
        env = runtime.start_env({})
    except TunerError as exc:
        not_expressed.append(f"{exc}".removeprefix("cannot apply "))
        env = {}
    mallopt = tuple(pair for _, _, setting in runtime.settings() for pair in setting.mallopt)
    return {"runtime": runtime.values, "runtime_env": tuple(sorted(env.items())), "runtime_set": mallopt}


def _applied(best: BestConfig) -> tuple[str, dict[str, Any]]:
    """What a row makes a compile do: its kind of verdict and the knobs applied (none for eager or defaults)."""
    kind = _verdict_of(best)
    return kind, dict(best.params) if kind == "config" else {}


def _verdict_of(best: BestConfig) -> str:
    return "eager" if best.eager else "defaults" if best.is_default or not best.params else "config"


def _describe(best: BestConfig) -> str:
    what = {"eager": "eager (uncompiled)", "defaults": "Inductor's defaults"}.get(_verdict_of(best)) or \
        key_values(sorted(best.params.items()))
    runtime = f" with {key_values(sorted(best.runtime.items()))}" if best.runtime else ""
    sure = f"; stability {best.stability:.0%}" if best.stability is not None else ""
    return (f"{what}{runtime}, confirmed {best.speedup:.2f}x [{best.ci_low:.2f}, {best.ci_high:.2f}] over the "
            f"default compile in {best.rounds} paired rounds{sure}")


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
