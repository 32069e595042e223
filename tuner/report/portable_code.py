"""The Python snippet `tuner best --emit python` prints for one `tuner.report.portable.Portable`
(which imports this module, never the other way).

The snippet defines `tuned_backend`, the stored config as a Dynamo backend of its own (Inductor's
`compile_fx` with the config's patches), `tuned_compile(model)` and `first_call()`. A backend of
its own, not `torch.compile(model, options=...)`: Dynamo caches a compiled frame under its backend,
and a config set around the first call is not part of that cache key, so in a script that compiled
a copy of the model with defaults first (the way one checks a speedup) a plain `torch.compile`
took the default's cached graph and ran at its speed. `first_call()` sets what must be in place
when Dynamo traces (freezing, under `torch.no_grad()`) and `torch._functorch.config` knobs.

Runtime knobs: what a running process can still set (glibc's malloc parameters) is set by
`set_runtime()`, which `tuned_compile` calls; what only a process started with it gets (an
allocator preloaded, OpenMP's environment) is written as the command line to start the program with
(`RUNTIME_ENV`, and `tuner run` in a comment). Every value is a plain JSON scalar written with
`repr`, every text a comment of one line (`comment`).
"""
from __future__ import annotations

from typing import Any

__all__ = ["comment", "literal", "snippet"]


def comment(text: str) -> str:
    """`text` as one comment line: every character Python could end a line at, or that is not
    printable (line breaks, other controls, separators, lone surrogates), written as its escape, so
    no text (a model path holding a newline, a row) can end the comment and become code."""
    return "# " + "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def literal(items: tuple[tuple[Any, Any], ...]) -> str:
    """A dict literal of plain JSON scalars (anything else was refused before)."""
    return "{" + ", ".join(f"{k!r}: {v!r}" for k, v in items) + "}"


def snippet(p: Any) -> str:
    """The whole snippet for `p`, a `tuner.report.portable.Portable` (module docstring)."""
    lines = [comment(f"tuner's stored verdict for {p.model}, applied with torch alone (no tuner, no database)."),
             comment(f"Verdict: {p.summary}."), comment(f"Platform: {p.platform}.")]
    lines += [comment(f"Measured: {c}") for c in p.conditions]
    lines += [comment(f"Not expressed here: {n}") for n in p.not_expressed]
    if p.runtime_env:
        shown = " ".join(f"{k}={v}" for k, v in p.runtime_env)
        lines += [comment(f"Runtime knobs ({', '.join(f'{k}={v}' for k, v in p.runtime)}): start the program "
                          f"with {shown} python PROGRAM.py"),
                  comment(f"(tuner run --model {p.model} PROGRAM.py does it); RUNTIME_ENV holds them.")]
    lines += ["import contextlib", "", "import torch", ""]
    if p.runtime_env:
        lines.append(f"RUNTIME_ENV = {literal(p.runtime_env)}")
    if p.compiled and p.patches:
        lines += [f"PATCHES = {literal(p.patches)}", "", "",
                  "def tuned_backend(gm, example_inputs):",
                  '    """The stored config as a backend of its own: Dynamo never serves this model a graph '
                  'compiled\n    under another config in this process (a default compile of a copy, say)."""',
                  "    from torch._inductor.compile_fx import compile_fx",
                  "", "    return compile_fx(gm, example_inputs, config_patches=PATCHES)"]
    if p.runtime_set:
        lines += ["", "", "def set_runtime():",
                  '    """The runtime knobs a running process can still set: glibc\'s malloc parameters."""',
                  "    import ctypes", "", '    libc = ctypes.CDLL("libc.so.6")']
        lines += [f"    libc.mallopt({param}, {value})" for param, value in p.runtime_set]
    lines += ["", "", "def tuned_compile(model):",
              '    """The model compiled as tuner measured it (make its first call inside first_call())."""']
    if p.runtime_set:
        lines.append("    set_runtime()")
    if not p.compiled:
        lines.append("    return model      # the verdict is eager: uncompiled ran faster than every compile")
    else:
        lines.append("    return torch.compile(model, backend=tuned_backend)" if p.patches else
                     "    return torch.compile(model)")
    lines += _first_call(p)
    return "\n".join(lines) + "\n"


def _first_call(p: Any) -> list[str]:
    lines = ["", "", "@contextlib.contextmanager", "def first_call():",
             '    """Around the compiled model\'s first call, which traces and compiles: what must be set '
             'then."""',
             "    with contextlib.ExitStack() as stack:"]
    if p.no_grad:
        lines.append("        stack.enter_context(torch.no_grad())     # freezing is for inference only")
    if p.inductor_first:
        lines.append(f"        stack.enter_context(torch._inductor.config.patch({literal(p.inductor_first)}))")
    if p.functorch_first:
        lines += ["        import torch._functorch.config",
                  f"        stack.enter_context(torch._functorch.config.patch({literal(p.functorch_first)}))"]
    lines += ["        yield", "", "", "# compiled = tuned_compile(model)", "# with first_call():",
              "#     compiled(*inputs)    # compiles; later calls need nothing more"]
    if p.train:
        lines.append("# In training the first backward compiles too: run it inside first_call() as well.")
    return lines
