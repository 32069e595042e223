"""Tiny MLP used by the fingerprint tests. mlp_b.py is the same model with other names."""
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.fc1(x))
        return self.fc2(hidden)


def get_model() -> nn.Module:
    return Net().eval()


def get_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(4, 16),)
