"""A classifier whose get_loss uses the model as a Hugging Face-style training loop does: it calls
`model.train()` and reads `model.config` (tests/search/test_training.py, its search test). A model file's functions
must see the module they wrote, compiled or not."""
from types import SimpleNamespace

import torch
from torch import nn


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.config = SimpleNamespace(num_classes=4, hidden=32)
        self.body = nn.Sequential(nn.Linear(16, self.config.hidden), nn.ReLU())
        self.head = nn.Linear(self.config.hidden, self.config.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def get_model():
    return Classifier()


def get_inputs():
    return (torch.randn(8, 16), torch.randint(0, 4, (8,)))


def get_loss(model, inputs):
    model.train()
    x, labels = inputs
    logits = model(x).view(-1, model.config.num_classes)
    return nn.functional.cross_entropy(logits, labels)


def get_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.01)
