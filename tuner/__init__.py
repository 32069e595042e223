"""tuner: autotuner for torch.compile."""
from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["__version__", "compile", "install"]


def __getattr__(name: str) -> Any:
    # `tuner.compile` and `tuner.install` load torch; `import tuner` (and the CLI) should not.
    if name in ("compile", "install"):
        from tuner import api

        return getattr(api, name)
    raise AttributeError(f"module 'tuner' has no attribute {name!r}")
