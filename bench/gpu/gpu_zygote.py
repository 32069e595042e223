"""Section 11 of bench/gpu_check.py: the zygote of spare trial processes has not touched CUDA.

A spare trial process is a fork of a zygote that has only imported (workers/zygote.py); a process
that has initialised CUDA cannot be forked into one that uses it. On this machine's torch (a CUDA
build) the section checks, in a process that runs the zygote's own imports
(`trial_process.import_for_trials`: torch, Dynamo, Inductor, the trial code, the priming steps),
that `torch.cuda.is_initialized()` is False and no library of the CUDA driver is mapped
(/proc/self/maps: libcuda.so, libnvidia-*), and that a fork of it then runs a kernel on the GPU;
then, that a real zygote (a `SparePool`'s, `python -m tuner.workers.trial_process --zygote`) maps
no driver library either once it has forked its spare. The CUDA runtime libraries torch's import
maps by itself (libcudart, libcublas, ...: `torch._load_global_deps`, no context, no driver) are
listed, not failed. In --smoke (CPU) the same steps run with the CPU as the device.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

DRIVER = re.compile(r"^(libcuda\.so|libnvidia-)")          # loaded by cuInit: a CUDA context is near
RUNTIME = re.compile(r"^lib(cudart|cublas|cudnn|nvrtc|nvJitLink|cusparse|cufft|curand|nccl)")

PROGRAM = '''
import json, os, re, sys
from tuner.workers.trial_process import import_for_trials
import_for_trials()
import torch
def mapped():
    names = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            if "/" in line:
                names.add(os.path.basename(line.split()[-1]))
    return sorted(n for n in names if "cuda" in n or "nvidia" in n or "cublas" in n or "cudnn" in n
                  or "nvrtc" in n or "nvJitLink" in n)
facts = {"initialized": torch.cuda.is_initialized(), "mapped": mapped()}
read, write = os.pipe()
pid = os.fork()
if pid == 0:        # as a spare is forked from the zygote: it must be able to use the GPU
    os.close(read)
    try:
        x = torch.ones(1024, device=sys.argv[1]) * 2
        child = {"sum": float(x.sum().item()), "initialized": torch.cuda.is_initialized()}
    except Exception as exc:
        child = {"error": f"{type(exc).__name__}: {exc}"}
    os.write(write, json.dumps(child).encode())
    os._exit(0)
os.close(write)
with os.fdopen(read) as answer:
    facts["fork"] = json.loads(answer.read())
os.waitpid(pid, 0)
print(json.dumps(facts))
'''


def _driver(names: list[str]) -> list[str]:
    return [name for name in names if DRIVER.match(name)]


def _zygote_maps(check: Any, pool: Any) -> list[str]:
    """The CUDA libraries the zygote of `pool` maps once it has forked a spare (its imports done)."""
    spare = pool.take(check.env)
    try:
        while spare.proc.pid is None and spare.alive() and check.left() > 1:
            time.sleep(0.1)
        if spare.proc.pid is None:
            raise AssertionError("the zygote forked no spare within the section's cap")
        maps = Path(f"/proc/{spare.proc.zygote.proc.pid}/maps").read_text()
    finally:
        spare.discard()
    names = {os.path.basename(line.split()[-1]) for line in maps.splitlines() if "/" in line}
    return sorted(n for n in names if DRIVER.match(n) or RUNTIME.match(n))


def section_zygote(check: Any) -> list[str]:
    """The zygote's imports leave CUDA uninitialised and the driver unmapped; a fork then uses the GPU."""
    from tuner.workers.spares import SparePool

    pool = SparePool(str(check.run_dir / "zygote-check"))
    pool.fill(check.env)        # its zygote imports meanwhile
    try:
        return _check(check, pool)
    finally:
        pool.close()


def _check(check: Any, pool: Any) -> list[str]:
    done = subprocess.run(check.python("-c", PROGRAM, check.device), capture_output=True, text=True,
                          env=check.env, cwd=check.run_dir, timeout=max(1.0, check.left() - 1))
    if done.returncode != 0:
        raise AssertionError(f"the import process exited {done.returncode}: {done.stderr[-1500:]}")
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"  after the zygote's imports: torch.cuda.is_initialized() {facts['initialized']}; "
          f"mapped: {', '.join(facts['mapped']) or 'nothing of CUDA'}")
    print(f"  its fork: {facts['fork']}")
    if facts["initialized"] or _driver(facts["mapped"]):
        raise AssertionError(f"the zygote's imports touched CUDA: initialized {facts['initialized']}, "
                             f"driver mapped {_driver(facts['mapped'])}")
    if facts["fork"].get("sum") != 2048.0:
        raise AssertionError(f"a fork after the zygote's imports could not use {check.device}: {facts['fork']}")
    zygote = _zygote_maps(check, pool)
    print(f"  a real zygote, its spare forked, maps: {', '.join(zygote) or 'nothing of CUDA'}")
    if _driver(zygote):
        raise AssertionError(f"the zygote maps the CUDA driver: {_driver(zygote)}")
    runtime = [name for name in facts["mapped"] if not DRIVER.match(name)]
    return [f"is_initialized False, no driver library mapped (zygote and its imports); fork ran on {check.device}",
            f"runtime libraries mapped by import: {', '.join(runtime) or 'none'}"]
