"""tiny_mlp whose compiled call blocks in C for good in a trial process's candidate: the call
relocks a pthread mutex it holds (a normal mutex: the second lock waits forever), through ctypes,
which releases the GIL. No signal ends that wait and no Python signal handler runs during it, so
the adaptive cap's SIGALRM cannot stop it either. Only the second load in a trial process wedges
(the first is the default compile the candidate is paired with); the eager reference, the search's
own load and every other process run normally. When it wedges it writes the file that
WEDGED_MLP_MARKER names, if set (tests/measure/test_watchdog.py)."""
import ctypes
import json
import os
import sys
from pathlib import Path

import torch
from torch import nn

sys._wedged_mlp_loads = getattr(sys, "_wedged_mlp_loads", 0) + 1
_job = Path("job.json")
WEDGE = (sys._wedged_mlp_loads > 1 and sys.argv[0].endswith("trial_process.py") and _job.exists()
         and json.loads(_job.read_text()).get("kind") == "trial")


@torch.compiler.disable
def _wedge():
    """Runs at the compiled call (Dynamo leaves disabled functions out of the graph)."""
    marker = os.environ.get("WEDGED_MLP_MARKER")
    if marker:
        Path(marker).write_text(str(os.getpid()))
    libc = ctypes.CDLL(None)
    mutex = ctypes.create_string_buffer(64)     # zeroed: glibc's PTHREAD_MUTEX_INITIALIZER, a normal mutex
    libc.pthread_mutex_lock(mutex)
    libc.pthread_mutex_lock(mutex)              # never returns


class WedgedMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32))

    def forward(self, x):
        if WEDGE and torch.compiler.is_compiling():
            _wedge()
        return self.net(x)


def get_model():
    return WedgedMLP().eval()


def get_inputs():
    return (torch.randn(8, 32),)
