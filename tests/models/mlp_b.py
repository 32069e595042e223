"""mlp_a.py with every attribute, variable and argument renamed: same workload key."""
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder_layer = nn.Linear(16, 32)
        self.head = nn.Linear(32, 8)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        activations = torch.relu(self.encoder_layer(features))
        return self.head(activations)


def get_model() -> nn.Module:
    return Net().eval()


def get_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(4, 16),)
