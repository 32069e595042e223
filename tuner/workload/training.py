"""Training steps: what `tuner search --mode train` measures and checks.

A model file tuned for training defines `get_loss(model, inputs)` (a scalar tensor; `inputs`
exactly as `get_inputs()` returns them, on the device) and may define `get_optimizer(model)`
(default: `torch.optim.SGD(model.parameters(), lr=1e-3)`: it keeps no state, so a step's time is
the forward and backward that the compile config changes). In train mode the model is only ever
called through `get_loss`, so inputs may hold targets the model does not take.

One step is: `zero_grad`, `get_loss` on the compiled model (forward, loss), `backward`,
`optimizer.step()`. The forward and backward are compiled with the candidate config (AOT
autograd partitions them; `functorch.*` knobs such as `activation_memory_budget` steer that);
the optimizer step runs eagerly, the same for every variant, so it adds the same time to each.

Correctness: from identical initial weights (each variant loads the file afresh under the same
seed), the first step's loss and every parameter's gradient, and those of the later steps
from the same weights, must match an eager step by `tuner.measure.compare_gradients` (against the
same step in float64 where the model runs so, as the output gate does); else WRONG_RESULT naming
the first parameter that differs. This module holds the pieces of a step; `tuner.measure.prepare` puts them together
when `MeasureSpec.mode` is "train", so trials and the confirmation time whole steps.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from tuner.errors import ModelFileError, UsageError

if TYPE_CHECKING:
    import torch

    from tuner.workload.modelfile import LoadedModel

__all__ = ["INFERENCE", "MODES", "TRAIN", "Compare", "StepResult", "check_mode", "check_training", "compare_steps",
           "loss_call", "make_optimizer", "run_step", "timed_step"]

INFERENCE, TRAIN = "inference", "train"
MODES = (INFERENCE, TRAIN)


def check_mode(mode: str, precision: tuple[str, ...]) -> None:
    """UsageError, naming the flag, for a mode that is not one of MODES or for train mode with
    `--precision` (its accuracy check compares forward outputs only)."""
    if mode not in MODES:
        raise UsageError(f"unknown --mode {mode!r}; choose one of: {', '.join(MODES)}")
    if mode == TRAIN and len(precision) > 1:
        raise UsageError("--precision applies to inference only; drop --precision or --mode train")


def loss_call(loaded: "LoadedModel") -> Callable[[Callable], Any]:
    """`model -> get_loss(model, inputs)` for `loaded`: how train mode calls a (compiled) model.
    ModelFileError, naming the fix, when the file defines no callable `get_loss`."""
    get_loss = loaded.get_loss
    if not callable(get_loss):
        what = "does not define" if get_loss is None else "defines a non-callable"
        raise ModelFileError(f"model file {loaded.path} {what} get_loss(), which --mode train needs; add "
                             f"`def get_loss(model, inputs):` returning a scalar loss tensor, e.g. "
                             f"`return model(*inputs).square().mean()`")
    inputs = dict(loaded.kwargs) if loaded.kwargs else tuple(loaded.args)
    return lambda model: get_loss(model, inputs)


def make_optimizer(loaded: "LoadedModel", model: "torch.nn.Module") -> "torch.optim.Optimizer":
    """The file's `get_optimizer(model)`, or SGD(lr=1e-3). ModelFileError when it fails or returns
    something that is not a torch optimizer."""
    import torch

    from tuner.workload.wording import exception_line

    make = loaded.get_optimizer
    if make is None:
        return torch.optim.SGD(model.parameters(), lr=1e-3)
    try:
        optimizer = make(model)
    except Exception as exc:  # noqa: BLE001 - the user's code, reported in one line
        raise ModelFileError(f"get_optimizer() in {loaded.path} raised {exception_line(exc)}; "
                             f"fix get_optimizer(model) so that it runs") from exc
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ModelFileError(f"get_optimizer() in {loaded.path} returned a {type(optimizer).__name__}, not a "
                             f"torch.optim.Optimizer; return e.g. `torch.optim.AdamW(model.parameters())`")
    return optimizer


@dataclass(frozen=True, eq=False)
class StepResult:
    """The loss of one step and each parameter's gradient after its backward (None: no gradient)."""

    loss: "torch.Tensor"
    grads: tuple[tuple[str, "torch.Tensor | None"], ...]


