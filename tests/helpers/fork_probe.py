"""What a process does once it has imported like a zygote, forked or spawned (tests/workers/test_spares.py).

    python fork_probe.py zygote            import as a zygote does, then serve forks (workers/zygote.py)
    python fork_probe.py spawned FOLDER    import as a zygote does, then probe in FOLDER

Either way `probe` writes facts.json in its folder: a compiled function's output (its bytes'
hash), torch's thread count, the OS threads after an OpenMP and a BLAS call,
the child processes after compiling (Inductor's compile workers), what one call adds to the
resident set (the allocator), torch's default seed, a draw of Python's `random` and the pattern
matcher's registrations (the hits and misses of its `lazy_init`s' caches, joint graph, post-grad); then it
times the function whenever the test asks (`serve_timings`).
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path


def children() -> int:
    return sum(len(Path(f"/proc/self/task/{t}/children").read_text().split()) for t in os.listdir("/proc/self/task"))


def probe(folder: Path) -> int:
    import numpy as np
    import torch
    from torch._inductor import config
    from torch._inductor.fx_passes import joint_graph, post_grad

    from tuner.measure.device import call_peak_mb

    generator = torch.Generator().manual_seed(0)
    x, w = torch.randn(384, 384, generator=generator), torch.randn(384, 384, generator=generator)
    compiled = torch.compile(lambda x, w: torch.relu(x @ w + 1).sum(dim=0), dynamic=False)
    out = compiled(x, w)
    workers = children()
    np.ones((300, 300)) @ np.ones((300, 300))
    facts = {"output": hashlib.sha256(out.numpy().tobytes()).hexdigest(),
             "torch_threads": torch.get_num_threads(), "os_threads": len(os.listdir("/proc/self/task")),
             "compile_workers": workers, "compile_threads": config.compile_threads,
             "peak_mb": call_peak_mb(lambda: torch.ones(4_000_000).add_(1).sum(), "cpu"),
             "torch_seed": torch.initial_seed(), "random": random.random(),
             "pattern_inits": [list(init.cache_info()[:2]) for init in (joint_graph.lazy_init, post_grad.lazy_init)]}
    (folder / "facts.json").write_text(json.dumps(facts))
    serve_timings(lambda: compiled(x, w), folder)
    return 0


def serve_timings(call, folder: Path) -> None:
    """For each line on FOLDER/go.fifo, time `call` 10 times and write the median on FOLDER/done.fifo;
    stop at "stop" or the end of go.fifo (the test takes turns between processes, so load that
    comes and goes on the machine falls on both alike)."""
    with open(folder / "go.fifo") as go, open(folder / "done.fifo", "w") as done:
        for line in go:
            if line.strip() == "stop":
                return
            times = []
            for _ in range(10):
                began = time.perf_counter()
                call()
                times.append(time.perf_counter() - began)
            done.write(f"{statistics.median(times)}\n")
            done.flush()


def main(argv: list[str]) -> int:
    from tuner.workers.trial_process import import_for_trials

    import_for_trials()
    if argv[0] == "zygote":
        from tuner.workers.zygote import serve_forks

        return serve_forks(probe, 0, 1)     # the protocol on stdin and stdout
    return probe(Path(argv[1]))


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    os._exit(code)
