"""ResNet-18 from torchvision with random weights (no download), batch 1, 3x128x128 images.

The full ResNet-18 (11.7 M parameters); the images are smaller than ImageNet's 224x224 so
that a trial takes seconds on 2 CPU cores (1.2 GFLOP per call).
"""
import torch
from torch import nn
from vision_import import torchvision

BATCH = 1
SIZE = 128


def get_model() -> nn.Module:
    return torchvision().models.resnet18(weights=None).eval()


def get_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(BATCH, 3, SIZE, SIZE),)
