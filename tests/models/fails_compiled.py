"""Runs in eager, but its compiled forward computes something else, as a miscompile would: every
trial is paired with the default compile, so every trial fails, and the search says why in one
line (tests/cli/test_cli.py)."""
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.fc(x)
        if torch.compiler.is_compiling():
            out = out + 1.0         # only what Dynamo traces: the compiled model's output is off by one
        return out


def get_model():
    return Net().eval()


def get_inputs():
    return (torch.randn(4, 8),)
