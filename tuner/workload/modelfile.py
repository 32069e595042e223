"""Model files: the user's Python file that says what to tune.

A model file defines `get_model()` returning an `nn.Module` and `get_inputs()` returning
a tuple (positional arguments) or a dict (keyword arguments) of tensors. It may set
`DEVICE = "cuda"` (default "cpu"). For `--mode train` it also defines `get_loss(model, inputs)`
and may define `get_optimizer(model)` (see `tuner.workload.training`). Every problem with it raises
`ModelFileError` with one line that names the fix.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.machinery
import importlib.util
import itertools
import os
import random
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ContextManager

from tuner.errors import ModelFileError
from tuner.workload.device import check_device
from tuner.workload.wording import describe_value, exception_line

if TYPE_CHECKING:
    import torch
    from torch import nn

_HINT = "pass the path of a Python file that defines get_model() and get_inputs()"
_module_ids = itertools.count()


@dataclass(frozen=True, eq=False)
class LoadedModel:
    """A model file's model and inputs, already on `device`.

    Compared by identity (`eq=False`): comparing tensors elementwise is never meant.
    """

    model: "nn.Module"
    args: tuple
    kwargs: dict
    device: str
    path: Path
    get_inputs: Callable[[], Any] | None = None
    get_loss: Any = None           # the file's get_loss(model, inputs), for --mode train (tuner.workload.training)
    get_optimizer: Any = None      # the file's get_optimizer(model), optional in train mode

    def call(self, model: Callable | None = None) -> Any:
        """Run `model` (a compiled wrapper, say) or the file's own model on the inputs."""
        fn = self.model if model is None else model
        return fn(*self.args, **self.kwargs)

    def with_inputs(self, seed: int) -> "LoadedModel":
        """The same model with the file's `get_inputs()` called afresh under `seed` (checked and
        moved to the device like the first ones): more input sets to check a result on."""
        if self.get_inputs is None:
            raise ModelFileError(f"model file {self.path}: get_inputs() was not kept; load it with load_model_file")
        _seed_everything(seed)
        args, kwargs = _check_inputs(self.path, _call(self.path, self.get_inputs, "get_inputs()"))
        return dataclasses.replace(self, args=tuple(t.to(self.device) for t in args),
                                   kwargs={k: t.to(self.device) for k, t in kwargs.items()})


