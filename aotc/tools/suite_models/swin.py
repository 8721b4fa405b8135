"""Swin-tiny widths (96, heads 3-24), one block per stage, 7x7 windows, a 10-class head; one 224x224 image.

Random weights from a config (nothing is downloaded); built for `aotc bench --suite`.
"""
import torch
from transformers import SwinConfig, SwinForImageClassification


def build_model():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return SwinForImageClassification(SwinConfig(depths=[1, 1, 1, 1], num_labels=10)).eval()


def example_inputs():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(1, 3, 224, 224, generator=g),)


def loss(outputs, *inputs, **kwargs):
    return outputs.logits.logsumexp(-1).mean()
