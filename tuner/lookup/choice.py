"""What a backend applies to a decided graph: a pure rule over a `Decision` and the call's opt-ins.

`backend_choice` applies only a config that was measured as such: the eager verdict runs the
graph uncompiled; a config that needs freezing applies where the graph is compiled with grad
disabled, and elsewhere the config measured without freezing beside it (or, when none was,
Inductor's defaults). A config whose precision is not fp32 applies only where the compile call opted
in to that same precision (`options={"precision": ...}`); elsewhere Inductor's defaults. Likewise a
row whose search ran with `--unsafe` (`BestConfig.unsafe`) applies only where the call opted in
with `options={"unsafe": True}` (`tuner.compile(..., unsafe=True)`; `tuner.lookup.opt_in`).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tuner.inductor import CompileConfig
from tuner.lookup.decision import Decision
from tuner.lookup.opt_in import UNSAFE_HINT, opt_in_hint
from tuner.precision import FP32
from tuner.text import key_values

if TYPE_CHECKING:
    from tuner.storage import BestConfig


class Applies(str, enum.Enum):
    """What a backend does with one graph (`backend_choice`)."""

    CONFIG = "config"            # compile with `Decision.config`: stored as measured, or defaults
    EAGER = "eager"              # eager won: run the graph uncompiled
    UNFROZEN = "unfrozen"        # config needs freezing, grad enabled: the config measured without
    UNMEASURED = "unmeasured"    # as UNFROZEN, but none was measured (an older row): Inductor's defaults
    NOT_OPTED_IN = "not-opted-in"  # the config changes precision, or is unsafe, and the call did not opt in: defaults


@dataclass(frozen=True)
class Choice:
    """What a backend applies to one graph: `config` (unused for EAGER), and a `note` saying
    why when it is not simply the decided config ("" otherwise)."""

    applies: Applies
    config: CompileConfig
    note: str = ""


NO_UNFROZEN = ("the stored config needs freezing (inference only), and no config without freezing was measured "
               "for it; call the model under torch.no_grad() or re-run `tuner search`")


def backend_choice(decision: Decision, *, can_freeze: bool, precision: str = FP32, unsafe: bool = False) -> Choice:
    """Which config a backend applies to the graph of `decision`: what `_measured_choice` picks,
    unless that config's precision is neither fp32 nor `precision` (the one the compile call
    opted in to), or the row's search ran with --unsafe and the call did not opt in (`unsafe`):
    then Inductor's defaults (NOT_OPTED_IN, the note says how to opt in). Eager, and defaults
    that won, apply whatever the row's flag: neither changes numerics."""
    choice = _measured_choice(decision, can_freeze=can_freeze)
    if choice.config.precision not in (FP32, precision):
        return Choice(Applies.NOT_OPTED_IN, CompileConfig(),
                      f"{opt_in_hint(choice.config.precision)}; applying Inductor's defaults")
    flagged = decision.best is not None and decision.best.unsafe
    if flagged and not unsafe and choice.applies in (Applies.CONFIG, Applies.UNFROZEN) and not choice.config.is_default:
        return Choice(Applies.NOT_OPTED_IN, CompileConfig(), f"{UNSAFE_HINT}; applying Inductor's defaults")
    return choice


def _measured_choice(decision: Decision, *, can_freeze: bool) -> Choice:
    """Which config a backend applies to the graph of `decision`; the backend never applies a
    config that was not measured as such.

    `can_freeze`: the graph is compiled with grad disabled, so freezing (inference only) can
    apply (`tuner.inductor.freezing`). An eager verdict runs uncompiled (EAGER). A config that needs
    freezing applies as stored only where it can freeze; elsewhere `decision.unfrozen` applies
    (EAGER instead where the stored verdict says eager beat every config without freezing)
    (measured beside it; `CompileConfig()` when Inductor's defaults won among configs without
    freezing), or Inductor's defaults when none was measured (UNMEASURED, note NO_UNFROZEN).
    Everything else, misses included, is `decision.config`.
    """
    if decision.eager:
        return Choice(Applies.EAGER, CompileConfig(), "no Inductor compile")
    if not decision.config.freezing or can_freeze:
        return Choice(Applies.CONFIG, decision.config)
    if decision.unfrozen is None:
        return Choice(Applies.UNMEASURED, CompileConfig(), f"{NO_UNFROZEN}; applying Inductor's defaults")
    if decision.best is not None and decision.best.unfrozen_eager:
        return Choice(Applies.EAGER, CompileConfig(),
                      "the stored config needs freezing, which applies only with grad disabled; without it, "
                      "eager beat every config measured: runs uncompiled")
    return Choice(Applies.UNFROZEN, decision.unfrozen,
                  f"the stored config needs freezing, which applies only with grad disabled; applying "
                  f"{unfrozen_label(decision.best)}")


def unfrozen_label(best: "BestConfig | None") -> str:
    """The config measured without freezing beside a freezing winner, as one phrase:
    "max_fusion_size=16, measured without freezing (speedup 1.050x)", or for {} "Inductor's
    defaults, which won among the configs without freezing (...)"; "none measured" for None."""
    if best is None or best.unfrozen_params is None:
        return "none measured"
    if best.unfrozen_eager:
        return "eager (runs uncompiled), which beat every config without freezing"
    knobs = key_values(sorted(best.unfrozen_params.items()))
    text = (f"{knobs}, measured without freezing" if knobs
            else "Inductor's defaults, which won among the configs without freezing")
    return text if best.unfrozen_speedup is None else f"{text} (speedup {best.unfrozen_speedup:.3f}x)"
