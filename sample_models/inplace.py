"""Forward mutates a user input in place and returns aliasing outputs.

Exercises input mutation (y.add_(1)), an output that is a view of an input, and a view of an intermediate.
"""
import torch
from torch import nn


class InplaceModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, y):
        y.add_(1)
        h = self.lin(x) + y
        return h, y.view(-1), h.transpose(0, 1)


def build_model() -> nn.Module:
    with torch.random.fork_rng(devices=[]):  # keep the global RNG untouched
        model = InplaceModel()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        model.lin.weight.copy_(torch.randn(4, 4, generator=g) * 0.5)
        model.lin.bias.copy_(torch.randn(4, generator=g) * 0.1)
    return model


def example_inputs():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(3, 4, generator=g), torch.randn(3, 4, generator=g))


def loss(outputs, x, y):
    return outputs[0].pow(2).sum()
