"""tiny_mlp whose file stalls (sleeps far past any deadline) while a trial process loads it for its
candidate: the second load in a process whose job is a trial (the first is the default compile the
candidate is paired with; the defaults' own trial loads it once). Before any lock is taken, so
the other trials carry on. The search's own load, the defaults' trial and every confirmation
process load it normally (tests/search/test_budget.py)."""
import json
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys._stalling_mlp_loads = getattr(sys, "_stalling_mlp_loads", 0) + 1
_job = Path("job.json")
if (sys._stalling_mlp_loads > 1 and sys.argv[0].endswith("trial_process.py") and _job.exists()
        and json.loads(_job.read_text()).get("kind") == "trial"):
    time.sleep(10_000)


class StallingMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32))

    def forward(self, x):
        return self.net(x)


def get_model():
    return StallingMLP().eval()


def get_inputs():
    return (torch.randn(8, 32),)
