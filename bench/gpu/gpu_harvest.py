"""Section 8 of bench/gpu_check.py: Inductor's own kernels harvested once, then compiled from the database.

Process A (the check's process) prepares the small transformer stack with `max_autotune` through
`tuner.measure.prepare`, the trial's own path: Inductor autotunes its GEMMs (Triton templates
against cuBLAS) and benchmarks its generated Triton kernels' tile configs, and tuner harvests both
into a SQLite file (`tuner.inductor.gemm_choices`, `tuner.inductor.triton_choices`). The check then stores that
config as each graph's best, so a lookup applies it (placeholder evidence, user "gpu_check": this
database exists for the check only and none of its figures are reported).

Process B (a fresh subprocess, a fresh Inductor cache, Inductor's own autotune cache off) compiles
the same model with `tuner.compile(db=...)`. Both count what they benchmarked: GEMMs with
Inductor's own counter (`select_algorithm_autotune`) and Triton kernels with tuner's observer of
`benchmark_all_configs`. The check passes when B benchmarks none of the harvested ones and its
output matches A's. The harvested rows come back in $OUT/harvest.db: a real recording for the CPU
replay tests.
"""
from __future__ import annotations

import json
import subprocess
from typing import Any

PARAMS = {"max_autotune": True}

PROGRAM = '''
import json, logging, sys
import numpy as np
import torch, torch._inductor.config
from torch._dynamo.utils import counters
import tuner
from tuner.inductor import triton_choices
from tuner.workload import flatten_outputs, load_model_file

torch._inductor.config.autotune_local_cache = False      # only tuner's database may answer
logging.basicConfig(level=logging.WARNING, format="LOG %(name)s %(message)s")
logging.getLogger("tuner.lookup").setLevel(logging.INFO)
triton_choices._observe_timings()
loaded = load_model_file({model!r}, seed=0)
with torch.no_grad():
    tuned = tuner.compile(loaded.model, db={db!r})
    out = flatten_outputs(loaded.call(tuned))[0]
np.save({out!r}, out.float().cpu().numpy())
kernels = triton_choices._live_autotuners()
print("REPORT " + json.dumps(dict(gemms=counters["inductor"]["select_algorithm_autotune"], kernels=len(kernels),
                                  benchmarked=sum(1 for k in kernels if getattr(k, "_tuner_timings", None)))))
'''


def section_harvest(check: Any) -> list[str]:
    import numpy as np
    import torch
    from torch._dynamo.utils import counters

    from tuner.inductor import triton_choices
    from tuner.measure import Rejected, prepare
    from tuner.platform import current_platform
    from tuner.storage import Store, kernel_configs, upgrade
    from tuner.trial import MeasureSpec
    from tuner.workload import flatten_outputs

    model, url = str(check.model("block")), f"sqlite:///{check.run_dir / 'harvest.db'}"
    upgrade(url)
    counters.clear()
    runner = prepare(MeasureSpec(model_path=model, kernel_db=url), tuple(sorted(PARAMS.items())))
    if isinstance(runner, Rejected):
        raise RuntimeError(f"process A: {runner.headline}")
    with torch.no_grad():
        expected = flatten_outputs(runner.call())[0].float().cpu().numpy()
    kernels = triton_choices._live_autotuners()
    a = dict(gemms=counters["inductor"]["select_algorithm_autotune"], kernels=len(kernels),
             benchmarked=sum(1 for k in kernels if getattr(k, "_tuner_timings", None)))
    platform = current_platform(check.device)
    with Store.open(url) as store:
        rows = kernel_configs(store, platform_key=platform.key)
    gemm_rows = sum(1 for r in rows if r.kernel_name.startswith("inductor-gemm:"))
    triton_rows = sum(1 for r in rows if r.kernel_name.startswith(triton_choices.KERNEL_PREFIX))
    print(f"  A: {a['gemms']} GEMM(s) autotuned, {a['benchmarked']} of {a['kernels']} Triton kernels benchmarked; "
          f"harvested {gemm_rows} GEMM row(s), {triton_rows} Triton kernel row(s)")
    _store_as_best(url, model, platform)

    out = check.run_dir / "harvest_b.npy"
    script = check.run_dir / "harvest_b.py"
    script.write_text(PROGRAM.format(model=model, db=url, out=str(out)))
    env = {**check.env, "TORCHINDUCTOR_CACHE_DIR": str(check.run_dir / "inductor-cache-b")}
    done = subprocess.run(check.python(str(script)), cwd=check.run_dir, env=env, capture_output=True, text=True,
                          timeout=max(10.0, check.left() - 5))   # what the section has left, a margin to report
    for line in done.stderr.splitlines():
        if line.startswith("LOG tuner"):
            print(f"  B | {line}")
    if done.returncode != 0:
        raise RuntimeError(f"process B exited {done.returncode}: {done.stderr[-2000:]}")
    b = json.loads(next(ln for ln in done.stdout.splitlines() if ln.startswith("REPORT ")).split(" ", 1)[1])
    diff = float(np.abs(np.load(out) - expected).max())
    print(f"  B: {b['gemms']} GEMM(s) autotuned, {b['benchmarked']} of {b['kernels']} Triton kernels benchmarked; "
          f"max |B - A| = {diff:.3g}")
    figures = [f"A autotuned {a['gemms']} GEMMs, benchmarked {a['benchmarked']}/{a['kernels']} kernels; "
               f"stored {gemm_rows} GEMM + {triton_rows} kernel rows",
               f"B from the database: {b['gemms']} GEMMs, {b['benchmarked']}/{b['kernels']} kernels; |B-A| {diff:.2g}"]
    problems = []
    if b["gemms"] > max(0, a["gemms"] - gemm_rows):
        problems.append(f"B autotuned {b['gemms']} GEMM(s) of the {gemm_rows} harvested")
    if b["benchmarked"] > max(0, a["benchmarked"] - triton_rows):
        problems.append(f"B benchmarked {b['benchmarked']} Triton kernel(s) of the {triton_rows} harvested")
    if not diff <= 1e-2 * max(1.0, float(np.abs(expected).max())):
        problems.append(f"B's output differs from A's by {diff:.3g}")
    if problems:
        raise RuntimeError("; ".join(problems))
    return figures


def _store_as_best(url: str, model: str, platform: Any) -> None:
    """Store PARAMS as every graph's best, so B's lookup applies it (placeholder evidence)."""
    import torch

    from tuner.storage import BestConfig, Store
    from tuner.workload import capture_workload, load_model_file

    workload = capture_workload(load_model_file(model))
    with Store.open(url) as store:
        store.ensure_platform(platform)
        store.ensure_workload(workload)
        for graph in workload.graphs:
            store.save_best(BestConfig(graph_key=graph.key, platform_key=platform.key, params=dict(PARAMS),
                                       is_default=False, speedup=1.0, ci_low=1.0, ci_high=1.0, rounds=1,
                                       latency_ms=None, baseline_ms=None, workload_key=workload.key,
                                       user="gpu_check", host="gpu_check", torch_version=torch.__version__))
