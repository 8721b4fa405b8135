"""A three-layer MLP with int8 weight-only quantization (torchao), dynamic batch.

`quantize_(model, Int8WeightOnlyConfig(version=2))` turns each Linear weight into a torchao
`Int8Tensor` (int8 `qdata`, float `scale` and int8 `zero_point` per row). aotc stores
those inner tensors, and the graphs dequantize them; the biases stay float and
trainable. `build_float_model` is the same network before quantization (for comparing
sizes and speed: `aotc export ... --entry build_float_model`).
"""
import math

import torch
from torch import nn


def build_float_model() -> nn.Module:
    g = torch.Generator().manual_seed(0)
    with torch.random.fork_rng(devices=[]):
        model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 16))
    with torch.no_grad():
        for m in model:
            if isinstance(m, nn.Linear):
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) / math.sqrt(m.in_features))
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
    return model


def build_model() -> nn.Module:
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    model = build_float_model()
    # version 2 (Int8Tensor) is 0.18's default; 0.17's version 1 holds an enum in its flatten
    # context, which a bundle does not store
    quantize_(model, Int8WeightOnlyConfig(version=2))
    return model


def example_inputs():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(8, 256, generator=g),)


def loss(outputs, x):
    return outputs.pow(2).mean()


dynamic_shapes = {"input": {0: torch.export.Dim("batch", min=1, max=256)}}
