"""A tiny MLP trained on a regression target, for `--mode train` tests: compiles in seconds.

With TINY_TRAIN_BREAK_GRAD=1 the compiled forward (only when Dynamo traces it) doubles the
gradient that flows into the first layer while leaving every value unchanged: a compiled
step whose loss matches eager but whose gradients do not.
"""
import os

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        if os.environ.get("TINY_TRAIN_BREAK_GRAD") == "1" and torch.compiler.is_compiling():
            h = h.detach() + (h - h.detach()) * 2.0     # same value, twice the gradient
        return self.fc2(torch.relu(h))


def get_model():
    return Net()


def get_inputs(batch=16):
    return (torch.randn(batch, 32), torch.randn(batch, 1))


def get_loss(model, inputs):
    x, target = inputs
    return nn.functional.mse_loss(model(x), target)
