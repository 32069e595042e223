"""Stored best configs for the lookup tests: rows written through the real Store API, and the
tiny models' workloads captured as `tuner search` captures them."""
from __future__ import annotations

from pathlib import Path

import torch

from helpers import MODELS

TINY = MODELS / "tiny_mlp.py"


STORED = {"max_fusion_size": 8, "freezing": True}     # differs from the defaults (64, False)


UNFROZEN = {"max_fusion_size": 16}                    # measured beside it without freezing


def best_for(graph_key: str, platform_key: str, params: dict, workload_key: str = "", **fields):
    """A BestConfig; `fields` sets the others (`eager=True`, `unfrozen_params=...`)."""
    from tuner.storage import BestConfig

    fields.setdefault("is_default", not params and not fields.get("eager", False))
    return BestConfig(graph_key=graph_key, platform_key=platform_key, params=params,
                      speedup=1.1, ci_low=1.05, ci_high=1.15, rounds=5, latency_ms=1.0, baseline_ms=1.1,
                      workload_key=workload_key, user="test", host="test", tuner_version="0.1.0",
                      torch_version=torch.__version__, **fields)


def store_configs(url: str, workload, platform, params: dict, **fields) -> None:
    """Store `params` (and `fields`, see best_for) as the best config of every graph of
    `workload` on `platform` (creates the schema); checks that the store kept every field."""
    from tuner.storage import Store, upgrade

    upgrade(url)
    with Store.open(url) as store:
        store.ensure_platform(platform)
        store.ensure_workload(workload)
        for graph in workload.graphs:
            best = best_for(graph.key, platform.key, params, workload.key, **fields)
            store.save_best(best)
            kept = store.best_config(graph.key, platform.key)
            assert kept is not None and {k: getattr(kept, k) for k in fields} == fields, kept


def tiny_workload(path: Path = TINY):
    """The tiny MLP's workload, captured as `tuner search` captures it."""
    from tuner.workload import capture_workload, load_model_file

    return capture_workload(load_model_file(path))



BATCHED = MODELS / "batched_mlp.py"


def bucket_workload(batch: int):
    from tuner.workload import capture_workload, load_model_file

    return capture_workload(load_model_file(BATCHED, shape=(("batch", batch),)), name=f"batched_mlp[batch={batch}]")

