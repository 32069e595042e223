"""What a config is verified against: eager outputs (or an eager training step) and the same in
float64, taken once per process, under the device's compile lock, and kept on the host.

Every variant a trial or confirmation process prepares loads the same model file under the same
seed, so the references are the same for each. They are taken at the process's first `prepare`,
before any other variant's model is resident, and reused: the float64 copy of the model (four
times a bf16 model; `tuner.measure.verify.widened_model`) then exists once per process, beside
one model, and is freed as soon as its output exists, never held beside every variant of a
confirmation. Outputs are kept on the host, where the gate compares them anyway, so they hold
no device memory while configs compile. Loading the file and these eager runs hold the device's
compile lock (`tuner.measure.node_lock.reference_lock`), so they never overlap another trial's
timed section on it.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from tuner.measure.node_lock import reference_lock
from tuner.measure.verify import eager_precision, fp64_reference, widen, widened_model
from tuner.trial import MeasureSpec

__all__ = ["References", "host_copy", "output_references", "step_references"]


@dataclass(frozen=True, eq=False)
class References:
    """`eager`: the reference in the model's own dtypes (outputs, or an eager `StepResult`);
    `wide`: the same in float64 (None: not asked for, or the model does not run in float64)."""

    eager: Any
    wide: Any
    tried_wide: bool
    floor: float = 0.0      # a step's: eager's error relative to fp64 (tuner.measure.verify.eager_precision)
    eager_s: float = 0.0    # how long the eager call (or step) took, its outputs on the host (tuner.measure.watchdog)


_kept: dict[tuple[Any, ...], References] = {}      # the last model's only: a process measures one model


def host_copy(t: torch.Tensor) -> torch.Tensor:
    """`t` detached, copied to the host (a copy even when it is there: an output may alias the model's state)."""
    return t.detach().to("cpu", copy=True)


def _reuse(key: tuple[Any, ...], wide: bool) -> References | None:
    kept = _kept.get(key)
    return kept if kept is not None and (kept.tried_wide or not wide) else None


def _keep(key: tuple[Any, ...], references: References) -> References:
    _kept.clear()
    _kept[key] = references
    return references


def output_references(spec: MeasureSpec, loaded: Any, *, wide: bool) -> References:
    """The eager outputs of `loaded` (a fresh load of `spec`'s model file) and, with `wide`, the
    float64 ones (`fp64_reference`): the ones this process already took for the same file, seed,
    shape and device, else taken now under `reference_lock`."""
    from tuner.workload import flatten_outputs

    key = ("outputs", str(loaded.path), spec.seed, spec.shape, loaded.device)
    kept = _reuse(key, wide)
    if kept is not None:
        return kept
    with torch.no_grad(), reference_lock(loaded.device):
        start = time.perf_counter()
        eager = [host_copy(t) for t in flatten_outputs(loaded.call())]
        eager_s = time.perf_counter() - start
        return _keep(key, References(eager, fp64_reference(loaded) if wide else None, wide, eager_s=eager_s))


def step_references(spec: MeasureSpec, loaded: Any, loss: Callable[[Any], Any]) -> References:
    """An eager training step of `loaded` (no optimizer step: its weights are left as they are)
    and the same step in float64 (None where it does not run so), as `output_references` takes
    outputs. `loss` is `tuner.workload.loss_call(loaded)`."""
    from tuner.workload import run_step

    key = ("step", str(loaded.path), spec.seed, spec.shape, loaded.device)
    kept = _reuse(key, True)
    if kept is not None:
        return kept
    with reference_lock(loaded.device):
        start = time.perf_counter()
        eager = _on_host(run_step(loaded.model, lambda: loss(loaded.model), None, loaded.path))
        eager_s = time.perf_counter() - start
        wide = _wide_step(loaded)
    floor = 0.0 if wide is None else eager_precision(*(_tensors(step) for step in (eager, wide)))
    return _keep(key, References(eager, wide, True, floor, eager_s))


def _tensors(step: Any) -> list[torch.Tensor]:
    """A step's loss and gradients, in order (a missing gradient as an empty tensor, on both sides)."""
    return [step.loss.reshape(()), *(torch.zeros(0) if g is None else g for _, g in step.grads)]


def _wide_step(loaded: Any) -> Any:
    """The eager step of `loaded` in float64 on the host (None where it does not run so); the
    float64 model is freed when this returns."""
    from tuner.kernels import untuned_launches
    from tuner.workload import loss_call, run_step

    try:
        widened = dataclasses.replace(loaded, model=widened_model(loaded.model),
                                      args=tuple(widen(t) for t in loaded.args),
                                      kwargs={k: widen(t) for k, t in loaded.kwargs.items()})
        wide_loss = loss_call(widened)
        with untuned_launches():
            return _on_host(run_step(widened.model, lambda: wide_loss(widened.model), None, loaded.path))
    except Exception:  # noqa: BLE001 - the gate falls back to fixed tolerances (tuner.measure.verify)
        return None


def _on_host(step: Any) -> Any:
    return dataclasses.replace(step, loss=host_copy(step.loss),
                               grads=tuple((n, None if g is None else host_copy(g)) for n, g in step.grads))
