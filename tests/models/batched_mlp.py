"""A tiny MLP whose get_inputs takes the batch size, for `--shapes "batch=..."` (tests/workload/test_shapes.py)."""
import torch
from torch import nn


def get_model():
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32)).eval()


def get_inputs(batch=8):
    return (torch.randn(batch, 32),)
