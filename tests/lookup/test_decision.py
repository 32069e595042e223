"""The pure rules on hand-made stored rows, no database: `decide_tier` (which stored config
applies) and `backend_choice` (what a backend applies: only what was measured as such)."""
from __future__ import annotations

import warnings
from datetime import datetime, timedelta, timezone

import pytest
import torch

from tuner.errors import SpaceError
from tuner.inductor import CompileConfig
from tuner.keys import GraphFingerprint, Platform, platform_from_parts
from tuner.lookup import format_explanation
from tuner.lookup.choice import NO_UNFROZEN, Applies, backend_choice
from tuner.lookup.decision import Decision, Tier, decide_tier
from tuner.lookup.explanation import Explanation
from tuner.storage import BestConfig

GRAPH = "g" * 32
T0 = datetime(2026, 5, 10, 12, 0, tzinfo=timezone.utc)
HARDWARE = {"cpu_model": "Test CPU", "vec_isa": "avx2", "cores": "16", "threads": "8", "machine": "x86_64"}
SOFTWARE = {"python": "3.11.9", "torch": torch.__version__, "triton": "none", "cuda": "none", "tuner": "0.1.0"}


def platform(*, hardware: dict | None = None, **software: str) -> Platform:
    return platform_from_parts("cpu", {**HARDWARE, **(hardware or {})}, {**SOFTWARE, **software})


def best(p: Platform, params: dict, *, minutes: int = 0, eager: bool = False, unfrozen: dict | None = None,
         unfrozen_speedup: float | None = None, unfrozen_eager: bool = False) -> BestConfig:
    return BestConfig(graph_key=GRAPH, platform_key=p.key, params=params, is_default=not params and not eager,
                      speedup=1.2, ci_low=1.1, ci_high=1.3, rounds=5, latency_ms=1.0, baseline_ms=1.2,
                      created_at=T0 + timedelta(minutes=minutes), eager=eager, unfrozen_params=unfrozen,
                      unfrozen_speedup=unfrozen_speedup, unfrozen_eager=unfrozen_eager)


HERE = platform()
OLDER_TORCH = platform(torch="2.12.0+cpu")
NEWER_TORCH = platform(torch="2.99.0+cpu")
OTHER_PYTHON = platform(python="3.11.1")          # same hardware, same torch, other software
OTHER_HARDWARE = platform(hardware={"threads": "4"})


def test_exact_hit_applies_the_config_and_names_the_others() -> None:
    rows = [(best(OTHER_HARDWARE, {"max_fusion_size": 32}), OTHER_HARDWARE),
            (best(HERE, {"max_fusion_size": 8}), HERE)]
    decision = decide_tier(GRAPH, HERE, rows)
    assert decision.tier is Tier.EXACT and decision.hit
    assert dict(decision.config.inductor) == {"max_fusion_size": 8}
    assert decision.source == HERE and decision.best is rows[1][0]
    assert decision.reason.startswith("tuned for this graph on this platform (max_fusion_size=8; speedup 1.200x")
    [other] = decision.elsewhere
    assert other.platform == OTHER_HARDWARE and other.why_not == "other hardware: threads 8 here, 4 there"


def test_same_hardware_hit_is_revalidated_and_prefers_the_same_torch() -> None:
    rows = [(best(NEWER_TORCH, {"max_fusion_size": 16}, minutes=10), NEWER_TORCH),
            (best(OTHER_PYTHON, {"max_fusion_size": 24}), OTHER_PYTHON)]
    decision = decide_tier(GRAPH, HERE, rows)
    assert decision.tier is Tier.SAME_HARDWARE and decision.hit
    assert dict(decision.config.inductor) == {"max_fusion_size": 24}     # same torch beats newer
    assert decision.source == OTHER_PYTHON
    assert "under other software (python 3.11.1); knobs re-validated against this torch" in decision.reason
    [other] = decision.elsewhere
    assert other.platform == NEWER_TORCH and "another stored config was preferred" in other.why_not


def test_same_hardware_newest_first_among_other_torches() -> None:
    rows = [(best(OLDER_TORCH, {"max_fusion_size": 16}), OLDER_TORCH),
            (best(NEWER_TORCH, {"max_fusion_size": 32}, minutes=5), NEWER_TORCH)]
    assert dict(decide_tier(GRAPH, HERE, rows).config.inductor) == {"max_fusion_size": 32}


