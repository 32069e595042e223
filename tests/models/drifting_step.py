"""A training step right on its first two runs, wrong from the third on, whatever the weights: a
counter outside the state dict (a buffer that is not persistent) doubles the output from then on,
what a cudagraph replay that differs from its recording looks like to the gate
(tests/measure/test_gate_tolerances.py). Never searched."""
import torch
from torch import nn


class DriftingStep(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 4)
        self.register_buffer("runs", torch.zeros((), dtype=torch.int64), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.runs += 1
        y = self.linear(x)
        return torch.where(self.runs > 2, 2 * y, y)


def get_model():
    return DriftingStep()


def get_inputs():
    return (torch.randn(8, 16), torch.randn(8, 4))


def get_loss(model, inputs):
    x, target = inputs
    return nn.functional.mse_loss(model(x), target)
