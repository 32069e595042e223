"""Deliberately broken: no get_model()."""
import torch


def get_inputs():
    return (torch.randn(1, 2),)
