"""Entry point of a spawned trial process: `python -m tuner.workers.trial_process JOB RESULT PARENT`.

Reads the job JSON, runs it, writes the result JSON; a guard kills its process group when it
ends, however it ends (`lifeline.guard_group`), and what it starts keeps its temporary files in
the job's folder (`own_temporary_folder`), its precompiled headers in the search's cache folder
(`headers_in_cache_folder`). A job is a trial or a confirmation (`run_trial` under the spec's
`--memory-limit` when it has one, `run_confirmation`: several variants in one process, so the
allocator is pinned first, `RuntimeConfig.pin_for_timing`), or a timing process of the process
stage (`run_process_timing`: as a user's process, nothing pinned). None touches the database
except through `MeasureSpec.kernel_db` (the model's `@tuner.autotune` kernels, and the GEMM
choices a verified compile autotuned: `tuner.inductor.gemm_choices`). `... --zygote PARENT
COMMANDS REPORTS` is a zygote (`workers/zygote.py`): it imports what a trial needs, then forks
spares that read JOB and RESULT from a FIFO.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Callable

from tuner.workers.lifeline import die_with_parent, guard_group


def mark_step(label: str, holding: int | None = None) -> None:
    """Leave the label of the variant a confirmation is about to prepare or time in STEP_FILE, in
    the job's folder (the working directory), and on a second line how many variants the process
    then holds, where the parent reads them if this process dies (workers/isolation.py). A death
    mid-write leaves it empty: no variant named."""
    from tuner.workers.isolation import STEP_FILE

    with open(STEP_FILE, "w") as handle:
        handle.write(label if holding is None else f"{label}\n{holding}")


def run_trial_job(payload: dict, handed_at: float | None = None,
                  report: Callable[[dict], None] | None = None) -> dict:
    """Run one trial under its spec's memory cap, set before torch loads so that the cap covers
    everything the process holds; the Measurement as JSON, with `start_s` (from `handed_at`, when
    the parent handed the job over, this host's `time.time()`, to the trial code's start).
    `report` (see `main`) goes to `run_trial`."""
    from dataclasses import replace

    from tuner.trial import Measurement, Status, TrialRequest, apply_memory_limit, exceeded

    request = TrialRequest.from_json(payload)
    limit = request.spec.memory_limit_mb
    if limit is not None:
        apply_memory_limit(limit)
    try:
        from tuner.measure import run_trial

        from tuner.workers.isolation import LOADED
        print(LOADED, file=sys.stderr, flush=True)      # a death before this line is the cap's (isolation.py)
    except (MemoryError, SystemError, RuntimeError) as exc:
        # Under a cap, an allocation that fails inside an extension module while torch loads surfaces
        # as MemoryError, as "SystemError: error return without exception set" where the C code sets
        # no exception, or as "RuntimeError: std::bad_alloc" from C++ (all seen here with
        # --memory-limit 150M).
        if limit is None or (isinstance(exc, RuntimeError) and "bad_alloc" not in str(exc)):
            raise
        return Measurement.failed(Status.CRASHED, f"{exceeded(limit)} while importing torch; "
                                                  f"raise --memory-limit").to_json()
    began = time.time()
    measurement = run_trial(request, report=report)
    start_s = None if handed_at is None else max(0.0, began - handed_at)
    return replace(measurement, start_s=start_s).to_json()


# What a zygote imports ahead of its spares' jobs: torch, Dynamo, Inductor's compile_fx, and the trial code with
# what it imports lazily when it runs (the compiler adapter, the model loader, the kernel database).
SPARE_IMPORTS = ("torch", "torch._dynamo", "torch._inductor.compile_fx", "tuner.measure.core",
                 "tuner.measure.confirmation_run", "tuner.inductor", "tuner.workload", "tuner.kernels")


# What the first Inductor compile of a process imports lazily, found by listing the modules a process
# that had imported SPARE_IMPORTS gained over its first compile (torch 2.13). Imported ahead when
# present: another torch release may lack some. Measured: the compiler probe that precedes a
# process's first measured compile (tuner/measure/compile_time.py) 0.86-0.90 s -> 0.50-0.54 s on a cache hit.
COMPILE_IMPORTS = ("torch._dynamo.backends.inductor", "torch._inductor.choices", "torch._inductor.bounds",
                   "torch._inductor.hooks", "torch._inductor.kernel_template_choice",
                   "torch._inductor.codegen.cpp_wrapper_cpu_array_ref", "torch._inductor.codegen.memory_planning",
                   "torch._inductor.codegen.wrapper_fxir", "torch._inductor.codegen.halide",
                   "torch._inductor.codegen.cuda_combined_scheduling", "torch._inductor.fx_passes.fuse_attention",
                   "torch._inductor.fx_passes.pad_mm", "torch._inductor.fx_passes.mkldnn_fusion",
                   "torch._inductor.fx_passes.quantization", "torch._inductor.fx_passes.freezing_patterns",
                   "torch._inductor.fx_passes.efficient_conv_bn_eval", "torch._inductor.runtime.caching",
                   "torch._inductor.compiler_bisector", "torch._inductor.extern_node_serializer",
                   "torch._functorch._aot_autograd.subclass_codegen",
                   "torch._higher_order_ops.passes.inline_invoke_subgraph", "torch.export._trace",
                   "torch.fx.experimental.validator", "torch._subclasses.schema_check_mode", "sympy.combinatorics",
                   "sympy.tensor.tensor", "multiprocessing.synchronize", "torch._dynamo.dce_extra_outputs",
                   "torch._dynamo.repro.after_dynamo", "torch._inductor.codegen.segmented_tree",
                   "torch._inductor.codegen.cpu_device_op_overrides", "torch._inductor.codegen.cpp_wrapper_gpu",
                   "torch._inductor.fx_passes.apply_gumbel_max_trick", "torch.utils._cpp_embed_headers",
                   "torch._functorch._activation_checkpointing.remat_using_tags_for_fwd_loss_bwd_graph_pass",
                   "tuner.measure.compile_time")
# ... and every module of these packages (the attention patterns the pattern matcher loads, Dynamo's
# backends, which its registry imports all of).
COMPILE_PACKAGES = ("torch._inductor.fx_passes.serialized_patterns", "torch._dynamo.backends",
                    "torch.distributed.tensor.experimental")


def import_for_trials() -> None:
    """Import SPARE_IMPORTS, then `compile_imports()`, then run PRIME_STEPS, each step
    under the node's compile lock held shared and the lock taken again for the next: never during
    another process's timed section, and a trial that reaches its timed section while a zygote
    imports waits for the step under way (the longest, `import torch`, about 2.4 s here), not for
    the whole import (5 s or more; held whole, the MLP's warm trials waited a median 4.5 s for
    their timed section). Runs no model, no tensor op on data (`_cpu_patterns` traces on fake
    tensors), no CUDA call, and starts no thread pool."""
    import importlib

    from tuner.measure import node_lock     # loads no torch

    def step(action: Callable[[], object]) -> None:
        with node_lock.hold_for_compile(node_lock.Slot()):
            action()

    for name in SPARE_IMPORTS:
        step(lambda name=name: importlib.import_module(name))
    step(lambda: import_present(compile_imports()))
    for action in PRIME_STEPS:
        step(action)


def import_present(names: list[str]) -> None:
    """Import each of `names` that this torch release and platform has."""
    import importlib

    for name in names:
        try:
            importlib.import_module(name)
        except Exception:       # not in this torch release or platform (e.g. no torch.distributed):
            pass                # its first compile imports what it has, as before


def compile_imports() -> list[str]:
    """COMPILE_IMPORTS and the modules of COMPILE_PACKAGES (those of this torch release)."""
    import importlib
    import pkgutil

    names = list(COMPILE_IMPORTS)
    for package in COMPILE_PACKAGES:
        try:
            path = importlib.import_module(package).__path__
        except Exception:       # as in import_for_trials
            continue
        names += [f"{package}.{info.name}" for info in pkgutil.iter_modules(path)]
    return names


def _torch_key() -> None:
    from torch._inductor import codecache

    codecache.torch_key()


def _triton_key() -> None:
    try:
        from triton.runtime.cache import triton_key
    except ImportError:             # no Triton: Inductor's CPU path does not ask for its key either
        return
    triton_key()


def _vec_isa() -> None:
    from torch._inductor import cpu_vec_isa

    cpu_vec_isa.pick_vec_isa()


def cpu_only_torch() -> bool:
    """Whether this torch is built for no device but the CPU (no CUDA or ROCm, MPS or XPU)."""
    import torch

    return not (torch.backends.cuda.is_built() or torch.backends.mps.is_built() or getattr(torch._C, "_has_xpu", False))


def _cpu_patterns() -> None:
    """Register Inductor's pattern-matcher patterns for the CPU, as a process's first compile on the
    CPU does (`joint_graph.lazy_init(cpu)`, `post_grad.lazy_init()`), when this torch is built for no
    other device; then stop the tqdm monitor thread that torch.fx's interpreter started in doing so
    and forget it, so that a fork starts its own at its first progress bar as a fresh process does."""
    if not cpu_only_torch():    # the trial may run on another device, and the patterns are traced for it
        return
    import torch
    from torch._inductor.fx_passes import joint_graph, post_grad

    joint_graph.lazy_init(torch.device("cpu"))
    post_grad.lazy_init()
    tqdm = getattr(sys.modules.get("tqdm.std"), "tqdm", None)
    if tqdm is not None and tqdm.monitor is not None:
        tqdm.monitor.exit()
        tqdm.monitor = None


# What the first Inductor compile of every process does once, whatever the model, done ahead of
# the job: hash torch's and Triton's sources (part of every cache key; `torch_key`, `triton_key`)
# and probe the C++ compiler for the CPU's vector ISA (`pick_vec_isa`, which builds a test
# program). Measured here: 1.8-2.1 s, which took a first compile from 3.3-3.9 s to 0.4-0.5 s on a
# cache hit. They read files and run the C++ compiler on its test program: no model, tensor op,
# CUDA call or thread pool. Each is cached for the life of the process. On a CPU-only torch, the
# pattern registration of a first CPU compile too (`_cpu_patterns`): symbolic traces on fake
# tensors (no data, no kernel, no allocation, no thread left), 0.12 s, which took the compiler
# probe from about 0.39 s to 0.25 s.
PRIME_STEPS: tuple[Callable[[], None], ...] = (_torch_key, _triton_key, _vec_isa, _cpu_patterns)


def zygote_main(parent_pid: int, commands: int, reports: int) -> int:
    """A zygote (`workers/zygote.py`): die with the parent, import, then fork a spare per request
    on descriptor `commands`, reporting on `reports`; each spare waits for its job on its FIFO
    and runs it."""
    die_with_parent(parent_pid)
    for fd in (commands, reports):      # the protocol's own: no process the imports start gets them
        os.set_inheritable(fd, False)
    own_temporary_folder()              # the C++ compiler of the ISA probe, killed with the zygote
    import_for_trials()
    from tuner.workers.zygote import serve_forks

    return serve_forks(run_forked, commands, reports)


def run_forked(folder: Path) -> int:
    """A forked spare, in its folder: run the job whose paths arrive on its FIFO; 0 at once when
    the FIFO closes without one (the pool let it go)."""
    from tuner.workers.zygote import read_job

    job = read_job(folder)
    return 0 if job is None else main(*job)


def own_temporary_folder() -> None:
    """Give what this trial process (or zygote) starts, Inductor's compile workers and the C++
    compiler, a temporary folder in its working directory (the job's folder; the zygote's), which
    goes with it: a compile killed with its group leaves its files there, not in the node's
    temporary folder. This process keeps the node's (`tempfile`'s, fixed first: the node's locks
    are there, tuner/measure/node_lock.py)."""
    import tempfile

    tempfile.gettempdir()
    os.makedirs("tmp", exist_ok=True)
    os.environ["TMPDIR"] = os.path.abspath("tmp")


def headers_in_cache_folder() -> None:
    """Inductor precompiles C++ headers (for cpp_wrapper and its kernels) into a folder under its
    default cache folder in the system's temporary folder, whatever TORCHINDUCTOR_CACHE_DIR says
    (`codecache._HEADER_DIR`, fixed at import): point it into the cache folder this process was
    given (the search's), so nothing a trial writes is left outside its search's folders."""
    folder = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    codecache = sys.modules.get("torch._inductor.codecache")
    if not folder or codecache is None or not hasattr(codecache, "_HEADER_DIR"):
        return
    codecache._HEADER_DIR = os.path.join(folder, "precompiled_headers")
    codecache._HEADER_LOCK_DIR = os.path.join(codecache._HEADER_DIR, "locks")


def main(job_path: str, result_path: str, parent_pid: int | None = None) -> int:
    """Run the job at `job_path` and write its result at `result_path`; with `parent_pid` (a
    spawned process), die with that parent. Whatever this process starts dies with it."""
    if parent_pid is not None:
        die_with_parent(parent_pid)
    guard_group()
    own_temporary_folder()
    job = json.loads(Path(job_path).read_text())
    from tuner.kernels import search_database

    def report(result: dict) -> None:
        """Hand in `result` and end now, from any thread: the measurement's watchdog found a call
        that will not return (tuner.measure.watchdog); the exit frees the locks it held."""
        write_result(result_path, result)
        sys.stderr.flush()
        os._exit(0)

    headers_in_cache_folder()
    if job["kind"] in ("trial", "confirm"):     # several variants in one process: a state none of them moves
        from tuner.runtime import RuntimeConfig

        RuntimeConfig().pin_for_timing()
    # The model's @tuner.autotune kernels read (and store) their configs in the search's database.
    with search_database(job["request"].get("spec", {}).get("kernel_db")):
        if job["kind"] == "trial":
            result = run_trial_job(job["request"], job.get("handed_at"), report)
        elif job["kind"] == "confirm":
            from tuner.measure import run_confirmation
            from tuner.trial import ConfirmRequest
            result = run_confirmation(ConfirmRequest.from_json(job["request"]), mark=mark_step,
                                      report=report).to_json()
        elif job["kind"] == "time":     # a user's process: nothing pinned, nothing run before its timing
            from tuner.measure import run_process_timing
            from tuner.trial import ProcessRequest
            result = run_process_timing(ProcessRequest.from_json(job["request"])).to_json()
        else:
            raise SystemExit(f"unknown job kind {job['kind']!r}")
    write_result(result_path, result)
    return 0


def write_result(result_path: str, result: dict) -> None:
    tmp = Path(result_path + ".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(result_path)   # the driver never reads a half-written result


if __name__ == "__main__":
    from tuner.workers.zygote import ZYGOTE_FLAG

    if sys.argv[1] == ZYGOTE_FLAG:
        code = zygote_main(*(int(arg) for arg in sys.argv[2:5]))
    else:
        code = main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else None)
    # The result is on disk and the database session closed: skip the interpreter's teardown
    # (Inductor's compile-worker pool and atexit hooks), which took about 2 s of every trial here.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
