"""Measurement inside one trial process: compile, verify against eager, time.

`prepare` is the one measurement core: trials (`run_trial`) and the confirmation
(`tuner.measure.run_confirmation`) both load, compile, verify and get ready to time
through it. `run_trial` is the measurement boundary: the one place that catches broadly
and turns any exception into a `Measurement` with a status (`prepare` turns a config's
failing first call into a `Rejected` value; running out of memory is CRASHED, see `failure`).
Everything timed runs on the model's real inputs (never zeros), after warm-up, under the
node's measure lock (`tuner.measure.node_lock`).
"""
from __future__ import annotations

import functools
import os
import random
import socket
import statistics
import time
import traceback
from typing import Any, Callable

import torch

from tuner.measure.prepared import Rejected, Runner
from tuner.measure.device import allocated_bytes, call_peak_mb, checked_calls, device_sync, select
from tuner.measure.verify import compare_gradients, compare_outputs, verify_outputs
from tuner.precision import FP32
from tuner.trial import (MeasureSpec, Measurement, RoundPruner, RoundValues, Status, TrialRequest, calibrate,
                         interleaved_rounds, median_and_iqr, paired_speedup, time_samples)

__all__ = ["Rejected", "Runner", "calibrate", "compare_gradients", "compare_outputs",
           "median_and_iqr", "prepare", "prepare_training", "run_trial", "time_samples"]
CANDIDATE, BASELINE = "candidate", "default"
LATER_CALLS = 2     # after the first: cudagraph trees record on the 2nd call and replay from the 3rd

def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def error_headline(exc: BaseException) -> str:
    """One line for a failed trial: the exception's type and the headline of its message.

    Inductor and Dynamo put the cause first and boilerplate last, so this is the first
    non-empty line (at most 300 characters), not the last.
    """
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[0][:300] if lines else ''}"


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def classify_compile_failure(exc: BaseException) -> Status:
    """First-call failures inside Dynamo/Inductor are compile errors; the rest ran and failed."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names & {"BackendCompilerFailed", "InductorError", "CppCompileError", "CUDACompileError"}:
        return Status.COMPILE_ERROR
    return Status.RUNTIME_ERROR


# What torch, Python and the C++ runtime say when an allocation fails (CPU, CUDA, errno 12).
OUT_OF_MEMORY_TEXT = ("can't allocate memory", "out of memory", "std::bad_alloc", "Cannot allocate memory")


def out_of_memory(exc: BaseException) -> bool:
    """Whether `exc`, or an exception it was raised from (Dynamo and Inductor wrap), is an allocation failure."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, MemoryError) or any(text in str(current) for text in OUT_OF_MEMORY_TEXT):
            return True
        current = current.__cause__ or current.__context__
    return False


def failure(exc: BaseException, spec: MeasureSpec, status: Status) -> tuple[Status, str]:
    """How a failed trial is recorded: `status` with the exception's headline, then the traceback.

    Running out of memory is CRASHED instead, headlined "out of memory (the trial exceeded
    --memory-limit N)" when the spec's cap is in force in this process, else "out of memory";
    a compile stopped at the adaptive cap is TIMEOUT, headlined with the cap's reason.
    """
    from tuner.measure.compile_cap import stopped
    from tuner.trial import exceeded, limit_in_force

    trace = traceback.format_exc()
    if (cap := stopped(exc)) is not None:       # past the adaptive compile cap (tuner.measure.compile_cap)
        return Status.TIMEOUT, f"{cap}\n{trace}"
    if out_of_memory(exc):
        capped = spec.memory_limit_mb is not None and limit_in_force()
        headline = exceeded(spec.memory_limit_mb) if capped else "out of memory"
        return Status.CRASHED, f"{headline}: {error_headline(exc)}\n{trace}"
    return status, f"{error_headline(exc)}\n{trace}"


def rejected(exc: BaseException, spec: MeasureSpec) -> Rejected:
    """A config's failed compile or call as a `Rejected` (`failure`'s status and message)."""
    return Rejected(*failure(exc, spec, classify_compile_failure(exc)), out_of_memory=out_of_memory(exc))


def allow_variants(count: int) -> None:
    """Let this process compile `count` variants of one model without Dynamo falling back to eager.

    Every variant of a model whose class comes from a library (torchvision, timm, transformers)
    shares one `forward` code object, and Dynamo keeps at most `recompile_limit` (8) compiled
    entries per code object: past it, it runs the frame uncompiled and says nothing. Measured
    here: the 9th frozen ResNet-18 variant of one confirmation ran at 20 ms, eager speed, against
    11.6 ms for the first eight. So the limit is raised to cover every variant, and reaching it
    anyway raises (the variant is recorded as failed) instead of timing eager under its name.
    """
    import torch._dynamo.config as dynamo_config

    dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, 2 * count + 8)
    dynamo_config.fail_on_recompile_limit_hit = True