def run_step(model: "torch.nn.Module", call: Callable[[], Any], optimizer: "torch.optim.Optimizer | None",
             path: Any) -> StepResult:
    """One training step with grad enabled: zero_grad, `call()` (the loss), backward, then
    `optimizer.step()` (skipped when None). ModelFileError when the loss is not a scalar tensor."""
    import torch

    with torch.enable_grad():
        model.zero_grad(set_to_none=True)
        loss = call()
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.requires_grad:
            raise ModelFileError(f"get_loss() in {path} returned {_describe(loss)}, not a scalar tensor that "
                                 f"requires grad; return the loss, e.g. `model(*inputs).square().mean()`")
        loss.backward()
        grads = tuple((name, None if p.grad is None else p.grad.detach().clone())
                      for name, p in model.named_parameters())
        if optimizer is not None:
            optimizer.step()
    return StepResult(loss.detach().clone(), grads)


Compare = Callable[[list["torch.Tensor"], list["torch.Tensor"], "list[torch.Tensor] | None"], "str | None"]


def compare_steps(reference: StepResult, got: StepResult, compare: Compare, wide: StepResult | None = None) -> str | None:
    """None when `got`'s loss and every gradient match `reference` by `compare` (trials pass
    `tuner.measure.compare_gradients`), each with its float64 counterpart from `wide` (the same
    step in float64; None: none), else why not, naming the first parameter that differs."""
    widest = dict(wide.grads) if wide is not None else {}
    mismatch = compare([reference.loss.reshape(())], [got.loss.reshape(())],
                       None if wide is None else [wide.loss.reshape(())])
    if mismatch:
        return f"loss: {mismatch.removeprefix('output 0: ')}"
    mine = dict(got.grads)
    for name, ref in reference.grads:
        out = mine.get(name)
        if ref is None or out is None:
            if (ref is None) != (out is None):
                return f"gradient of {name}: {'none' if out is None else 'present'}, eager has " \
                       f"{'one' if out is None else 'none'}"
            continue
        mismatch = compare([ref], [out], None if widest.get(name) is None else [widest[name]])
        if mismatch:
            return f"gradient of {name}: {mismatch.removeprefix('output 0: ')}"
    return None


def check_training(loaded: "LoadedModel") -> StepResult:
    """Before any compile: run two eager steps (no optimizer step) from the same weights and
    return the first. ModelFileError, naming the fix, when get_loss is missing or fails, the loss
    is not a finite scalar, no parameter gets a gradient, or the two steps differ."""
    import torch

    from tuner.workload.wording import exception_line

    call = loss_call(loaded)
    try:
        first = run_step(loaded.model, lambda: call(loaded.model), None, loaded.path)
        second = run_step(loaded.model, lambda: call(loaded.model), None, loaded.path)
    except ModelFileError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's code, reported in one line
        raise ModelFileError(f"a training step of {loaded.path} fails in eager mode: {exception_line(exc)}; "
                             f"fix get_loss(model, inputs) so that its loss.backward() runs") from exc
    if not bool(torch.isfinite(first.loss).all()):
        raise ModelFileError(f"get_loss() in {loaded.path} gives {float(first.loss):g} in eager mode, so compiled "
                             f"steps cannot be checked against it; fix the model or get_inputs()")
    if all(g is None for _, g in first.grads):
        raise ModelFileError(f"no parameter of the model in {loaded.path} gets a gradient from get_loss(); "
                             f"compute the loss from the model's output")
    difference = compare_steps(first, second, _repeat_difference)
    if difference:
        raise ModelFileError(f"two eager training steps of {loaded.path} from the same weights differ "
                             f"({difference}); make the step deterministic: no dropout, seed or remove random ops")
    loaded.model.zero_grad(set_to_none=True)
    return first


def timed_step(model: "torch.nn.Module", call: Callable[[], Any],
               optimizer: "torch.optim.Optimizer") -> Callable[[], Any]:
    """The step `run_step` makes, without its checks and gradient copies: what rounds time."""
    import torch

    def step() -> Any:
        with torch.enable_grad():
            model.zero_grad(set_to_none=True)
            loss = call()
            loss.backward()
            optimizer.step()
        return loss

    return step


def _repeat_difference(first: list["torch.Tensor"], second: list["torch.Tensor"],
                       _wide: "list[torch.Tensor] | None" = None) -> str | None:
    """Two eager steps may differ by a few rounding steps where reductions are nondeterministic;
    dropout or a random op differs by far more (as `tuner.workload.eager_reference` allows)."""
    import torch

    a, b = first[0].detach().double(), second[0].detach().double()
    tol = 16 * torch.finfo(first[0].dtype).eps if first[0].is_floating_point() else 0.0
    differ = int((~torch.isclose(b, a, rtol=tol, atol=tol)).sum())
    return f"{differ} of {a.numel()} values differ" if differ else None


def _describe(value: Any) -> str:
    import torch

    if isinstance(value, torch.Tensor):
        grad = "" if value.requires_grad else ", without grad"
        return f"a tensor of shape {tuple(value.shape)}{grad}"
    return f"a {type(value).__name__}"