def load_model_file(path: str | Path, *, seed: int = 0, shape: tuple[tuple[str, int], ...] = (),
                    assigned_gpus: tuple[str, ...] | None = None, driver_gpus: tuple[str, ...] | None = None,
                    hold: Callable[[str], ContextManager[Any]] | None = None) -> LoadedModel:
    """Import a model file and build its model and inputs, deterministically for `seed`.

    Seeds `torch` and `random` (and numpy when it is loaded) before the import and again
    before each of `get_model()` and `get_inputs()`, so two processes with the same seed get
    the same weights and inputs. The module is imported under a unique name
    (`_tuner_modelfile_<pid>_<n>`) and stays in `sys.modules` under it: Dynamo imports a
    class's `__module__` to read the globals of a `forward` it inlines. The model and inputs are moved to `DEVICE`. `shape` (a
    `--shapes` bucket) is passed to `get_inputs` as keyword arguments (`tuner.workload.shapes`).
    `DEVICE` gets its one normal form here (`normal_cuda`: `cuda:N`, N an index this process sees;
    `assigned_gpus`, under Ray, the node GPU ids Ray gave the task, and `driver_gpus` the driver's
    CUDA_VISIBLE_DEVICES entries, so that `cuda:N` is the driver's cuda:N). `hold(device)`, when given, is
    held from the device's check on: while the model and inputs are built and moved to it (a
    trial's compile lock, `tuner.measure.node_lock.reference_lock`).
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise ModelFileError(f"model file {path} not found; {_HINT}")
    path = path.resolve()
    _seed_everything(seed)
    module = _import(path)

    for fn_name in ("get_model", "get_inputs"):
        if not callable(getattr(module, fn_name, None)):
            what = "does not define" if not hasattr(module, fn_name) else "defines a non-callable"
            raise ModelFileError(
                f"model file {path} {what} {fn_name}(); add `def {fn_name}():` "
                f"({'returning an nn.Module' if fn_name == 'get_model' else 'returning a tuple or dict of tensors'})"
            )
    device = check_device(path, getattr(module, "DEVICE", "cpu"), assigned_gpus, driver_gpus)
    with contextlib.nullcontext() if hold is None else hold(device):
        return _build(path, module, device, seed, shape)


def _build(path: Path, module: Any, device: str, seed: int, shape: tuple[tuple[str, int], ...]) -> LoadedModel:
    """`load_model_file` once the device is known: the model and inputs, on it."""
    import torch

    _seed_everything(seed)
    model = _call(path, module.get_model, "get_model()")
    if isinstance(model, type) and issubclass(model, torch.nn.Module):
        raise ModelFileError(
            f"get_model() in {path} returned the class {model.__name__}, not an instance; "
            f"return an instance, e.g. `return {model.__name__}().eval()`"
        )
    if not isinstance(model, torch.nn.Module):
        raise ModelFileError(
            f"get_model() in {path} returned {describe_value(model)}, not a torch.nn.Module; "
            f"return the model instance, e.g. `return MyModel().eval()`"
        )
    _seed_everything(seed)
    get_inputs = module.get_inputs
    if shape:   # a --shapes bucket: its sizes are keyword arguments of get_inputs (tuner.workload.shapes)
        from tuner.workload.shapes import check_get_inputs

        check_get_inputs(path, get_inputs, [name for name, _ in shape])
        get_inputs = functools.partial(get_inputs, **dict(shape))
    inputs = _call(path, get_inputs, "get_inputs()")
    args, kwargs = _check_inputs(path, inputs)

    model = model.to(device)
    args = tuple(t.to(device) for t in args)
    kwargs = {k: t.to(device) for k, t in kwargs.items()}
    return LoadedModel(model=model, args=args, kwargs=kwargs, device=device, path=path, get_inputs=get_inputs,
                       get_loss=getattr(module, "get_loss", None), get_optimizer=getattr(module, "get_optimizer", None))


def eager_reference(loaded: LoadedModel) -> Any:
    """Run the model twice in eager mode under `torch.no_grad()` and return the first output.

    Called before any compile, so that a broken model is reported as the user's mistake
    and not as a failed trial. It is also the correctness gate's precondition: each trial
    compares its compiled output with eager, which proves nothing when eager's output holds
    no tensor, holds NaN, or changes between two calls on the same inputs (dropout left on,
    random ops). Each of those raises ModelFileError with one line that names the fix.
    """
    first = _run_eager(loaded)
    tensors = flatten_outputs(first)
    if not tensors:
        raise ModelFileError(
            f"the output of model {loaded.path} holds no tensor (it is {describe_value(first)}), so compiled "
            f"results cannot be checked against eager; return the output tensor(s) from forward()"
        )
    _refuse_nan(loaded.path, tensors)
    reference = [t.detach().clone() for t in tensors]   # a model may return a buffer it updates in place
    difference = _first_difference(reference, flatten_outputs(_run_eager(loaded)))
    if difference:
        raise ModelFileError(
            f"model {loaded.path} gives different outputs on two eager runs with the same inputs ({difference}), "
            f"so every compiled result would look wrong; make forward() deterministic: return the model in "
            f"eval mode (`return MyModel().eval()` turns dropout off) and seed or remove random ops"
        )
    return first


def _run_eager(loaded: LoadedModel) -> Any:
    import torch

    try:
        with torch.no_grad():
            return loaded.call()
    except Exception as exc:  # noqa: BLE001 - becomes one actionable line
        raise ModelFileError(
            f"model {loaded.path} fails in eager mode: {exception_line(exc)}; "
            f"fix the model so that get_model()(*get_inputs()) runs"
        ) from exc


def _refuse_nan(path: Path, tensors: list["torch.Tensor"]) -> None:
    """NaN in eager matches any compiled NaN, so such a reference proves nothing (±Inf is kept:
    a candidate must reproduce it exactly, see tuner.measure.compare_outputs)."""
    import torch

    for i, t in enumerate(tensors):
        if t.is_floating_point() or t.is_complex():
            nan = int(torch.isnan(t.detach()).sum())
            if nan:
                raise ModelFileError(
                    f"the eager output of model {path} holds NaN (output {i}: {nan} of {t.numel()} values), so "
                    f"compiled results cannot be checked against it; fix the model or get_inputs() so that "
                    f"eager gives no NaN"
                )


# Two eager runs may differ by a few rounding steps where reductions are nondeterministic
# (atomics on GPUs); dropout or a random op differs by far more.
_REPEAT_EPS = 16


def _first_difference(first: list["torch.Tensor"], second: list["torch.Tensor"]) -> str | None:
    """None when two eager outputs agree (exactly, or within a few eps for floats), else where not."""
    import torch

    if len(first) != len(second):
        return f"{len(first)} tensors, then {len(second)}"
    for i, (a, b) in enumerate(zip(first, second)):
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"output {i}: {tuple(a.shape)} {a.dtype}, then {tuple(b.shape)} {b.dtype}"
        a, b = a.detach().cpu(), b.detach().cpu()
        if torch.equal(a, b):
            continue
        if a.is_floating_point():
            tol = _REPEAT_EPS * torch.finfo(a.dtype).eps
            differ = int((~torch.isclose(b, a, rtol=tol, atol=tol)).sum())
        else:
            differ = int((a != b).sum())
        if differ:
            return f"output {i}: {differ} of {a.numel()} values differ"
    return None


def flatten_outputs(out: Any) -> list["torch.Tensor"]:
    """The tensors in a (nested) output, in a deterministic order.

    Tuples, lists and namedtuples in order; dicts (and dict-like outputs such as
    Hugging Face's ModelOutput) in insertion order; dataclasses in field order.
    Non-tensor leaves (None, numbers, strings) are skipped.
    """
    import torch

    found: list[torch.Tensor] = []

    def walk(x: Any) -> None:
        if isinstance(x, torch.Tensor):
            found.append(x)
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)
        elif dataclasses.is_dataclass(x) and not isinstance(x, type):
            for f in dataclasses.fields(x):
                walk(getattr(x, f.name))

    walk(out)
    return found


# -- helpers -------------------------------------------------------------------

def _seed_everything(seed: int) -> None:
    import torch

    random.seed(seed)
    torch.manual_seed(seed)  # seeds CUDA too
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(seed % 2**32)


def _import(path: Path) -> Any:
    """Execute the file as a fresh module, kept in sys.modules under its own unique name only
    (Dynamo looks a model class's module up by name; nothing else can collide with it). A file
    that fails to import leaves no module behind; sys.path is restored either way."""
    name = f"_tuner_modelfile_{os.getpid()}_{next(_module_ids)}"
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    # Present while it runs (dataclasses and typing look their module up by name) and after.
    sys.modules[name] = module
    imported = False
    folder = str(path.parent)
    sys.path.insert(0, folder)  # so the file can import helpers that sit beside it
    try:
        loader.exec_module(module)
        imported = True
    except SyntaxError as exc:
        where = f"{exc.filename or path}:{exc.lineno}" if exc.lineno else str(path)
        raise ModelFileError(
            f"{where}: syntax error: {exc.msg}; fix the syntax of the model file"
        ) from exc
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's code, reported in one line
        raise ModelFileError(
            f"model file {path} failed while importing{_where(exc, path)}: {exception_line(exc)}; "
            f"fix the error in the model file"
        ) from exc
    finally:
        if not imported:
            sys.modules.pop(name, None)
        try:
            sys.path.remove(folder)
        except ValueError:
            pass
    return module


def _call(path: Path, fn: Callable, what: str) -> Any:
    try:
        return fn()
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's code, reported in one line
        raise ModelFileError(
            f"{what} in {path} raised{_where(exc, path)}: {exception_line(exc)}; fix {what} so that it runs"
        ) from exc


def _check_inputs(path: Path, inputs: Any) -> tuple[tuple, dict]:
    import torch

    fix = "return a tuple of tensors, e.g. `return (torch.randn(64, 256),)`, or a dict of keyword tensors"
    if isinstance(inputs, torch.Tensor):
        raise ModelFileError(f"get_inputs() in {path} returned a single Tensor; {fix.replace('return a tuple', 'wrap it in a tuple')}")
    if isinstance(inputs, dict):
        for k, v in inputs.items():
            if not isinstance(k, str):
                raise ModelFileError(f"get_inputs() in {path} returned a dict with key {k!r}; use argument names (str) as keys")
            if not isinstance(v, torch.Tensor):
                raise ModelFileError(f"get_inputs() in {path}: element {k!r} is {describe_value(v)}, not a tensor; {fix}")
        return (), dict(inputs)
    if isinstance(inputs, (tuple, list)):
        for i, v in enumerate(inputs):
            if not isinstance(v, torch.Tensor):
                raise ModelFileError(f"get_inputs() in {path}: element {i} is {describe_value(v)}, not a tensor; {fix}")
        return tuple(inputs), {}
    raise ModelFileError(f"get_inputs() in {path} returned {describe_value(inputs)}; {fix}")


def _where(exc: BaseException, path: Path) -> str:
    """' at file:line' for the deepest frame of the model file in the traceback, if any."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename) == path]
    return f" at {path}:{frames[-1].lineno}" if frames else ""
