"""Deliberately broken: no get_inputs()."""
import torch


def get_model():
    return torch.nn.Linear(2, 2)
