"""A model torch cannot capture whole: a data-dependent branch and an untraceable call.

`forward` branches on a tensor's value (`if h.sum() > 0`) and hands a tensor to a
helper that reads it into Python and formats it with json (as logging code does).
`aotc export` names both places; `aotc export --regions auto` captures the two blocks
(one shared graph) and the head, and `aotc.apply` swaps them into the model while
the branch and the helper stay Python.
"""
import json
import math

import torch
from torch import nn


def summarize(t: torch.Tensor) -> str:
    """Logging-style code: reads a tensor's value into Python."""
    return json.dumps({"mean": round(float(t.detach().mean()), 4)})


class Block(nn.Module):
    def __init__(self, width: int = 16):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc = nn.Linear(width, width)

    def forward(self, x):
        return x + torch.tanh(self.fc(self.norm(x)))


class Breaks(nn.Module):
    def __init__(self, width: int = 16, classes: int = 4):
        super().__init__()
        self.first = Block(width)
        self.second = Block(width)
        self.head = nn.Linear(width, classes)
        self.last_summary = ""

    def forward(self, x):
        h = self.first(x)
        if h.sum() > 0:  # a data-dependent branch
            h = h * 0.5
        self.last_summary = summarize(h)  # an untraceable call
        return self.head(self.second(h))


def build_model() -> nn.Module:
    g = torch.Generator().manual_seed(0)
    with torch.random.fork_rng(devices=[]):
        model = Breaks()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1]))
    return model


def example_inputs():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(8, 16, generator=g),)


def loss(outputs, x):
    return outputs.pow(2).mean()
