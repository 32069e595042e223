"""The 'library' that tests/models/library_mlp.py imports its model class from."""
from torch import nn


class LibraryMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16))

    def forward(self, x):
        return self.net(x)
