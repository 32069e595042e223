"""The tier rules as a pure function: `decide_tier` on hand-made stored rows, no database."""
from __future__ import annotations

import warnings
from datetime import datetime, timedelta, timezone

import pytest
import torch

from tuner.decision import Tier, decide_tier
from tuner.errors import SpaceError
from tuner.keys import Platform, platform_from_parts
from tuner.storage import BestConfig

GRAPH = "g" * 32
T0 = datetime(2026, 5, 10, 12, 0, tzinfo=timezone.utc)
HARDWARE = {"cpu_model": "Test CPU", "vec_isa": "avx2", "cores": "16", "threads": "8", "machine": "x86_64"}
SOFTWARE = {"python": "3.11.9", "torch": torch.__version__, "triton": "none", "cuda": "none", "tuner": "0.1.0"}


def platform(*, hardware: dict | None = None, **software: str) -> Platform:
    return platform_from_parts("cpu", {**HARDWARE, **(hardware or {})}, {**SOFTWARE, **software})


def best(p: Platform, params: dict, *, minutes: int = 0) -> BestConfig:
    return BestConfig(graph_key=GRAPH, platform_key=p.key, params=params, is_default=not params,
                      speedup=1.2, ci_low=1.1, ci_high=1.3, rounds=5, latency_ms=1.0, baseline_ms=1.2,
                      created_at=T0 + timedelta(minutes=minutes))


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
