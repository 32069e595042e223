"""Failing trials for real, from the test side: model files whose compiled call crashes, hangs,
raises or goes wrong (tests/models/faulty_mlp.py). The product has no fault hook."""
from __future__ import annotations

from pathlib import Path

from helpers import MODELS

FAULTY = MODELS / "faulty_mlp.py"
FAULTS = ("abort", "exit", "hang", "raise", "nan")


def faulty_model(folder: Path, fault: str) -> str:
    """The path of a copy of faulty_mlp.py in `folder` whose compiled call always has `fault`."""
    if fault not in FAULTS:
        raise ValueError(f"unknown fault {fault!r}; one of {FAULTS}")
    path = folder / f"faulty_{fault}.py"
    source = FAULTY.read_text()
    assert "\nFAULT = None\n" in source
    path.write_text(source.replace("\nFAULT = None\n", f"\nFAULT = {fault!r}\n", 1))
    return str(path)


def fault_plan(counter: Path, faults: list[str | None]) -> str:
    """FAULTY_MLP_PLAN for faulty_mlp.py itself: the n-th trial process that loads it gets faults[n]."""
    return f"{counter}:{','.join(f or '-' for f in faults)}"
