"""Logits with -Inf where a fixed mask hides them (attention-style), and +Inf in one place:
a valid model whose eager output holds ±Inf that every candidate must reproduce exactly."""
import torch
from torch import nn


class MaskedLogits(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)
        self.register_buffer("mask", torch.arange(16) % 3 == 0)   # columns 0, 3, ..., 15 hidden

    def forward(self, x):
        logits = self.lin(x).masked_fill(self.mask, float("-inf"))
        return logits.index_fill(1, torch.tensor([1]), float("inf"))


def get_model():
    return MaskedLogits().eval()


def get_inputs():
    return (torch.randn(4, 16),)