def test_a_same_hardware_config_that_fails_validation_is_skipped() -> None:
    invalid = best(NEWER_TORCH, {"knob_only_in_torch_2_99": True}, minutes=10)
    rows = [(invalid, NEWER_TORCH), (best(OLDER_TORCH, {"max_fusion_size": 16}), OLDER_TORCH)]
    decision = decide_tier(GRAPH, HERE, rows)
    assert decision.tier is Tier.SAME_HARDWARE and decision.source == OLDER_TORCH
    why = {e.platform.key: e.why_not for e in decision.elsewhere}
    assert "rejected" in why[NEWER_TORCH.key] and "knob_only_in_torch_2_99" in why[NEWER_TORCH.key]

    alone = decide_tier(GRAPH, HERE, [(invalid, NEWER_TORCH)])
    assert alone.tier is Tier.MISS and alone.config.is_default and not alone.hit
    assert "rejected" in alone.elsewhere[0].why_not


def test_miss_with_nothing_stored_and_with_other_hardware_only() -> None:
    nothing = decide_tier(GRAPH, HERE, [])
    assert nothing.tier is Tier.MISS and nothing.config.is_default and nothing.elsewhere == ()
    assert nothing.reason == "no config is stored for this graph on any platform"

    other = decide_tier(GRAPH, HERE, [(best(OTHER_HARDWARE, {"max_fusion_size": 32}), OTHER_HARDWARE)])
    assert other.tier is Tier.MISS and other.best is None and other.source is None
    assert other.reason == "this graph is tuned on 1 other platform(s), none usable here"


def test_defaults_won_is_a_hit_with_the_default_config() -> None:
    decision = decide_tier(GRAPH, HERE, [(best(HERE, {}), HERE)])
    assert decision.tier is Tier.EXACT and decision.hit and decision.config.is_default
    assert decision.reason == "tuned for this graph on this platform (Inductor's defaults won)"
    same_hw = decide_tier(GRAPH, HERE, [(best(OLDER_TORCH, {}), OLDER_TORCH)])
    assert same_hw.tier is Tier.SAME_HARDWARE and same_hw.config.is_default


def test_an_invalid_exact_config_raises_for_the_guard_to_handle() -> None:
    with pytest.raises(SpaceError, match="knob_only_in_torch_2_99"):
        decide_tier(GRAPH, HERE, [(best(HERE, {"knob_only_in_torch_2_99": True}), HERE)])


def test_the_guard_turns_an_explanation_bug_into_one_warning() -> None:
    from tuner.lookup import Lookup, LookupWarning
    from tuner.settings import Settings

    lookup = Lookup(Settings(db_url="sqlite:////nonexistent/never-opened.db"))

    def broken() -> str:
        raise RuntimeError("boom")

    with pytest.warns(LookupWarning, match=r"could not explain graph 3 \(RuntimeError: boom\); This is a bug"):
        assert lookup.guarded("explain", 3, broken) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")                 # the second failure is logged, not warned
        assert lookup.guarded("explain", 4, broken) is None
    assert lookup.guarded("explain", 5, lambda: "text") == "text"


# -- backend_choice: the backend applies only what was measured as such -----------------

FREEZING = {"max_fusion_size": 8, "freezing": True}
NO_KNOBS: dict = {}


def stored(params: dict | None, **kw) -> Decision:
    """The decision for one stored row on this platform (None: nothing stored, a miss)."""
    return decide_tier(GRAPH, HERE, [] if params is None else [(best(HERE, params, **kw), HERE)])


@pytest.mark.parametrize("row, can_freeze, applies, knobs, freezing", [
    # stored row (params, extra fields)            frozen trace  applies              applied knobs  freezes
    ((NO_KNOBS, dict(eager=True)),                 False, Applies.EAGER,      {},                    False),
    ((NO_KNOBS, dict(eager=True)),                 True,  Applies.EAGER,      {},                    False),
    ((NO_KNOBS, {}),                               False, Applies.CONFIG,     {},                    False),
    (({"max_fusion_size": 8}, {}),                 False, Applies.CONFIG,     {"max_fusion_size": 8}, False),
    ((FREEZING, dict(unfrozen={"max_fusion_size": 16})), True, Applies.CONFIG, {"max_fusion_size": 8}, True),
    ((FREEZING, dict(unfrozen={"max_fusion_size": 16})), False, Applies.UNFROZEN, {"max_fusion_size": 16}, False),
    ((FREEZING, dict(unfrozen={})),                False, Applies.UNFROZEN,   {},                    False),
    ((FREEZING, {}),                               False, Applies.UNMEASURED, {},                    False),
    ((FREEZING, dict(unfrozen={}, unfrozen_eager=True)), False, Applies.EAGER, {},                    False),
    ((FREEZING, dict(unfrozen={}, unfrozen_eager=True)), True, Applies.CONFIG, {"max_fusion_size": 8}, True),
    ((FREEZING, {}),                               True,  Applies.CONFIG,     {"max_fusion_size": 8}, True),
    ((None, {}),                                   False, Applies.CONFIG,     {},                    False),
], ids=["eager", "eager-frozen-trace", "defaults-won", "plain-knob", "freezing-traced-frozen",
        "freezing-unfrozen-knob", "freezing-unfrozen-defaults", "freezing-none-measured",
        "freezing-unfrozen-eager", "freezing-unfrozen-eager-traced-frozen",
        "freezing-none-measured-traced-frozen", "miss"])
