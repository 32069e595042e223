"""Inductor's generated Triton kernels: the tile config each settled on, harvested, stored and fed
back through Inductor's `autotune_lookup_table` (tuner.inductor.triton_choices).

There is no GPU here, so the autotuning is replayed: the kernel is the one in
tests/fixtures/inductor_kernels (as Inductor writes it for CUDA under max_autotune), built by
Inductor's real heuristics into a real `CachingAutotuner` with all its candidate configs; what a GPU
does at its first launch (benchmark them, keep the winner's launcher) comes from the recorded JSON
beside it. Everything after that is real: the harvest, the SQLite database, the lookup, the
backend's patch and Inductor building the kernel again under that patch with the single stored
config, which it then launches without benchmarking anything. bench/gpu_check.py checks the same
on a GPU end to end.
"""
from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from helpers import FIXTURES

FIXTURE = FIXTURES / "inductor_kernels" / "triton_poi_fused_add_relu_0"
RECORDED = json.loads(FIXTURE.with_suffix(".json").read_text())
GRAPH = "f" * 64          # the graph key the kernel is attributed to


def build_kernel() -> Any:
    """Inductor's CachingAutotuner for the recorded kernel, built from its source as Inductor loads it."""
    spec = importlib.util.spec_from_file_location("recorded_inductor_kernel", FIXTURE.with_suffix(".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.triton_poi_fused_add_relu_0


@dataclass(frozen=True)
class ReplayedLauncher:
    """What a GPU's first launch leaves in `CachingAutotuner.launchers`: the winner's launcher,
    of which a harvest reads the config only."""

    config: Any


def replay_autotuning(kernel: Any) -> None:
    """The recorded outcome of the kernel's first launch on a GPU: every candidate benchmarked
    (the timings Inductor returns from `benchmark_all_configs`), the winner's launcher kept."""
    from tuner.inductor.triton_choices import remember_timings

    by_block = {f"XBLOCK={c.kwargs['XBLOCK']}": c for c in kernel.configs}
    remember_timings(kernel, {ReplayedLauncher(by_block[name]): ms for name, ms in RECORDED["timings_ms"].items()})
    winner = next(c for c in kernel.configs if c.kwargs["XBLOCK"] == RECORDED["winner"]["XBLOCK"])
    kernel.launchers = [ReplayedLauncher(winner)]


def cuda_platform() -> Any:
    from tuner.keys import platform_from_parts

    return platform_from_parts("cuda", {"gpu_name": "NVIDIA H200", "capability": "9.0", "sm_count": "132"},
                               {"torch": "2.13.0", "triton": "3.6.0", "tuner": "test"})


def described(config: Any) -> tuple:
    return (dict(config.kwargs), config.num_warps, config.num_stages)


def test_a_settled_kernel_round_trips_through_the_database_and_is_built_with_that_config_only(tmp_path: Path) -> None:
    import torch._inductor.config as inductor_config

    from tuner.inductor import compile_config
    from tuner.inductor.triton_choices import attributing, harvesting, lookup_hash
    from tuner.kernels import KernelDatabase
    from tuner.lookup import Lookup
    from tuner.lookup.decision import Decision, Tier
    from tuner.lookup.kernel_feed import triton_feed
    from tuner.settings import Settings

    with harvesting(True) as harvest:
        with attributing(lambda: GRAPH):          # the graph's compile builds the kernel
            kernel = build_kernel()
        assert harvest.choices() == []            # not launched yet: nothing settled
        replay_autotuning(kernel)
    assert len(kernel.configs) == len(RECORDED["timings_ms"]) >= 2        # max_autotune's candidates
    [choice] = harvest.choices()
    winner = RECORDED["winner"]
    assert (choice.graph_key, choice.kernel, choice.size_hints) == (GRAPH, RECORDED["kernel"], RECORDED["size_hints"])
    assert dict(choice.config) == winner
    assert choice.latency_ms == RECORDED["timings_ms"][f"XBLOCK={winner['XBLOCK']}"]
    assert choice.configs_tried == 2
    assert choice.lookup_hash == lookup_hash(str(kernel.size_hints), kernel.fn.src)

    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    platform = cuda_platform()
    db = KernelDatabase(url)
    assert db.save(choice.to_record(platform, user="test", host="test"), platform)
    lookup = Lookup(Settings(db_url=url), warn=False)
    assert lookup.triton_table(GRAPH, platform.key) == {choice.lookup_hash: winner}
    assert lookup.triton_table("e" * 64, platform.key) == {}            # another graph's kernels
    assert lookup.triton_table(GRAPH, "another-platform") == {}

    tuned = compile_config({"max_autotune": True})
    decision = Decision(graph_key=GRAPH, platform=platform, tier=Tier.EXACT, config=tuned, reason="test")
    patch = triton_feed(lookup, decision, tuned, 0, graph_key=lambda: GRAPH)
    assert patch == {"autotune_lookup_table": {choice.lookup_hash: winner}}
    with inductor_config.patch(patch):
        fed = build_kernel()
    # One config, the stored one: Inductor launches it without benchmarking (it autotunes only
    # a kernel with more than one launcher).
    assert [described(c) for c in fed.configs] == [({"XBLOCK": winner["XBLOCK"]}, winner["num_warps"],
                                                    winner["num_stages"])]
    assert len(build_kernel().configs) >= 2       # without the patch, all the candidates again


def test_the_backend_feeds_kernels_only_to_a_cuda_graph_whose_config_tunes_them(tmp_path: Path) -> None:
    from tuner.inductor import compile_config
    from tuner.inductor.triton_choices import TritonChoice, autotunes_triton
    from tuner.kernels import KernelDatabase
    from tuner.keys import platform_from_parts
    from tuner.lookup import Lookup
    from tuner.lookup.decision import Decision, Tier
    from tuner.lookup.kernel_feed import triton_feed
    from tuner.settings import Settings

    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    platform = cuda_platform()
    choice = TritonChoice(graph_key=GRAPH, kernel="triton_red_fused_sum_0", size_hints="{'x': 64, 'r0_': 1024}",
                          lookup_hash="a" * 64, config=(("R0_BLOCK", 64), ("XBLOCK", 1), ("num_stages", 1),
                                                        ("num_warps", 8)), latency_ms=0.01, configs_tried=7)
    assert KernelDatabase(url).save(choice.to_record(platform, user="test", host="test"), platform)
    lookup = Lookup(Settings(db_url=url), warn=False)
    cpu = platform_from_parts("cpu", {"cpu_model": "x"}, {"torch": "2.13.0"})
    for params, where, fed in (({"max_autotune": True}, platform, True),
                               ({"coordinate_descent_tuning": True}, platform, True),
                               ({"max_autotune_pointwise": True}, platform, True),
                               ({}, platform, False),                      # Inductor's defaults tune nothing more
                               ({"max_autotune": True}, cpu, False)):       # CPU kernels are not Triton's
        config = compile_config(params)
        assert autotunes_triton(config.inductor) == bool(params)
        decision = Decision(graph_key=GRAPH, platform=where, tier=Tier.EXACT, config=config, reason="test")
        patch = triton_feed(lookup, decision, config, 0, graph_key=lambda: GRAPH)
        expected = {"autotune_lookup_table": {"a" * 64: dict(choice.config)}} if fed else None
        assert patch == expected, (params, where.device)


@pytest.mark.parametrize("case", ["two launchers", "template", "no _fused_"])
def test_a_kernel_that_did_not_settle_or_that_inductor_does_not_look_up_is_not_harvested(case: str) -> None:
    from torch._inductor.runtime.hints import HeuristicType

    from tuner.inductor.triton_choices import settled_choice

    kernel = build_kernel()
    replay_autotuning(kernel)
    if case == "two launchers":
        kernel.launchers = [ReplayedLauncher(c) for c in kernel.configs]
    elif case == "template":
        kernel.heuristic_type = HeuristicType.TEMPLATE
    else:
        kernel.fn = SimpleNamespace(src=kernel.fn.src.replace("_fused_", "_"), __name__="triton_poi_add_relu_0")
    assert settled_choice(kernel, GRAPH) is None


def test_tuner_kernels_lists_the_harvested_kernels_by_family_and_graph(tmp_path: Path) -> None:
    from helpers import run_main

    from tuner.inductor.gemm_choices import GemmChoice
    from tuner.inductor.triton_choices import TritonChoice
    from tuner.kernels import KernelDatabase

    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    platform, db = cuda_platform(), KernelDatabase(url)
    for graph, ms in ((GRAPH, 0.0), ("e" * 64, 0.0123)):
        db.save(TritonChoice(graph_key=graph, kernel="triton_poi_fused_add_relu_0", size_hints="{'x': 4096}",
                             lookup_hash="b" * 64, config=(("XBLOCK", 128), ("num_stages", 1), ("num_warps", 4)),
                             latency_ms=ms, configs_tried=2).to_record(platform, user="u", host="h"), platform)
    db.save(GemmChoice(op="mm", inputs="[]", key="c" * 32, timings=(("triton_mm", 0.02), ("extern_mm", 0.03)))
            .to_record(platform, user="u", host="h"), platform)
    family = run_main("kernels", "--db", url, "--kernel", "inductor-triton")
    assert family.returncode == 0, family.stderr
    rows = family.stdout.splitlines()[2:]
    assert len(rows) == 2 and all(r.startswith("inductor-triton:") for r in rows), rows
    assert any(" - " in r for r in rows) and any("0.0123" in r for r in rows)     # no timing reported: "-"
    one = run_main("kernels", "--db", url, "--kernel", f"inductor-triton:{GRAPH}")
    assert len(one.stdout.splitlines()[2:]) == 1 and GRAPH in one.stdout
    assert len(run_main("kernels", "--db", url, "--kernel", "inductor-gemm").stdout.splitlines()[2:]) == 1
    assert run_main("kernels", "--db", url, "--kernel", "inductor").returncode == 1     # a prefix ends at ":"


@pytest.mark.slow
def test_a_freezing_config_is_fed_under_the_key_its_trial_harvested(tmp_path: Path, monkeypatch) -> None:
    """A freezing trial and the lookup both freeze in the backend (`tuner.inductor.freezing`), on the
    graph Dynamo traces anyway: the trial harvests its kernels under that graph's key, which is the
    key the stored config has, and the feed reads them under it. No GPU builds kernels here,
    so the kernels a compile builds are stood in for (one object per compile) and the backend's
    feed is observed, not run (it acts on CUDA graphs only)."""
    import torch

    import tuner
    import tuner.lookup.backend as backend
    import tuner.inductor.triton_choices as triton_choices
    from helpers import MODELS
    from helpers.stored import store_configs
    from tuner.inductor import compile_config, compile_model
    from tuner.platform import current_platform
    from tuner.workload import capture_workload, load_model_file

    class Built:
        """Stands in for the kernels a compile builds (weak-referenceable, like a CachingAutotuner)."""

    scans, kept = iter(range(1000)), []

    def live() -> list:                 # even scans are "before" a compile, odd ones "after"
        if next(scans) % 2:
            kept.append(Built())
        return list(kept)

    monkeypatch.setattr(triton_choices, "_live_autotuners", live)
    model = str(MODELS / "tiny_mlp.py")
    loaded = load_model_file(model, seed=0)
    with torch.no_grad(), triton_choices.harvesting(True) as harvest:
        loaded.call(compile_model(loaded.model, compile_config({"freezing": True, "max_autotune": True})))
    [(trial_key, _)] = harvest.graphs

    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    workload = capture_workload(load_model_file(model))
    store_configs(url, workload, current_platform("cpu"), {"freezing": True, "max_autotune": True})
    fed_keys = []
    real_feed = backend.triton_feed

    def observed(*args, graph_key, **kwargs):
        fed_keys.append(graph_key())
        return real_feed(*args, graph_key=graph_key, **kwargs)

    monkeypatch.setattr(backend, "triton_feed", observed)
    again = load_model_file(model, seed=0)
    with torch.no_grad():
        tuned = tuner.compile(again.model, db=url)
        again.call(tuned)                   # frozen at the first call, with the stored config
        again.call(tuned)
    assert fed_keys == [trial_key], (fed_keys, trial_key)
    assert trial_key == workload.graphs[0].key      # one key: the stored config's, the trial's, the feed's
