"""What the sections of bench/gpu_check.py share: the `Check` each one is handed, running a
command under a deadline, loading a module of bench/gpu/ (or of bench/, for the code the GPU check
shares with the CPU benchmarks), and section 0 (the header).

A section is a function `(check) -> list[str]` (its key figures) in a module of bench/gpu/, run in a
process of its own by `gpu_check.py`. It raises on a failed check, and `NotTested` when the
machine cannot run it (a second GPU it lacks): that is reported as "not tested", never "ok".
"""
from __future__ import annotations

import importlib.util
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent      # bench/gpu/
BENCH = HERE.parent                         # bench/: side_by_side.py, shared with the CPU benchmarks


class NotTested(Exception):
    """The machine cannot run this section (e.g. one GPU where it needs two): the message says why."""


@dataclass
class Check:
    """What a section is handed: the run folder, --smoke, its deadline (its cap) and the environment
    of the processes it starts."""

    run_dir: Path
    smoke: bool
    deadline: float
    env: dict[str, str] = field(default_factory=dict)

    @property
    def device(self) -> str:
        return "cpu" if self.smoke else "cuda"

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def python(self, *args: str) -> list[str]:
        return [sys.executable, "-P", *args]

    def sync(self) -> None:
        if not self.smoke:
            import torch

            torch.cuda.synchronize()

    def bench_ms(self, fn: Callable[[], Any]) -> float:
        """Median milliseconds per call: triton.testing.do_bench on the GPU, wall clock in --smoke."""
        if not self.smoke:
            from triton.testing import do_bench

            return float(do_bench(fn, return_mode="median"))
        fn()
        samples = []
        for _ in range(7):
            start = time.perf_counter()
            fn()
            samples.append(1000.0 * (time.perf_counter() - start))
        return statistics.median(samples)

    def model(self, name: str) -> Path:
        return bench_module("gpu_models").write_model(self.run_dir, name, smoke=self.smoke)


def bench_module(name: str) -> Any:
    """A module of bench/gpu/, else of bench/, by path (-P keeps both off sys.path)."""
    if name not in _modules:
        path = HERE / f"{name}.py" if (HERE / f"{name}.py").exists() else BENCH / f"{name}.py"
        spec = importlib.util.spec_from_file_location(Path(name).name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules.setdefault(Path(name).name, module)     # its dataclasses look their module up while it loads
        spec.loader.exec_module(module)
        _modules[name] = module
    return _modules[name]


_modules: dict[str, Any] = {}


def stream(cmd: list[str], *, cwd: Path, timeout_s: float, env: dict[str, str],
           prefix: str = "  | ") -> tuple[int | None, list[str]]:
    """Run `cmd` in `cwd`, printing its output as it comes; (exit status, or None when it passed
    `timeout_s` and its process group was killed; its lines)."""
    print(f"  $ {' '.join(Path(cmd[0]).name if i == 0 else c for i, c in enumerate(cmd))}  (up to {timeout_s:.0f} s)",
          flush=True)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            cwd=cwd, start_new_session=True)
    lines: list[str] = []

    def pump() -> None:
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            print(prefix + lines[-1], flush=True)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        code: int | None = proc.wait(timeout=max(1.0, timeout_s))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)     # its children die with it (own session; PR_SET_PDEATHSIG)
        proc.wait()
        code = None
    reader.join(timeout=10)
    return code, lines


def section_header(check: Check) -> list[str]:
    """Versions, the GPU and the platform key; fails when the source folder shadows the wheel."""
    from importlib import metadata

    import torch

    import tuner
    import tuner.storage  # noqa: F401 - fails here if the source folder shadows the installed wheel
    from tuner.platform import current_platform

    print(f"python {sys.version.split()[0]}; torch {torch.__version__} (CUDA {torch.version.cuda}); "
          f"tuner {tuner.__version__} from {Path(tuner.__file__).parent}")
    versions = []
    for dist in ("triton", "transformers", "optuna", "sqlalchemy", "alembic", "packaging"):
        try:
            versions.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{dist} MISSING")
    print("  " + "; ".join(versions))
    gpus = 0 if check.smoke else torch.cuda.device_count()
    if gpus:
        print(f"GPU: {torch.cuda.get_device_name(0)} x {gpus}")
    platform = current_platform(check.device)
    print(f"platform: {platform.describe()}\nplatform key: {platform.key}")
    return [f"torch {torch.__version__}, {gpus} GPU(s), {platform.key}"]