def test_backend_choice(row, can_freeze: bool, applies: Applies, knobs: dict, freezing: bool) -> None:
    params, extra = row
    choice = backend_choice(stored(params, **extra), can_freeze=can_freeze)
    assert choice.applies is applies
    assert dict(choice.config.inductor) == knobs and choice.config.freezing is freezing
    assert choice.config.functorch == ()


def test_backend_choice_notes_say_why() -> None:
    eager = backend_choice(stored(NO_KNOBS, eager=True), can_freeze=False)
    assert eager.note == "no Inductor compile"
    unfrozen = backend_choice(stored(FREEZING, unfrozen={"max_fusion_size": 16}, unfrozen_speedup=1.05),
                              can_freeze=False)
    assert unfrozen.note == ("the stored config needs freezing, which applies only with grad disabled; applying "
                             "max_fusion_size=16, measured without freezing (speedup 1.050x)")
    defaults = backend_choice(stored(FREEZING, unfrozen={}), can_freeze=False)
    assert defaults.note.endswith("applying Inductor's defaults, which won among the configs without freezing")
    unmeasured = backend_choice(stored(FREEZING), can_freeze=False)
    assert unmeasured.note == f"{NO_UNFROZEN}; applying Inductor's defaults"
    assert backend_choice(stored({"max_fusion_size": 8}), can_freeze=False).note == ""


def test_unavailable_decisions_compile_with_defaults() -> None:
    unavailable = Decision(graph_key=GRAPH, platform=HERE, tier=Tier.UNAVAILABLE, config=CompileConfig(),
                           reason="database unusable")
    assert not unavailable.eager
    assert backend_choice(unavailable, can_freeze=False) == backend_choice(unavailable, can_freeze=True)
    assert backend_choice(unavailable, can_freeze=False).applies is Applies.CONFIG


def test_eager_verdict_is_a_hit_that_says_so() -> None:
    decision = stored(NO_KNOBS, eager=True)
    assert decision.tier is Tier.EXACT and decision.hit and decision.eager and decision.config.is_default
    assert decision.reason == ("tuned for this graph on this platform (eager won: runs uncompiled; "
                               "speedup 1.200x [1.100, 1.300] over the default compile)")
    assert not stored(NO_KNOBS).eager                          # "defaults won" is not eager


def test_unfrozen_params_are_revalidated_like_params() -> None:
    with pytest.raises(SpaceError, match="knob_only_in_torch_2_99"):
        stored(FREEZING, unfrozen={"knob_only_in_torch_2_99": True})
    with pytest.raises(SpaceError, match="turns freezing on"):
        stored(FREEZING, unfrozen={"freezing": True})
    invalid = best(NEWER_TORCH, FREEZING, minutes=10, unfrozen={"knob_only_in_torch_2_99": True})
    fallback = best(OLDER_TORCH, FREEZING, unfrozen={"max_fusion_size": 16})
    decision = decide_tier(GRAPH, HERE, [(invalid, NEWER_TORCH), (fallback, OLDER_TORCH)])
    assert decision.tier is Tier.SAME_HARDWARE and decision.best is fallback
    assert dict(decision.unfrozen.inductor) == {"max_fusion_size": 16}
    assert "knob_only_in_torch_2_99" in decision.elsewhere[0].why_not


def explained(decision: Decision) -> str:
    fingerprint = GraphFingerprint(key=GRAPH, index=0, num_nodes=3, input_meta="[]", code="")
    return format_explanation(Explanation(fingerprint=fingerprint, decision=decision))


def test_explanation_words_eager_and_freezing() -> None:
    assert "  applies: nothing: eager won: runs uncompiled (no Inductor compile)" in explained(
        stored(NO_KNOBS, eager=True))
    text = explained(stored(FREEZING, unfrozen={"max_fusion_size": 16}, unfrozen_speedup=1.05))
    assert ("  applies: max_fusion_size=8, freezing=True (inference only: frozen at the first call under "
            "torch.no_grad(), re-frozen if the weights change)") in text
    assert "without freezing" not in text          # a hit's key carries grad=0: the backend freezes itself
    assert "  applies: max_fusion_size=8\n" in explained(stored({"max_fusion_size": 8})) + "\n"
