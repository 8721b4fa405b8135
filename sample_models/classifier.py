"""Small MLP classifier (8 -> 16 -> 3) whose trained weights ship in classifier.safetensors.

Exercises loading a checkpoint: build_model() returns all-zero weights; the tool must apply CHECKPOINT.
"""
import torch
from torch import nn

CHECKPOINT = "classifier.safetensors"  # relative to this file


class Classifier(nn.Module):
    def __init__(self, d_in=8, d_hidden=16, n_classes=3):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(d_hidden, n_classes)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def build_model() -> nn.Module:
    # Deliberately NOT loading CHECKPOINT: zeros make it obvious whether it was applied.
    with torch.random.fork_rng(devices=[]):  # keep the global RNG untouched
        model = Classifier()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    return model


def example_inputs():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(4, 8, generator=g),)


def loss(outputs, x):
    return outputs.logsumexp(-1).mean() - outputs[:, 0].mean()
