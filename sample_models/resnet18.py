"""ResNet-18 (He et al. 2015), written by hand after torchvision's resnet18, for 64x64 images.

Stem conv 7x7 stride 2 + BatchNorm2d + ReLU + MaxPool2d 3x3 stride 2, four stages of two
BasicBlocks (widths 64/128/256/512, stride 2 and a 1x1 conv + BN downsample at the start of
stages 2-4), AdaptiveAvgPool2d and a 10-class Linear head. Input (8, 3, 64, 64) float32.
Exercises a deep conv net (20 convolutions, 20 BatchNorm2d layers whose running stats are
mutated in train mode) and residual adds, at a size where compile times matter.
"""
import math

import torch
from torch import nn
from torch.nn import functional as F

NUM_CLASSES = 10
BATCH = 8
SIZE = 64


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet18(nn.Module):
    def __init__(self, num_classes=NUM_CLASSES, widths=(64, 128, 256, 512)):
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        layers, cin = [], widths[0]
        for i, w in enumerate(widths):
            stride = 1 if i == 0 else 2
            layers.append(nn.Sequential(BasicBlock(cin, w, stride), BasicBlock(w, w)))
            cin = w
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(widths[-1], num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def _init_(model, seed):
    """Deterministically re-initialise all parameters from a local generator: Kaiming-normal
    (fan_out, ReLU) convolutions as torchvision does, BN weight 1 / bias 0, fc N(0, 1/fan_in)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Conv2d):
                fan_out = m.out_channels * m.kernel_size[0] * m.kernel_size[1]
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) * math.sqrt(2.0 / fan_out))
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.fill_(1.0)
                m.bias.zero_()
            elif isinstance(m, nn.Linear):
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) / math.sqrt(m.in_features))
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.01)
    return model


def build_model() -> nn.Module:
    # fork_rng: the default nn init draws from the global RNG; restore it so building has no side effects.
    with torch.random.fork_rng(devices=[]):
        model = ResNet18()
    return _init_(model, seed=0)


def example_inputs():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(BATCH, 3, SIZE, SIZE, generator=g),)


def loss(outputs, x):
    # Cross-entropy against fixed labels 0, 1, ..., 9, 0, ... (one per batch row).
    labels = torch.arange(outputs.shape[0], device=outputs.device) % NUM_CLASSES
    return F.cross_entropy(outputs, labels)