def apply_threads(spec: MeasureSpec) -> int:
    """Fix torch's thread count as `spec` says (None: torch's default); the count measured with."""
    if spec.threads:
        torch.set_num_threads(spec.threads)
    return torch.get_num_threads()


def prepare(spec: MeasureSpec, params: tuple[tuple[str, Any], ...] | None) -> Runner | Rejected:
    """The one way a trial and the confirmation get a config ready to time.

    Loads `spec.model_path` afresh (seeded with `spec.seed`: new module and class objects, so
    Dynamo caches never mix configs) and makes its device the process's current one, takes its
    eager output and an fp64 one as the reference (`tuner.measure.references`: once per process;
    the load and these eager runs under the device's compile lock), compiles `params` (None:
    eager, not compiled), makes the first call under the compile lock (`compile_s` is timed from
    inside the lock, so waiting at it does not count, in a warm compiler, `tuner.measure.compile_time`), waits for the
    device, then makes LATER_CALLS more calls (with cudagraphs the first call runs outside the
    graph; the replays are what is timed and what users get) and compares every call's output
    with the reference. A failing call (an asynchronous CUDA error included) or a mismatch is a
    `Rejected`; a broken model file or unknown knobs raise (the caller's boundary records them).
    A precision other than fp32 is checked by `tuner.measure.precision_check.check_precision` instead of the gate.
    With `spec.mode` "train" it is `prepare_training` (the Runner times whole training steps).
    """
    from tuner.inductor import compile_config, compile_model, gemm_choices, triton_choices
    from tuner.measure.compile_cap import capped
    from tuner.measure.compile_time import warm_compiler
    from tuner.measure.node_lock import compile_lock, reference_lock
    from tuner.measure.precision_check import check_precision
    from tuner.measure.references import output_references
    from tuner.measure.watchdog import watched
    from tuner.workload import TRAIN, flatten_outputs, load_model_file

    if spec.mode == TRAIN:      # whole training steps, checked on the loss and gradients
        return prepare_training(spec, params)
    loaded = load_model_file(spec.model_path, seed=spec.seed, shape=spec.shape, assigned_gpus=spec.gpu_ids,
                             driver_gpus=spec.driver_gpus, hold=reference_lock)
    select(loaded.device)
    sync = device_sync(loaded.device)
    precision = dict(params or ()).get("precision", FP32)
    references = output_references(spec, loaded, wide=precision == FP32)
    reference, wide = references.eager, references.wide
    with torch.no_grad():
        config = None if params is None else compile_config(dict(params))
        model = loaded.model if config is None else compile_model(loaded.model, config)
        call = lambda: flatten_outputs(loaded.call(model))  # noqa: E731
        try:
            # GEMMs Inductor autotunes in this compile (max_autotune) and the tile configs its generated
            # Triton kernels settle on (CUDA) are harvested for lookups.
            patches = None if config is None else config.inductor
            tunes_kernels = loaded.device.startswith("cuda") and triton_choices.autotunes_triton(patches)
            with compile_lock(loaded.device, patches), \
                    watched(loaded.device, references.eager_s, what=_call_name(params)) as watch:
                if config is not None:      # compile_s is then this config's own (tuner.measure.compile_time)
                    warm_compiler(loaded)
                with gemm_choices.harvesting(gemm_choices.autotunes_gemms(patches)) as gemms, \
                        triton_choices.harvesting(tunes_kernels) as kernels:
                    with capped():      # the candidate's compile, when `run_trial` armed a cap
                        (first,), compile_s = checked_calls(call, sync, 1)
                    watch.first_call_done()
                    later, _ = checked_calls(call, sync, LATER_CALLS)
        except Exception as exc:  # a config that fails is a value, as the module docstring says
            return rejected(exc, spec)
    if precision != FP32:
        try:
            note = check_precision(spec, loaded, model, reference, [first, *later], precision)
        except Exception as exc:  # failing on fresh inputs: a value, like a failing first call
            return rejected(exc, spec)
        if isinstance(note, Rejected):
            return note
    else:
        note, mismatch = _verify_calls(reference, [first, *later], wide)
        if mismatch:
            return Rejected(Status.WRONG_RESULT, mismatch)
    gemm_choices.save_harvest(gemms, db_url=spec.kernel_db, device=loaded.device)  # a verified compile's only
    triton_choices.save_harvest(kernels.choices(), db_url=spec.kernel_db, device=loaded.device)
    return Runner(call=lambda: loaded.call(model), sync=sync, device=loaded.device,
                  compile_s=None if params is None else compile_s, note=note)


