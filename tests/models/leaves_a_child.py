"""A model for tests whose loading starts a process that would outlive its trial process: a
compile worker or compiler stands in (tests/workers/test_trial_ends.py).

LEAVES_A_CHILD="FOLDER:THEN" (set by the test in the trial's environment): `get_model` starts
`sh -c 'sleep 30; touch FOLDER/marker'` in the trial process's group, writes "TRIAL_PID
CHILD_PID" to FOLDER/pids, then, as THEN says: "raise" (the trial records a runtime error and its
process exits normally), "segv" (it dies of SIGSEGV) or "hang" (it sleeps past its deadline).
"""
import ctypes
import os
import subprocess
import time

import torch


def get_model():
    folder, _, then = os.environ["LEAVES_A_CHILD"].rpartition(":")
    child = subprocess.Popen(["sh", "-c", f"sleep 30; touch {os.path.join(folder, 'marker')}"])
    with open(os.path.join(folder, "pids"), "w") as pids:
        pids.write(f"{os.getpid()} {child.pid}")
    if then == "segv":
        ctypes.string_at(0)
    elif then == "hang":
        time.sleep(3600)
    raise ValueError("leaves_a_child: the model fails on purpose")


def get_inputs():
    return (torch.randn(2, 4),)


