"""Deliberately broken: a syntax error on line 5 (for tests/workload/test_modelfile.py)."""
import torch


def get_model()
    return torch.nn.Linear(2, 2)


def get_inputs():
    return (torch.randn(1, 2),)
