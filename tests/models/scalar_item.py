"""A model with one `.item()`: Dynamo breaks the graph there (two graphs) and logs a warning."""
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.a(x)
        scale = y.abs().max().item()
        return y / (scale + 1.0)


def get_model() -> nn.Module:
    return Net().eval()


def get_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(2, 8),)
