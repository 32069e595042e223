"""The stored kernel choices, fed to Inductor's own autotuning around a compile under a stored config.

The backend calls these for each graph it compiles under a stored config, so the kernels that
config autotuned when it was measured here benchmark nothing now: `triton_feed` gives Inductor's
generated Triton kernels their stored tile configs (`tuner.inductor.triton_choices`, as the
`autotune_lookup_table` patch) and `gemm_feed` gives each GEMM its stored winning choice
(`tuner.inductor.gemm_choices`). The rows come from the lookup's read-only database
(`triton_table` and `gemm_winner` of `tuner.lookup.database.ReadOnlyDatabase`, which `Lookup`
extends), which never raise; a kernel without a stored choice is autotuned by Inductor as usual.
"""
from __future__ import annotations

import contextlib
import logging
from typing import Any, Callable, Iterator

from tuner.inductor import CompileConfig, gemm_choices, triton_choices
from tuner.lookup.database import ReadOnlyDatabase
from tuner.lookup.decision import Decision, short

__all__ = ["gemm_feed", "triton_feed"]

log = logging.getLogger("tuner.lookup")


def triton_feed(lookup: ReadOnlyDatabase, decision: Decision, config: CompileConfig, index: int, *,
                 graph_key: Callable[[], str | None]) -> dict[str, Any] | None:
    """For a CUDA graph whose applied config tunes Inductor's Triton kernels: the configs they
    settled on when that config was measured on this graph (`graph_key()`, the graph as traced now:
    `tuner.inductor.triton_choices`), as the `autotune_lookup_table` patch, so those kernels benchmark
    nothing; None when there are none."""
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
def gemm_feed(lookup: ReadOnlyDatabase, decision: Decision, config: CompileConfig, index: int) -> Iterator[None]:
    """Around the compile of a graph whose applied config turns on `max_autotune`: each GEMM
    Inductor would autotune takes the winner harvested when that config was measured
    (`tuner.inductor.gemm_choices`), benchmarking nothing; GEMMs without one are autotuned as usual."""
    platform = decision.platform
    if platform is None or platform.device not in ("cpu", "cuda") or not gemm_choices.autotunes_gemms(config.inductor):
        yield
        return

    with gemm_choices.feeding(lambda key: lookup.gemm_winner(key, platform.key)) as feed:
        yield
    if feed.fed or feed.missed:
        log.info("tuner: graph %d (key %s): %d GEMM(s) took their stored choice, %d autotuned by Inductor",
                 index, short(decision.graph_key), feed.fed, feed.missed)
