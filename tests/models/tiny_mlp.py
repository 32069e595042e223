"""A tiny MLP for tests: compiles in seconds."""
import torch
from torch import nn


def get_model():
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32)).eval()


def get_inputs():
    return (torch.randn(8, 32),)
