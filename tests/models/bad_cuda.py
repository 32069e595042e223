"""Deliberately broken on a machine without a GPU: DEVICE asks for CUDA."""
import torch

DEVICE = "cuda"


def get_model():
    return torch.nn.Linear(2, 2)


def get_inputs():
    return (torch.randn(1, 2),)
