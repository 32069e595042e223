"""Right on its first two calls, wrong from the third on: what a cudagraph replay that differs
from its warm-up looks like to the gate (tests/measure/test_gate_tolerances.py). Never searched."""
import torch
from torch import nn


class Drifting(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 16)
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        y = self.linear(x)
        return torch.where(self.calls > 2, 2 * y, y)


def get_model():
    return Drifting().eval()


def get_inputs():
    return (torch.randn(4, 16),)
