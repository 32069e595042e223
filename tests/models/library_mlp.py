"""A model file whose class comes from an imported module, as torchvision's and timm's do:
every load of this file gets the same class, so every variant shares one `forward` code object."""
import torch

from mlp_library import LibraryMLP


def get_model():
    return LibraryMLP().eval()


def get_inputs():
    return (torch.randn(4, 16),)
