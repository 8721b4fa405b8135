"""MobileNetV2 (width 1.0, all 17 inverted-residual blocks), a 10-class head; batch 2 at 160x160.

Random weights from a config (nothing is downloaded); built for `aotc bench --suite`.
"""
import torch
from transformers import MobileNetV2Config, MobileNetV2ForImageClassification


def build_model():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return MobileNetV2ForImageClassification(MobileNetV2Config(image_size=160, num_labels=10)).eval()


def example_inputs():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(2, 3, 160, 160, generator=g),)


def loss(outputs, *inputs, **kwargs):
    return outputs.logits.logsumexp(-1).mean()
