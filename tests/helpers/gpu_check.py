"""bench/gpu_check.py loaded as a module, and what its summary keeps of a search's output."""
from __future__ import annotations

import importlib.util
import sys
from typing import Any

from helpers import REPO

CHECK = REPO / "bench" / "gpu_check.py"


def gpu_check() -> Any:
    """bench/gpu_check.py as a module (it is a script, not part of the package)."""
    if "gpu_check" not in sys.modules:
        spec = importlib.util.spec_from_file_location("gpu_check", CHECK)
        module = importlib.util.module_from_spec(spec)
        sys.modules["gpu_check"] = module       # its dataclasses look their module up while it loads
        spec.loader.exec_module(module)
    return sys.modules["gpu_check"]


def summary_of_search(output: str) -> list[str]:
    """What the GPU check's summary keeps of a search's output (tests/system/test_search.py feeds it a real one)."""
    return gpu_check().summary_rows(output.splitlines())

