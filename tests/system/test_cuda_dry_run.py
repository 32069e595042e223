"""The CUDA dry run on CPU (issue 33): a model file with DEVICE = "cuda" on a stand-in machine of two
GPUs (tests/helpers/cuda_dry_run.py; its tensors stay on CPU), through `tuner search` with the local
executor and `tuner compare` (whose paths include `tuner.compile`), each in processes of their own;
and the matrix of DEVICE spellings on each entry point that loads a model file
(tests/helpers/dry_run_matrix.py).
The Ray executor's run is tests/workers/test_ray_gpus.py. What the product does on the stand-in is
what it would do on two GPUs: torch.cuda's own functions and argument checks run, and the product's
`TorchCuda` is not replaced."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import run_cli
from helpers.dry_run_matrix import (
    device_calls,
    dry_run_env,
    gpu_locks,
    run_python,
    write_model,
)

pytestmark = pytest.mark.slow
TESTS = Path(__file__).resolve().parents[1]


# What a timed process does on its GPU: places the model there, selects it, waits for it, times with
# events after the flush buffer is made there, reads the GPU's properties (platform, lock name).
MEASURED = {"to", "set_device", "synchronize", "record", "empty", "properties"}


def test_a_cuda_search_and_compare_run_end_to_end_on_the_stand_in(tmp_path: Path) -> None:
    model = write_model(tmp_path, "cuda", '"cuda"')
    env = dry_run_env(tmp_path)
    search = run_cli("search", str(model), "--trials", "1", "--executor", "local", "--repeat", "2",
                     "--rounds", "12", cwd=tmp_path, env=env)
    assert search.returncode == 0, search.stderr
    assert "on Dry Run GPU (cuda)" in search.stderr and "1/1 trials, 0 failed" in search.stderr, search.stderr
    searched = device_calls(tmp_path)
    timed = [pid for pid, calls in searched.items() if ("record", 0) in calls]
    assert len(timed) >= 2, searched             # the trial process and the confirmation's
    for pid in timed:
        assert {call for call, _ in searched[pid]} >= MEASURED, searched[pid]
    assert any({("reset_peak", 0), ("memory_stats", 0)} <= calls for calls in searched.values())  # its own peak
    used = {gpu for calls in searched.values() for call, gpu in calls if call != "properties"}   # Dynamo reads all
    assert used == {0}                                                        # "cuda": the first GPU, only
    assert gpu_locks(tmp_path) >= {"gpu-dry-run-0.lock"} and "gpu-dry-run-1.lock" not in gpu_locks(tmp_path)

    # The same model on the second GPU: the same workload and platform (two GPUs of one kind), so compare
    # finds the stored config, and must select, wait for, compile and time on GPU 1, not the current GPU 0.
    # Its paths include tuner.compile and backend="tuner", in its own process, as a user's script.
    on_second = write_model(tmp_path, "cuda:1", '"cuda:1"')
    compare = run_cli("compare", str(on_second), "--rounds", "12", "--processes", "0", cwd=tmp_path, env=env)
    assert compare.returncode == 0, compare.stderr
    assert "tuner.compile" in compare.stdout, compare.stdout
    compared = {pid: calls for pid, calls in device_calls(tmp_path).items() if pid not in searched}
    assert len(compared) == 1, compared
    calls = next(iter(compared.values()))
    assert {call for call, _ in calls} >= MEASURED, calls
    assert {gpu for call, gpu in calls if call != "properties"} == {1}, calls
    assert "gpu-dry-run-1.lock" in gpu_locks(tmp_path)          # its compile and measure locks: GPU 1's


def error(message: str, entry: str) -> str:
    """A cell's one-line error: a trial records it (runtime_error), every other entry point raises it."""
    return f"error: {'runtime_error: ' if entry == 'trial' else 'raises '}ModelFileError: {message}"


