"""tuner: autotuner for torch.compile."""
from __future__ import annotations

from pathlib import Path
from typing import Any

__version__ = "0.1.0"
__all__ = ["__version__", "compile", "install"]

# Installed (wheel or editable), `tuner.storage`, `tuner.workers` and `tuner.search_spaces`
# resolve through setuptools' package-dir mapping. Imported straight from a source checkout
# (a process whose sys.path starts at the repository root: `python -m tuner` there, or a Ray
# worker started from there) the subpackages are sibling folders of this one, so look there too.
_checkout = Path(__file__).resolve().parent.parent
if not (Path(__file__).resolve().parent / "workers").is_dir() and (_checkout / "workers" / "__init__.py").is_file():
    __path__.append(str(_checkout))  # type: ignore[name-defined]  # noqa: F821


def __getattr__(name: str) -> Any:
    # `tuner.compile` and `tuner.install` load torch; `import tuner` (and the CLI) should not.
    if name in ("compile", "install"):
        from tuner import api

        return getattr(api, name)
    raise AttributeError(f"module 'tuner' has no attribute {name!r}")
