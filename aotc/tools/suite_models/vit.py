"""ViT-base widths (768, 12 heads), 2 layers, a 10-class head; one 224x224 image: `out.logits`.

Random weights from a config (nothing is downloaded); built for `aotc bench --suite`.
"""
import torch
from transformers import ViTConfig, ViTForImageClassification


def build_model():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return ViTForImageClassification(ViTConfig(num_hidden_layers=2, num_labels=10)).eval()


def example_inputs():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(1, 3, 224, 224, generator=g),)


def loss(outputs, *inputs, **kwargs):
    return outputs.logits.logsumexp(-1).mean()
