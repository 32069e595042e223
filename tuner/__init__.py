"""tuner: autotuner for torch.compile."""
from __future__ import annotations

from typing import Any

from tuner.version import __version__

__all__ = ["__version__", "autotune", "compile", "install"]


def __getattr__(name: str) -> Any:
    # `tuner.compile` and `tuner.install` load torch; `import tuner` (and the CLI) should not.
    if name in ("compile", "install"):
        from tuner.lookup import api

        return getattr(api, name)
    if name == "autotune":   # Triton loads only when a kernel is decorated
        from tuner.kernels import autotune

        return autotune
    raise AttributeError(f"module 'tuner' has no attribute {name!r}")
