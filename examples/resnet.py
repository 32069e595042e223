"""A small ResNet-style image classifier: the demo's model, where tuning pays on a plain CPU.

A 3x3 stem and four stages of one basic residual block each (conv, batch norm, ReLU, twice, plus
a 1x1 projection where the shape changes), 32 to 256 channels, on a batch of 4 images of 64x64,
then global average pooling and a linear head. Batch norm holds running statistics of its own
(seeded), as a trained network does, so folding it into the convolutions changes real numbers.

    tuner search examples/resnet.py --trials 6

On CPU, freezing (which `backend="tuner"` applies) lets Inductor fold each batch norm into its
convolution and pre-pack the weights for oneDNN; the default compile keeps them as parameters.
One trial compiles in seconds.
"""
import torch
from torch import nn

BATCH = 4
SIZE = 64
WIDTHS = (32, 64, 128, 256)
CLASSES = 10


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Identity() if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, widths: tuple[int, ...] = WIDTHS, classes: int = CLASSES) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU())
        ins = (widths[0], *widths[:-1])
        self.blocks = nn.ModuleList(BasicBlock(cin, cout, 1 if i == 0 else 2)
                                    for i, (cin, cout) in enumerate(zip(ins, widths)))
        self.head = nn.Linear(widths[-1], classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean(dim=(2, 3)))


def get_model() -> nn.Module:
    model = ResNet().eval()
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.normal_(0.0, 0.1)
            module.running_var.uniform_(0.5, 1.5)
    return model


def get_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(BATCH, 3, SIZE, SIZE),)