def _call_name(params: tuple[tuple[str, Any], ...] | None) -> str:
    """What a variant's call is called in the watchdog's message (tuner.measure.watchdog)."""
    return "the eager call" if params is None else "the default compile's call" if not params else \
        "the compiled call of this config"


def _verify_calls(reference: list[torch.Tensor], calls: list[list[torch.Tensor]],
                  wide: list[torch.Tensor] | None) -> tuple[str | None, str | None]:
    """(the gate's note on the first call, the first mismatch) over every call's outputs; a later
    call's mismatch says which call it was."""
    verdicts = [verify_outputs(reference, got, wide) for got in calls]
    for n, verdict in enumerate(verdicts, start=1):
        if verdict.mismatch:
            return None, verdict.mismatch if n == 1 else f"call {n} (after a first that matched): {verdict.mismatch}"
    return verdicts[0].note, None


def prepare_training(spec: MeasureSpec, params: tuple[tuple[str, Any], ...] | None) -> Runner | Rejected:
    """`prepare` in train mode (`tuner.workload.training`): load the file afresh under `spec.seed`, take an
    eager step's loss and gradients and the same step in float64 as the reference
    (`tuner.measure.references.step_references`; weights and buffers restored after), compile `params`
    (None: eager), make the first step (with the optimizer's) under the compile lock, then LATER_CALLS
    more steps each from the initial weights again (no optimizer step: the replays a cudagraph
    config times, checked as the first), and compare each step's loss and gradients with the
    reference (`tuner.measure.verify.compare_gradients`, against fp64 where it runs). `call` is one
    whole step, grad enabled whatever the caller's grad mode; `compile_s` is the first step's time."""
    from tuner.inductor import compile_config, compile_model
    from tuner.measure.compile_cap import capped
    from tuner.measure.compile_time import warm_compiler
    from tuner.measure.node_lock import compile_lock, reference_lock
    from tuner.measure.references import host_copy, step_references
    from tuner.measure.watchdog import watched
    from tuner.workload import compare_steps, load_model_file, loss_call, make_optimizer, run_step, timed_step

    loaded = load_model_file(spec.model_path, seed=spec.seed, shape=spec.shape, assigned_gpus=spec.gpu_ids,
                             driver_gpus=spec.driver_gpus, hold=reference_lock)
    select(loaded.device)
    sync = device_sync(loaded.device)
    loss, initial = loss_call(loaded), {k: host_copy(v) for k, v in loaded.model.state_dict().items()}
    references = step_references(spec, loaded, loss)
    loaded.model.load_state_dict(initial)
    config = None if params is None else compile_config(dict(params))
    model = loaded.model if config is None else compile_model(loaded.model, config)
    optimizer = make_optimizer(loaded, loaded.model)
    try:
        with compile_lock(loaded.device, None if config is None else config.inductor), \
                watched(loaded.device, references.eager_s, what=_call_name(params).replace("call", "step")) as watch:
            if config is not None:            # compile_s is then this config's own (tuner.measure.compile_time)
                warm_compiler(loaded)
            start = time.perf_counter()       # inside the lock: waiting at it is not compiling
            with capped():                    # the candidate's compile, when `run_trial` armed a cap
                steps = [run_step(loaded.model, lambda: loss(model), optimizer, loaded.path)]
                sync()                        # an asynchronous CUDA error is this config's
            compile_s = time.perf_counter() - start
            watch.first_call_done()
            for _ in range(LATER_CALLS):      # the optimizer moved the weights: from the initial ones again
                loaded.model.load_state_dict(initial)
                steps.append(run_step(loaded.model, lambda: loss(model), None, loaded.path))
                sync()
    except Exception as exc:  # a config that fails is a value, as the module docstring says
        return rejected(exc, spec)
    for n, step in enumerate(steps, start=1):
        mismatch = compare_steps(references.eager, step, functools.partial(compare_gradients, floor=references.floor),
                                 references.wide)
        if mismatch:
            where = "training step" if n == 1 else f"training step {n} (from the same weights, after a first that matched)"
            return Rejected(Status.WRONG_RESULT, f"{where}: {mismatch}")
    return Runner(call=timed_step(loaded.model, lambda: loss(model), optimizer), sync=sync,
                  device=loaded.device, compile_s=None if params is None else compile_s)


