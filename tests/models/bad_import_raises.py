"""Deliberately broken: importing it fails."""
import torch

import not_a_real_module_for_tuner_tests  # noqa: F401


def get_model():
    return torch.nn.Linear(2, 2)


def get_inputs():
    return (torch.randn(1, 2),)
