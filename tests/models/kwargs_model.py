"""Inputs as keyword arguments, and a nested output (dict, tuple, None)."""
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, scale: torch.Tensor) -> dict:
        y = self.proj(x) * scale
        return {"out": y, "extra": (y.sum(), None, [y.mean()])}


def get_model() -> nn.Module:
    return Net().eval()


def get_inputs() -> dict[str, torch.Tensor]:
    return {"x": torch.randn(3, 4), "scale": torch.tensor(2.0)}
