"""The CUDA dry run's device matrix: each spelling of DEVICE through each entry point that loads
a model file, in one process of the stand-in machine (tests/helpers/cuda_dry_run.py).

It also holds what the dry run's tests share: the model file (`write_model`), the environment of
its processes (`dry_run_env`) and what they did (`device_calls`, `gpu_locks`).

The matrix runs as `python -m helpers.dry_run_matrix OUT.json FOLDER PROCESS` from tests/ (tests/system/
test_cuda_dry_run.py does), PROCESS naming the cells it runs (`CELLS`): "node", a process that sees
both GPUs; "visible1", one started with CUDA_VISIBLE_DEVICES=1, where "ray" cells are a Ray task given
GPU 1 (the spec's `gpu_ids` ("1",)) by a driver that sees both GPUs, "ray driver1" cells the same task
of a driver started with CUDA_VISIBLE_DEVICES=1 (`driver_gpus` ("1",)), and "user" cells a user's
process (no Ray). Each cell is
"ok GPU n" (n: the node's GPU the entry point placed tensors on, selected, waited for or timed on;
not the properties it read, as Dynamo reads every GPU's) or the entry point's one-line error.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

SPELLINGS = {"cuda": '"cuda"', "cuda:0": '"cuda:0"', "cuda:1": '"cuda:1"', "cuda:2": '"cuda:2"',
             "torch.device": 'torch.device("cuda", 1)'}
ENTRY_POINTS = ("trial", "confirmation", "claim run", "compare", "kernel benchmarks")
TEMPLATE = Path(__file__).resolve().parents[1] / "models" / "dry_run_cuda.py"


def dry_run_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A CLI environment whose device calls are logged to tmp_path/log, whose lock files are made under
    tmp_path/tmp (so a test can say which GPU's lock was taken), and whose Inductor cache is the usual one."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    from helpers import cli_env

    (tmp_path / "tmp").mkdir(exist_ok=True)
    return cli_env(DRY_RUN_LOG=str(tmp_path / "log"), TMPDIR=str(tmp_path / "tmp"),
                   TORCHINDUCTOR_CACHE_DIR=os.environ.get("TORCHINDUCTOR_CACHE_DIR", default_cache_dir()),
                   TUNER_DB=f"sqlite:///{tmp_path / 'tuner.db'}", **extra)


def device_calls(tmp_path: Path) -> dict[int, set[tuple[str, int]]]:
    """Per process (pid), the device calls it made: (call, the node's GPU)."""
    by_pid: dict[int, set[tuple[str, int]]] = defaultdict(set)
    for line in (tmp_path / "log").read_text().splitlines():
        pid, call, gpu = line.split()
        by_pid[int(pid)].add((call, int(gpu)))
    return by_pid


def gpu_locks(tmp_path: Path) -> set[str]:
    """The GPU lock files this run's processes made."""
    return {p.name for p in (tmp_path / "tmp" / f"tuner-locks-{os.getuid()}").glob("gpu-*.lock")}


def run_python(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    """`python ARGS` in `cwd` with `env`, its output captured. Past `timeout` its whole process group
    is killed (a local Ray cluster it started among it), then subprocess.TimeoutExpired is raised."""
    with subprocess.Popen([sys.executable, *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True) as process:
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def model_name(spelling: str) -> str:
    """The file name `write_model` gives the model file of `spelling`."""
    return f"m_{spelling.replace(':', '_').replace('.', '_')}.py"


def write_model(folder: Path, name: str, device_source: str) -> Path:
    """A copy of tests/models/dry_run_cuda.py in `folder` whose DEVICE line is `device_source`."""
    text = TEMPLATE.read_text()
    for line, new in (('TESTS = "/tests-folder"', f"TESTS = {str(TEMPLATE.parents[1])!r}"),
                      ('DEVICE = "cuda"', f"DEVICE = {device_source}")):
        if line not in text:
            raise ValueError(f"{TEMPLATE} has no line {line!r}")
        text = text.replace(line, new)
    path = folder / model_name(name)
    path.write_text(text)
    return path


def _entry(name: str, path: Path, gpu_ids: tuple[str, ...] | None,
           driver_gpus: tuple[str, ...] | None) -> Callable[[], str | None]:
    """The entry point `name` on `path`: a function returning None when it ran, else its one-line error."""
    from tuner.trial import (
        DEFAULT,
        EAGER,
        ConfirmRequest,
        MeasureSpec,
        Status,
        TrialRequest,
    )

    spec = MeasureSpec(str(path), repeat=2, min_rounds=2, budget_s=1.0, warmup=1, gpu_ids=gpu_ids,
                       driver_gpus=driver_gpus)

    def trial() -> str | None:
        from tuner.measure import run_trial

        got = run_trial(TrialRequest(spec, params=()))
        return None if got.status is Status.OK else f"{got.status.value}: {got.error}"

    def confirmation(stage: str) -> Callable[[], str | None]:
        def run() -> str | None:
            from tuner.measure import run_confirmation

            got = run_confirmation(ConfirmRequest(spec, variants=((DEFAULT, ()), (EAGER, None)), rounds=2,
                                                  samples_per_round=1, stage=stage))
            bad = [v for v in got.variants if v.status is not Status.OK]
            return got.error or (f"{bad[0].status.value}: {bad[0].error}" if bad else None)
        return run

    def compare() -> str | None:
        from tuner.report.applied import compare_applied

        problems = [p.problem for p in compare_applied(str(path), rounds=12).paths if p.problem]
        return problems[0] if problems else None

    def kernel_benchmarks() -> str | None:
        # A tuner.autotune kernel's device is its first tensor's (always "cuda:N" on a GPU), and its
        # platform key the one `current_platform` gives that device: the model file's spelling is
        # what a user's tensor would carry.
        from tuner.platform import current_platform
        from tuner.workload import load_model_file

        loaded = load_model_file(path, assigned_gpus=gpu_ids, driver_gpus=driver_gpus)
        current_platform(loaded.device)
        return None

    return {"trial": trial, "confirmation": confirmation("selection"), "claim run": confirmation("claim"),
            "compare": compare, "kernel benchmarks": kernel_benchmarks}[name]


def cell(name: str, path: Path, gpu_ids: tuple[str, ...] | None, driver_gpus: tuple[str, ...] | None) -> str:
    import torch

    from helpers import cuda_dry_run

    torch._dynamo.reset()     # each entry point runs in a fresh process of its own in a search
    calls = cuda_dry_run.calls()
    start = len(calls)
    try:
        problem = _entry(name, path, gpu_ids, driver_gpus)()
    except Exception as exc:  # noqa: BLE001 - an entry point that raises is a cell too
        problem = f"raises {type(exc).__name__}: {exc}"
    if problem is not None:
        return "error: " + problem.strip().splitlines()[0]
    gpus = sorted({gpu for call, gpu in calls[start:] if call != "properties"})   # Dynamo reads every GPU's
    return "ok GPU " + ",".join(map(str, gpus))


# (context, entry points, spellings): "node" sees both GPUs; "ray" is a Ray task given GPU 1 by a driver
# that sees both, "ray driver1" one of a driver started with CUDA_VISIBLE_DEVICES=1, "user" a process
# started with it (all run with it set; a user runs compare, Ray never does).
CELLS = {"node": (("node", ENTRY_POINTS, tuple(SPELLINGS)),),
         "visible1": (("ray", ("trial", "confirmation", "claim run", "kernel benchmarks"),
                       ("cuda", "cuda:0", "cuda:1")),
                      ("ray driver1", ("trial", "kernel benchmarks"), ("cuda", "cuda:0", "cuda:1")),
                      ("user", ("trial", "compare"), ("cuda", "cuda:0", "cuda:1")))}
GPU_IDS = {"ray": (("1",), None), "ray driver1": (("1",), ("1",))}   # context -> (gpu_ids, driver_gpus)


def main(out: str, folder: str, process: str) -> None:
    """Every cell of `process` ("node": CUDA_VISIBLE_DEVICES unset; "visible1": set to 1) into `out` (JSON)."""
    from helpers.cuda_dry_run import install

    install()
    got: dict[str, str] = {}
    for context, entries, spellings in CELLS[process]:
        gpu_ids, driver_gpus = GPU_IDS.get(context, (None, None))
        for spelling in spellings:
            path = write_model(Path(folder), spelling, SPELLINGS[spelling])
            for entry in entries:
                got[f"{context} | {entry} | {spelling}"] = cell(entry, path, gpu_ids, driver_gpus)
    Path(out).write_text(json.dumps(got, indent=1))


if __name__ == "__main__":
    main(*sys.argv[1:4])
