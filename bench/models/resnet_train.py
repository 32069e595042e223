"""examples/resnet.py with what `--mode train` needs: a loss and an optimizer (SGD with momentum).

    tuner search bench/models/resnet_train.py --mode train --trials 6 --executor local

The model and its inputs are examples/resnet.py's own, loaded from that file, so a training
search measures the same network the inference figures of docs/results.md do.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
from torch import nn

_SPEC = importlib.util.spec_from_file_location("examples_resnet",
                                               Path(__file__).resolve().parents[2] / "examples" / "resnet.py")
_RESNET = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_RESNET)

get_model = _RESNET.get_model
get_inputs = _RESNET.get_inputs


def get_loss(model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    return model(*inputs).square().mean()


def get_optimizer(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
