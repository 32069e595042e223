"""The one implementation that turns stored knob values into a compiled model.

Used by trial processes, by confirmation, and by the compile-time backend:
`compile_config(params)` -> `CompileConfig` -> `make_backend(config)` (a Dynamo backend
that calls Inductor's `compile_fx` with the config as per-graph patches), plus
`trace_context(config)` around the call that makes Dynamo trace (freezing's grad check).
`compile_model` puts the three together.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Mapping

from tuner.errors import SpaceError, UsageError
from tuner.inductor.freezing import FrozenGraph, static_inputs
from tuner.inductor.precision import compile_with_precision
from tuner.inductor.triton_choices import attributing
from tuner.precision import FP32
from tuner.workload import fingerprint_graph


@dataclass(frozen=True)
class CompileConfig:
    """How to compile one graph.

    `inductor` are `compile_fx(config_patches=...)` entries (mode presets already
    expanded, then knobs layered on top); `functorch` patch `torch._functorch.config`;
    `freezing` is decided at trace time (Dynamo's prepare_freezing) and only for inference.
    `precision` is a `tuner.precision` mode, applied per graph by `make_backend`.
    """

    inductor: tuple[tuple[str, Any], ...] = ()
    functorch: tuple[tuple[str, Any], ...] = ()
    freezing: bool = False
    mode: str | None = None
    precision: str = FP32

    @property
    def is_default(self) -> bool:
        return not (self.inductor or self.functorch or self.freezing) and self.precision == FP32


def compile_config(params: Mapping[str, Any]) -> CompileConfig:
    """Turn knob params (a Candidate's, a stored config's, or a full Optuna dict) into a CompileConfig.

    Checks the allow-list (`validate_params`) and the installed torch: a knob this torch
    lacks raises SpaceError naming it. The mode preset is expanded with
    `torch._inductor.list_mode_options` first and the other Inductor knobs are layered on
    top. A knob at Inductor's default is not patched, so it never overrides the mode:
    a Candidate and the full param dict it came from give the same CompileConfig.
    `functorch.<name>` knobs go to `functorch`; `freezing` to `freezing`; `precision` to `precision`.
    """
    from tuner.search_spaces import (FUNCTORCH_PREFIX, SPECIAL, installed_default, installed_has, mode_options,
                                     same_value, torch_version, validate_params)

    validate_params(params)
    missing = sorted(name for name in params if not installed_has(name))
    if missing:
        raise SpaceError(f"knob(s) {', '.join(missing)} do not exist in torch {torch_version()}; "
                         "re-run the search on this torch or drop them from the stored config")
    mode = params.get("mode", "default")
    try:
        inductor = dict(mode_options(mode))
    except ValueError as exc:
        raise SpaceError(f"mode {mode!r} is not known to torch {torch_version()} ({exc}); "
                         "re-run the search on this torch") from None
    functorch: dict[str, Any] = {}
    for name in sorted(params):
        value = params[name]
        if name in SPECIAL or same_value(installed_default(name), value):
            continue
        if name.startswith(FUNCTORCH_PREFIX):
            functorch[name.removeprefix(FUNCTORCH_PREFIX)] = value
        else:
            inductor[name] = value
    return CompileConfig(inductor=tuple(sorted(inductor.items())), functorch=tuple(sorted(functorch.items())),
                         freezing=bool(params.get("freezing", False)),
                         mode=None if mode == "default" else mode, precision=params.get("precision", FP32))


def inductor_patches(config: CompileConfig, *, user_patches: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The `config_patches` for compile_fx: the user's patches first, the stored config on top."""
    merged = dict(user_patches or {})
    merged.update(config.inductor)
    if config.freezing:
        merged["freezing"] = True
    return merged


def make_backend(config: CompileConfig, *, user_patches: Mapping[str, Any] | None = None,
                 thaw: "Callable[[Any, Any], Callable] | None" = None) -> Callable[..., Any]:
    """A Dynamo backend `(gm, example_inputs) -> compiled callable` that compiles with `config`.

    Each graph goes through `torch._inductor.compile_fx.compile_fx(gm, example_inputs,
    config_patches=...)`, with `user_patches` (and any `options=` / `mode=` torch.compile
    passes to the backend) underneath the stored config, and `torch._functorch.config`
    patched around it when the config has functorch knobs. The global Inductor config is
    left untouched. A `precision` other than fp32 is applied to each graph by
    `tuner.inductor.precision.compile_with_precision`.

    With `config.freezing` and grad disabled, a graph that takes a module's parameters or
    buffers as inputs is frozen here, in one trace (`tuner.inductor.freezing`): the result is a
    `FrozenGraph`, which re-freezes when the weights change and runs the thawed compile with grad
    enabled. `thaw(gm, example_inputs)` compiles that thawed graph; by default the same config
    without freezing. A graph Dynamo traced under `prepare_freezing` (weights already attributes)
    is compiled with the freezing patch as it is.
    """
    functorch = dict(config.functorch)

    def tuner_compile(gm: Any, example_inputs: Any, *, options: Mapping[str, Any] | None = None,
                      mode: str | None = None, **_: Any) -> Any:
        import torch
        import torch._functorch.config as functorch_config
        from torch._inductor import compile_fx as inductor_compile_fx

        from tuner.search_spaces import mode_options

        user: dict[str, Any] = dict(mode_options(mode)) if mode else {}
        user.update(options or {})
        user.update(user_patches or {})
        patches = inductor_patches(config, user_patches=user)

        def compile_graph(graph: Any, inputs: Any) -> Any:
            def inductor(g: Any) -> Any:
                with functorch_config.patch(functorch) if functorch else contextlib.nullcontext():
                    return inductor_compile_fx.compile_fx(g, inputs, config_patches=patches)

            # Inside a trial's harvest (tuner.inductor.triton_choices), the kernels this compile builds are this graph's.
            with attributing(lambda: fingerprint_graph(gm, list(example_inputs)).key):
                return compile_with_precision(config.precision, graph, inputs, inductor)

        positions = static_inputs(gm) if config.freezing and not torch.is_grad_enabled() else []
        if not positions:
            return compile_graph(gm, example_inputs)
        thawed = thaw or (lambda g, inputs: make_backend(replace(config, freezing=False), user_patches=user_patches)(
            g, inputs, options=options, mode=mode))
        inputs = list(example_inputs)
        return FrozenGraph(gm, inputs, positions, compile_graph, lambda: thawed(gm, inputs))

    tuner_compile.config = config  # type: ignore[attr-defined]
    return tuner_compile


@contextlib.contextmanager
def trace_context(config: CompileConfig) -> Iterator[None]:
    """Wrap the call that makes Dynamo trace (the compiled model's first call).

    Freezing is for inference only: with `config.freezing` and grad enabled this raises
    UsageError. Nothing else: `make_backend` freezes in the backend itself
    (`tuner.inductor.freezing`), in the trace Dynamo makes anyway, so a trial measures the
    freezing that `backend="tuner"` applies. Without freezing it does nothing.
    """
    if not config.freezing:
        yield
        return
    import torch

    if torch.is_grad_enabled():
        raise UsageError("freezing is for inference only; call the model under torch.no_grad() "
                         "or torch.inference_mode(), or use a config without freezing")
    yield


def compile_model(model: Any, config: CompileConfig, *, dynamic: bool | None = None) -> Any:
    """`torch.compile(model, backend=make_backend(config), dynamic=dynamic)` for a module, its first
    call checked by `trace_context(config)`. Compilation happens at that first call, not here.

    The result is torch's own `OptimizedModule`, so a model file's functions (`get_loss`) see the
    module they wrote, exactly as through `torch.compile`: attribute reads (`model.config`,
    submodules), methods (`train()`, `eval()`, `parameters()`, `state_dict()`), writes, `isinstance`.
    With freezing, a one-shot forward pre-hook on it makes the check, then removes itself."""
    import torch

    compiled = torch.compile(model, backend=make_backend(config), dynamic=dynamic)
    if config.freezing:
        def check(module: Any, args: Any) -> None:
            with trace_context(config):     # raises, before any trace, when grad is enabled
                pass
            handle.remove()

        handle = compiled.register_forward_pre_hook(check)
    return compiled
