"""Two-layer MLP with BatchNorm1d and a dynamic batch dimension.

Exercises buffer mutation (BatchNorm running stats in train mode) and dynamic_shapes.
"""
import math

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self, d_in=16, d_hidden=32, d_out=4):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.bn = nn.BatchNorm1d(d_hidden)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(d_hidden, d_out)

    def forward(self, x):
        return self.fc2(self.act(self.bn(self.fc1(x))))


def _init_(model, seed):
    """Deterministically re-initialise all parameters from a local generator."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.weight.fill_(1.0)
                m.bias.zero_()
            elif isinstance(m, nn.Linear):
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) / math.sqrt(m.in_features))
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
    return model


def build_model() -> nn.Module:
    # fork_rng: the default nn init draws from the global RNG; restore it so building has no side effects.
    with torch.random.fork_rng(devices=[]):
        model = MLP()
    return _init_(model, seed=0)


def example_inputs():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(8, 16, generator=g),)


def loss(outputs, x):
    return outputs.pow(2).mean()


dynamic_shapes = {"x": {0: torch.export.Dim("batch", min=2, max=64)}}