ON_THE_NODE = {   # a process that sees both GPUs (the local executor, compare, a user's script)
    "cuda": "ok GPU 0", "cuda:0": "ok GPU 0", "cuda:1": "ok GPU 1",
    "cuda:2": "DEVICE='cuda:2' but this machine has 2 CUDA device(s); set DEVICE='cuda' or an index below 2 in {path}",
    "torch.device": "DEVICE in {path} is device(type='cuda', index=1) (device); set DEVICE to a string such as 'cpu' "
                    "or 'cuda'",
}
IN_A_RAY_TASK = {   # given GPU 1 of the node by a driver that sees both: "cuda:N" is the driver's cuda:N, GPU N
    "cuda": "ok GPU 1", "cuda:1": "ok GPU 1",
    "cuda:0": "DEVICE='cuda:0' in {path} names the driver's cuda:0, GPU 0 of the node, but Ray gave this trial GPU 1; "
              "set DEVICE='cuda' to measure on the GPU Ray assigns each trial (docs/ray.md, \"GPU platforms\")",
}
IN_A_RAY_TASK_OF_A_DRIVER_SEEING_1 = {   # the same, its driver started with CUDA_VISIBLE_DEVICES=1: cuda:0 is GPU 1
    "cuda": "ok GPU 1", "cuda:0": "ok GPU 1",
    "cuda:1": "DEVICE='cuda:1' in {path} names the driver's cuda:1, but the driver sees 1 GPU(s) (its "
              "CUDA_VISIBLE_DEVICES=1); set DEVICE='cuda' to measure on the GPU Ray assigns each trial (docs/ray.md, "
              "\"GPU platforms\")",
}
WITH_ONE_VISIBLE = {   # a user's process started with CUDA_VISIBLE_DEVICES=1: torch's own meaning, index 0 of 1
    "cuda": "ok GPU 1", "cuda:0": "ok GPU 1",
    "cuda:1": "DEVICE='cuda:1' but this machine has 1 CUDA device(s); set DEVICE='cuda' or an index below 1 in {path}",
}


def expected(table: dict[str, str], context: str, entry: str, spelling: str, folder: Path) -> str:
    from helpers.dry_run_matrix import model_name

    want = table[spelling]
    return want if want.startswith("ok") else error(want.format(path=folder / model_name(spelling)), entry)


def run_matrix(tmp_path: Path, process: str, **extra: str) -> dict[str, str]:
    out = tmp_path / f"{process}.json"
    done = run_python(["-m", "helpers.dry_run_matrix", str(out), str(tmp_path), process], TESTS,
                      dry_run_env(tmp_path, **extra))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def test_each_device_spelling_on_each_entry_point_in_a_process_that_sees_both_gpus(tmp_path: Path) -> None:
    from helpers.dry_run_matrix import ENTRY_POINTS, SPELLINGS

    got = run_matrix(tmp_path, "node")
    want = {f"node | {entry} | {spelling}": expected(ON_THE_NODE, "node", entry, spelling, tmp_path)
            for spelling in SPELLINGS for entry in ENTRY_POINTS}
    assert got == want


def test_each_device_spelling_in_a_ray_task_given_gpu_1_and_a_process_that_sees_only_it(tmp_path: Path) -> None:
    """In a Ray task given GPU 1, `cuda:N` is what the driver's torch calls cuda:N: GPU N of the node for a
    driver that sees both, GPU 1 for cuda:0 where the driver ran with CUDA_VISIBLE_DEVICES=1."""
    from helpers.dry_run_matrix import CELLS

    got = run_matrix(tmp_path, "visible1", CUDA_VISIBLE_DEVICES="1")
    tables = {"ray": IN_A_RAY_TASK, "ray driver1": IN_A_RAY_TASK_OF_A_DRIVER_SEEING_1, "user": WITH_ONE_VISIBLE}
    want = {f"{context} | {entry} | {spelling}": expected(tables[context], context, entry, spelling, tmp_path)
            for context, entries, spellings in CELLS["visible1"] for spelling in spellings for entry in entries}
    assert got == want
