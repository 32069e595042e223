"""A model with one explicit graph break: Dynamo produces two graphs."""
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.a(x))
        torch._dynamo.graph_break()
        return self.b(y).sigmoid()


def get_model() -> nn.Module:
    return Net().eval()


def get_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(2, 8),)
