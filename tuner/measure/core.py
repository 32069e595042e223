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

import copy
import os
import random
import resource
import socket
import statistics
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

import torch

from tuner.precision import FP32
from tuner.trial import (MeasureSpec, Measurement, RoundPruner, RoundValues, Status, TrialRequest, calibrate,
                         interleaved_rounds, median_and_iqr, paired_speedup, time_samples)

__all__ = ["Rejected", "Runner", "calibrate", "check_precision", "compare_outputs", "median_and_iqr", "prepare",
           "prepare_training", "run_trial", "time_samples"]
CANDIDATE, BASELINE = "candidate", "default"

# (rtol, atol) by dtype. Inductor reorders reductions and fuses, so fp32 gets more
# room than torch.testing's defaults; low precision gets its usual tolerance.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (5e-2, 5e-2),
}


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def error_headline(exc: BaseException) -> str:
    """One line for a failed trial: the exception's type and the headline of its message.

    Inductor and Dynamo put the cause first and boilerplate last, so this is the first
    non-empty line (at most 300 characters), not the last.
    """
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[0][:300] if lines else ''}"


def compare_outputs(reference: list[torch.Tensor], got: list[torch.Tensor]) -> str | None:
    """None when `got` matches `reference` within its dtype's tolerance, else why not.

    Never passes vacuously: a reference with no tensor, or with NaN (which would match any
    NaN), is a mismatch; the driver refuses such model files before any trial
    (`tuner.workload.eager_reference`). NaN or Inf where the reference is finite is a
    mismatch, and where the reference is ±Inf the output must hold the same Inf.
    """
    if not reference:
        return "eager output holds no tensor, so there is nothing to compare"
    if len(reference) != len(got):
        return f"output has {len(got)} tensors, eager has {len(reference)}"
    for i, (ref, out) in enumerate(zip(reference, got)):
        if ref.shape != out.shape or ref.dtype != out.dtype:
            return f"output {i}: {tuple(out.shape)} {out.dtype}, eager {tuple(ref.shape)} {ref.dtype}"
        ref, out = ref.detach().cpu(), out.detach().cpu()
        if not ref.is_floating_point():
            if not torch.equal(ref, out):
                return f"output {i}: integer values differ from eager"
            continue
        mismatch = _compare_floats(ref, out)
        if mismatch:
            return f"output {i}: {mismatch}"
    return None


def _compare_floats(ref: torch.Tensor, out: torch.Tensor) -> str | None:
    if bool(torch.isnan(ref).any()):
        return f"eager holds {int(torch.isnan(ref).sum())} NaN values, so nothing can match it"
    bad = ~torch.isfinite(out) & torch.isfinite(ref)
    if bool(bad.any()):
        return f"{int(bad.sum())} NaN/Inf values where eager is finite"
    inf = torch.isinf(ref)
    wrong_inf = int((out[inf] != ref[inf]).sum())     # NaN, a finite value or the other sign
    if wrong_inf:
        return f"{wrong_inf} values differ from eager's ±Inf (an Inf must keep its position and sign)"
    ref, out = ref[~inf], out[~inf]
    rtol, atol = TOLERANCES.get(ref.dtype, (1e-4, 1e-4))
    if not torch.allclose(out, ref, rtol=rtol, atol=atol):
        err = float((out.double() - ref.double()).abs().max())
        return f"max abs error {err:.3g} exceeds {ref.dtype} tolerance (rtol={rtol}, atol={atol})"
    return None


def device_sync(device: str) -> Callable[[], None]:
    if device.startswith("cuda"):
        return torch.cuda.synchronize
    return lambda: None


