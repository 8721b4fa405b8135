"""A plain nn.Sequential trained as people write it: `F.cross_entropy(model(x), y)`.

The targets are not an input of the model: `loss_inputs()` gives them, and the loss takes
the model's outputs and the targets. `aotc export sequential_targets.py --joint` captures
the whole step; the bundle's `train_step(x, y)` takes both in one call.
"""
import torch
import torch.nn.functional as F
from torch import nn
from torch.export import Dim


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))


def example_inputs():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(6, 8, generator=g),)


def loss_inputs():
    return (torch.tensor([0, 1, 2, 2, 1, 0]),)


def loss(outputs, target):
    return F.cross_entropy(outputs, target)


batch = Dim("batch", min=2, max=64)
dynamic_shapes = {"input": {0: batch}, "target": {0: batch}}
