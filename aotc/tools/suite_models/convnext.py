"""ConvNeXt-tiny widths (96-768), one block per stage, a 10-class head; batch 2 at 128x128.

Random weights from a config (nothing is downloaded); built for `aotc bench --suite`.
"""
import torch
from transformers import ConvNextConfig, ConvNextForImageClassification


def build_model():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return ConvNextForImageClassification(ConvNextConfig(depths=[1, 1, 1, 1], num_labels=10)).eval()


def example_inputs():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(2, 3, 128, 128, generator=g),)


def loss(outputs, *inputs, **kwargs):
    return outputs.logits.logsumexp(-1).mean()