def peak_memory_mb(device: str) -> float:
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0   # Linux reports KiB


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
    --memory-limit N)" when the spec's cap is in force in this process, else "out of memory".
    """
    from tuner.trial import exceeded, limit_in_force

    trace = traceback.format_exc()
    if out_of_memory(exc):
        capped = spec.memory_limit_mb is not None and limit_in_force()
        headline = exceeded(spec.memory_limit_mb) if capped else "out of memory"
        return Status.CRASHED, f"{headline}: {error_headline(exc)}\n{trace}"
    return status, f"{error_headline(exc)}\n{trace}"


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


@dataclass(frozen=True, eq=False)
class Runner:
    """A model file's model, compiled as asked and verified against eager: ready to time.

    `call` runs it once on the file's inputs, `sync` waits for its device, `compile_s` is its
    first call (tracing, compiling and one run; None for eager). `note` is the accuracy measured
    for a precision other than fp32 (None otherwise).
    """

    call: Callable[[], Any]
    sync: Callable[[], None]
    device: str
    compile_s: float | None
    note: str | None = None


@dataclass(frozen=True)
class Rejected:
    """A config that cannot be timed: its first call failed (COMPILE_ERROR or RUNTIME_ERROR, CRASHED
    when it ran out of memory; `message` is the headline, then the traceback) or its output differs
    from eager (WRONG_RESULT)."""

    status: Status
    message: str

    @property
    def headline(self) -> str:
        return self.message.partition("\n")[0]


def prepare(spec: MeasureSpec, params: tuple[tuple[str, Any], ...] | None) -> Runner | Rejected:
    """The one way a trial and the confirmation get a config ready to time.

    Loads `spec.model_path` afresh (seeded with `spec.seed`: new module and class objects, so
    Dynamo caches never mix configs), takes its eager output as the reference, compiles
    `params` (None: eager, not compiled), makes the first call under the node's compile lock
    and compares its output with the reference. A failing first call or a mismatch is a
    `Rejected`; a broken model file or unknown knobs raise (the caller's boundary records them).
    A precision other than fp32 is checked by `check_precision` instead of `compare_outputs`.
    With `spec.mode` "train" it is `prepare_training` (the Runner times whole training steps).
    """
    from tuner.inductor import compile_config, compile_model, gemm_choices, triton_choices
    from tuner.measure.node_lock import compile_lock
    from tuner.workload import TRAIN, flatten_outputs, load_model_file

    if spec.mode == TRAIN:      # whole training steps, checked on the loss and gradients
        return prepare_training(spec, params)
    loaded = load_model_file(spec.model_path, seed=spec.seed, shape=spec.shape)
    with torch.no_grad():
        reference = [t.clone() for t in flatten_outputs(loaded.call())]
        config = None if params is None else compile_config(dict(params))
        model = loaded.model if config is None else compile_model(loaded.model, config)
        start = time.perf_counter()
        try:
            # GEMMs Inductor autotunes in this compile (max_autotune) and the tile configs its generated
            # Triton kernels settle on (CUDA) are harvested for lookups.
            patches = None if config is None else config.inductor
            tunes_kernels = loaded.device.startswith("cuda") and triton_choices.autotunes_triton(patches)
            with compile_lock(loaded.device, patches), \
                    gemm_choices.harvesting(gemm_choices.autotunes_gemms(patches)) as gemms, \
                    triton_choices.harvesting(tunes_kernels) as kernels:
                first = flatten_outputs(loaded.call(model))
        except Exception as exc:  # a config that fails is a value, as the module docstring says
            return Rejected(*failure(exc, spec, classify_compile_failure(exc)))
        compile_s = time.perf_counter() - start
    precision = dict(params or ()).get("precision", FP32)
    if precision != FP32:
        note = check_precision(spec, loaded, model, reference, first, precision)
        if isinstance(note, Rejected):
            return note
    else:
        note, mismatch = None, compare_outputs(reference, first)
        if mismatch:
            return Rejected(Status.WRONG_RESULT, mismatch)
    gemm_choices.save_harvest(gemms, db_url=spec.kernel_db, device=loaded.device)  # a verified compile's only
    triton_choices.save_harvest(kernels.choices(), db_url=spec.kernel_db, device=loaded.device)
    return Runner(call=lambda: loaded.call(model), sync=device_sync(loaded.device), device=loaded.device,
                  compile_s=None if params is None else compile_s, note=note)


def prepare_training(spec: MeasureSpec, params: tuple[tuple[str, Any], ...] | None) -> Runner | Rejected:
    """`prepare` in train mode (`tuner.workload.training`): load the file afresh under `spec.seed`, take an
    eager step's loss and gradients as the reference (weights and buffers restored after), compile
    `params` (None: eager), make the first step (with the optimizer's) under the compile lock and
    compare its loss and gradients with the reference (`compare_outputs`). `call` is one whole
    step, grad enabled whatever the caller's grad mode; `compile_s` is the first step's time."""
    from tuner.inductor import compile_config, compile_model
    from tuner.measure.node_lock import compile_lock
    from tuner.workload import compare_steps, load_model_file, loss_call, make_optimizer, run_step, timed_step

    loaded = load_model_file(spec.model_path, seed=spec.seed, shape=spec.shape)
    loss, initial = loss_call(loaded), copy.deepcopy(loaded.model.state_dict())
    reference = run_step(loaded.model, lambda: loss(loaded.model), None, loaded.path)
    loaded.model.load_state_dict(initial)
    config = None if params is None else compile_config(dict(params))
    model = loaded.model if config is None else compile_model(loaded.model, config)
    optimizer = make_optimizer(loaded, loaded.model)
    start = time.perf_counter()
    try:
        with compile_lock(loaded.device, None if config is None else config.inductor):
            first = run_step(loaded.model, lambda: loss(model), optimizer, loaded.path)
    except Exception as exc:  # a config that fails is a value, as the module docstring says
        return Rejected(*failure(exc, spec, classify_compile_failure(exc)))
    compile_s = time.perf_counter() - start
    mismatch = compare_steps(reference, first, compare_outputs)
    if mismatch:
        return Rejected(Status.WRONG_RESULT, f"training step: {mismatch}")
    return Runner(call=timed_step(loaded.model, lambda: loss(model), optimizer), sync=device_sync(loaded.device),
                  device=loaded.device, compile_s=None if params is None else compile_s)


def check_precision(spec: MeasureSpec, loaded: Any, model: Any, reference: list[torch.Tensor],
                    first: list[torch.Tensor], precision: str) -> str | Rejected:
    """The accuracy constraint of a candidate in reduced `precision`: on the file's inputs (`first`
    against `reference`) and on FRESH_INPUT_SETS more input sets (`get_inputs()` under the seeds
    after `spec.seed`), the norm-wise relative error against the fp32 eager output
    (`tuner.precision.relative_error`) must stay within `spec.tolerance`. Returns the line that
    reports the error measured, or a WRONG_RESULT `Rejected` that says it (a call that fails on
    fresh inputs is rejected like a failing first call)."""
    from tuner.measure.node_lock import compile_lock
    from tuner.precision import FRESH_INPUT_SETS, accuracy_problem
    from tuner.workload import flatten_outputs

    tolerance = spec.tolerance
    if tolerance is None:
        return Rejected(Status.WRONG_RESULT, f"precision {precision} needs an accuracy tolerance; "
                                             f"search with --tolerance (e.g. --tolerance 1e-2)")
    problem, worst = accuracy_problem(reference, first)
    sets = 1
    with torch.no_grad(), compile_lock(loaded.device):
        while problem is None and worst <= tolerance and sets <= FRESH_INPUT_SETS:
            fresh = loaded.with_inputs(spec.seed + sets)
            expected = [t.clone() for t in flatten_outputs(fresh.call())]
            try:
                got = flatten_outputs(fresh.call(model))
            except Exception as exc:  # a config that fails is a value, as the module docstring says
                return Rejected(*failure(exc, spec, classify_compile_failure(exc)))
            problem, error = accuracy_problem(expected, got)
            worst, sets = max(worst, error), sets + 1
    where = f"on {sets} input set{'s' if sets > 1 else ''}"
    if problem is not None:
        return Rejected(Status.WRONG_RESULT, f"precision {precision}: {problem} ({where})")
    if worst > tolerance:
        return Rejected(Status.WRONG_RESULT, f"precision {precision}: max relative error {worst:.3g} exceeds "
                                             f"--tolerance {tolerance:g} ({where})")
    return f"precision {precision}: max relative error {worst:.3g} within --tolerance {tolerance:g} ({where})"


def run_trial(request: TrialRequest) -> Measurement:
    """Compile the request's candidate, verify it against eager, and time it.

    Never raises for a tuning failure: every exception becomes a Measurement.
    """
    worker = worker_name()
    try:
        return _measure(request, worker)
    except Exception as exc:  # the measurement boundary: a bug in the trial is still a value
        return Measurement.failed(*failure(exc, request.spec, Status.RUNTIME_ERROR), worker)


def _measure(request: TrialRequest, worker: str) -> Measurement:
    """Time the candidate against Inductor's defaults in this process, paired and interleaved.

    The defaults' compile comes from Inductor's FX graph cache after the first trial, so the
    pairing costs a model load and a cache hit. The trial of the defaults themselves times
    its one runner twice per round: its ratio shows the noise of this protocol on this machine.
    With `request.pruning`, a `RoundPruner` may stop the rounds early: the trial is then PRUNED,
    with the pairing of the rounds it ran.
    """
    from tuner.measure.node_lock import measure_lock

    spec = request.spec
    threads = apply_threads(spec)
    allow_variants(2)
    runner = prepare(spec, request.params)
    if isinstance(runner, Rejected):
        return Measurement.failed(runner.status, runner.message, worker)
    # The defaults' own trial times its runner against itself: the ratio shows the noise.
    baseline = prepare(spec, ()) if request.params else runner
    if isinstance(baseline, Rejected):
        return Measurement.failed(Status.RUNTIME_ERROR, f"the default compile, which every trial is paired with, "
                                  f"failed: {baseline.message}", worker)
    pruner = RoundPruner(request.pruning) if request.pruning is not None else None
    steps = RoundValues(pruner)
    with torch.no_grad(), measure_lock(runner.device):
        rounds = interleaved_rounds({CANDIDATE: runner, BASELINE: baseline}, spec.plan(), baseline=BASELINE,
                                    rng=random.Random(spec.seed * 100_003 + request.number),
                                    should_stop=None if pruner is None else
                                    lambda r: steps.should_stop(r[BASELINE], r[CANDIDATE]))
    median, spread = median_and_iqr(rounds[CANDIDATE])
    sp = paired_speedup(rounds[BASELINE], rounds[CANDIDATE])
    pruned = pruner is not None and pruner.stopped_at is not None
    return Measurement(status=Status.PRUNED if pruned else Status.OK, latency_ms=median, spread_ms=spread,
                       compile_s=runner.compile_s, peak_mem_mb=peak_memory_mb(runner.device),
                       reps=len(rounds[CANDIDATE]), worker=worker, threads=threads,
                       baseline_ms=statistics.median(rounds[BASELINE]), speedup=sp.median if sp else None,
                       speedup_low=sp.low if sp else None, speedup_high=sp.high if sp else None,
                       intermediate=steps.all(rounds[BASELINE], rounds[CANDIDATE]),
                       error=pruner.reason() if pruned else runner.note)