def run_trial(request: TrialRequest, *, report: Callable[[dict[str, Any]], None] | None = None) -> Measurement:
    """Compile the request's candidate, verify it against eager, and time it.

    Never raises for a tuning failure: every exception becomes a Measurement. `report` is how
    this trial process hands in a result and ends (workers/trial_process.py): with it, a call
    under the compile lock that never returns is ended by `tuner.measure.watchdog` as a TIMEOUT.
    """
    from tuner.measure.watchdog import finishing

    worker = worker_name()

    def hung(message: str) -> None:
        report(Measurement.failed(Status.TIMEOUT, message, worker).to_json())  # type: ignore[misc]

    try:
        with finishing(hung if report is not None else None):
            return _measure(request, worker)
    except Exception as exc:  # the measurement boundary: a bug in the trial is still a value
        return Measurement.failed(*failure(exc, request.spec, Status.RUNTIME_ERROR), worker)


def _measure(request: TrialRequest, worker: str) -> Measurement:
    """Time the candidate against Inductor's defaults in this process, paired and interleaved.

    The defaults' compile comes from Inductor's FX graph cache after the first trial, so the
    pairing costs a model load and a cache hit. It is compiled and first called before the
    candidate. The peak memory is the candidate's own (`tuner.measure.device.call_peak_mb`). The trial of the defaults themselves times
    its one runner twice per round: its ratio shows the noise of this protocol on this machine.
    With `request.pruning`, a `RoundPruner` may stop the rounds early: the trial is then PRUNED,
    with the pairing of the rounds it ran.
    """
    from tuner.measure.compile_cap import armed
    from tuner.measure.compile_time import fx_cache_counts, served_from_cache
    from tuner.measure.node_lock import measure_lock

    spec = request.spec
    threads = apply_threads(spec)
    allow_variants(2)
    began = time.perf_counter()
    # The default compile goes first, compiled and called before the candidate exists: state a
    # candidate's compile sets up once per process (freezing's passes) then cannot slow it.
    before = fx_cache_counts()
    baseline = prepare(spec, ())
    if isinstance(baseline, Rejected):
        if not request.params:          # the defaults' own trial: its failure is its own
            return Measurement.failed(baseline.status, baseline.message, worker)
        return Measurement.failed(Status.RUNTIME_ERROR, f"the default compile, which every trial is paired with, "
                                  f"failed: {baseline.message}", worker)
    resident_since = allocated_bytes(baseline.device) if request.params else 0
    # The defaults' own trial times its runner against itself: the ratio shows the noise. Only
    # the candidate's compile is capped (tuner.measure.compile_cap), never the baseline's.
    if request.params:
        before = fx_cache_counts()
    with armed(request.compile_cap):
        runner = prepare(spec, request.params) if request.params else baseline
    cached = served_from_cache(before, fx_cache_counts())
    if isinstance(runner, Rejected):
        return Measurement.failed(runner.status, runner.message, worker)
    pruner = RoundPruner(request.pruning) if request.pruning is not None else None
    steps = RoundValues(pruner)
    timing = time.perf_counter()
    with torch.no_grad(), measure_lock(runner.device):
        peak_mb = call_peak_mb(runner.call, runner.device, resident_since=resident_since)
        rounds = interleaved_rounds({CANDIDATE: runner, BASELINE: baseline}, spec.plan(), baseline=BASELINE,
                                    rng=random.Random(spec.seed * 100_003 + request.number),
                                    should_stop=None if pruner is None else
                                    lambda r: steps.should_stop(r[BASELINE], r[CANDIDATE]))
    median, spread = median_and_iqr(rounds[CANDIDATE])
    paired_compile_s = baseline.compile_s if request.params else None     # the defaults' trial: compile_s
    sp = paired_speedup(rounds[BASELINE], rounds[CANDIDATE])
    pruned = pruner is not None and pruner.stopped_at is not None
    return Measurement(status=Status.PRUNED if pruned else Status.OK, latency_ms=median, spread_ms=spread,
                       compile_s=runner.compile_s, peak_mem_mb=peak_mb,
                       reps=len(rounds[CANDIDATE]), worker=worker, threads=threads,
                       baseline_ms=statistics.median(rounds[BASELINE]), speedup=sp.median if sp else None,
                       speedup_low=sp.low if sp else None, speedup_high=sp.high if sp else None,
                       intermediate=steps.all(rounds[BASELINE], rounds[CANDIDATE]),
                       error=pruner.reason() if pruned else runner.note,
                       load_s=timing - began - (runner.compile_s or 0.0) - (paired_compile_s or 0.0),
                       baseline_compile_s=paired_compile_s, measure_s=time.perf_counter() - timing,
                       compile_cached=cached)

