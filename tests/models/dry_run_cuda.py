"""The CUDA dry run's model file (tests/helpers/cuda_dry_run.py): a tiny MLP on a GPU of a stand-in
machine, its tensors on CPU. Importing it installs the stand-in in the importing process, as
every process that loads it must. Tests copy it with another DEVICE line (`helpers.dry_run_matrix.write_model`)."""
import sys

TESTS = "/tests-folder"            # helpers.dry_run_matrix.write_model writes the path of tests/ here
sys.path.insert(0, TESTS)
from helpers.cuda_dry_run import install

install()

import torch
from torch import nn

DEVICE = "cuda"


def get_model():
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32)).eval()


def get_inputs():
    return (torch.randn(8, 32),)
