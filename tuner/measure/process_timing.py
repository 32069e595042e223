"""A timing process (`tuner.trial.process`): one config, timed as a user's program runs it.

Inside a fresh process started with the request's runtime knobs, `run_process_timing` does what
a user's script does and nothing before it: load the model file, compile, make the first call
(under the node's compile lock), warm up, then time whole calls (or training steps) under the
node's measure lock. Only then does it load the file a second time and check the first call's
output against eager (`tuner.measure.references`), so no reference run, no other variant and no
earlier compile can have moved the allocator's state its calls were timed in. The process
stage compares such processes taken in alternation (`tuner.search.process_stage`).
"""
from __future__ import annotations

import contextlib
import statistics
import time
from typing import Any, Callable

import torch

from tuner.precision import FP32
from tuner.trial import ProcessRequest, ProcessTiming, Status

__all__ = ["run_process_timing"]


def run_process_timing(request: ProcessRequest) -> ProcessTiming:
    """Time `request` in this process; never raises for a tuning failure (the measurement boundary)."""
    from tuner.measure.core import apply_threads, failure

    try:
        apply_threads(request.spec)
        return _timed(request)
    except Exception as exc:  # the measurement boundary: a failing config or bug is a value
        status, message = failure(exc, request.spec, Status.RUNTIME_ERROR)
        return ProcessTiming.failed(request.label, status, message)


def _timed(request: ProcessRequest) -> ProcessTiming:
    from tuner.inductor import compile_config, compile_model
    from tuner.measure.core import classify_compile_failure, error_headline
    from tuner.measure.device import device_sync, select
    from tuner.measure.node_lock import compile_lock, measure_lock, reference_lock
    from tuner.measure.prepared import Runner
    from tuner.trial import per_call_s, sampler_for
    from tuner.workload import TRAIN, load_model_file

    spec = request.spec
    loaded = load_model_file(spec.model_path, seed=spec.seed, shape=spec.shape, assigned_gpus=spec.gpu_ids,
                             hold=reference_lock)
    select(loaded.device)
    sync = device_sync(loaded.device)
    config = None if request.params is None else compile_config(dict(request.params))
    model = loaded.model if config is None else compile_model(loaded.model, config)
    train = spec.mode == TRAIN
    call, first_result = _calls(loaded, model, train)
    try:
        with compile_lock(loaded.device, None if config is None else config.inductor):
            start = time.perf_counter()
            first = first_result()
            sync()
            compile_s = time.perf_counter() - start
    except Exception as exc:  # the config's own failure: a value
        return ProcessTiming.failed(request.label, classify_compile_failure(exc), error_headline(exc))
    # Training steps set grad mode themselves; inference calls run under no_grad, as trials time them.
    grad_mode = contextlib.nullcontext() if train else torch.no_grad()
    with grad_mode, measure_lock(loaded.device):
        seconds = per_call_s(call, warmup=spec.warmup, sync=sync)
        per_call_s(call, warmup=request.warmup_calls(seconds), sync=sync)
        runner = Runner(call=call, sync=sync, device=loaded.device, compile_s=compile_s)
        samples = sampler_for(runner, request.calls_per_sample(seconds), request.samples)()
    # A reduced precision was checked against its tolerance in its trial; here fp32 configs are checked.
    checked = request.check and dict(request.params or ()).get("precision", FP32) == FP32
    mismatch = _check(request, first, train) if checked else None
    if mismatch:
        return ProcessTiming.failed(request.label, Status.WRONG_RESULT, mismatch)
    return ProcessTiming(label=request.label, status=Status.OK, samples_ms=tuple(samples),
                         latency_ms=statistics.median(samples), compile_s=None if config is None else compile_s,
                         threads=torch.get_num_threads())


def _calls(loaded: Any, model: Any, train: bool) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(what is timed, the first call returning what is checked: host copies of its outputs, or its
    training step's loss and gradients)."""
    from tuner.measure.references import host_copy
    from tuner.workload import flatten_outputs, loss_call, make_optimizer, run_step, timed_step

    if not train:
        def first() -> list[torch.Tensor]:
            with torch.no_grad():
                return [host_copy(t) for t in flatten_outputs(loaded.call(model))]
        return lambda: loaded.call(model), first
    loss = loss_call(loaded)
    optimizer = make_optimizer(loaded, loaded.model)
    step = timed_step(loaded.model, lambda: loss(model), optimizer)

    # The first step runs from the initial weights, as the reference step does (no optimizer step).
    return step, lambda: run_step(loaded.model, lambda: loss(model), None, loaded.path)


def _check(request: ProcessRequest, first: Any, train: bool) -> str | None:
    """After timing: a fresh load of the file, its eager reference, and the first call held against it."""
    import functools

    from tuner.measure.node_lock import reference_lock
    from tuner.measure.references import output_references, step_references
    from tuner.measure.verify import compare_gradients, verify_outputs
    from tuner.workload import compare_steps, load_model_file, loss_call

    spec = request.spec
    fresh = load_model_file(spec.model_path, seed=spec.seed, shape=spec.shape, assigned_gpus=spec.gpu_ids,
                            hold=reference_lock)
    if train:
        refs = step_references(spec, fresh, loss_call(fresh))
        return compare_steps(refs.eager, first, functools.partial(compare_gradients, floor=refs.floor), refs.wide)
    refs = output_references(spec, fresh, wide=True)
    return verify_outputs(refs.eager, first, refs.wide).mismatch
