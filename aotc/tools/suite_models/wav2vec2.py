"""Wav2Vec2-base widths (conv feature encoder, 768 hidden), 2 transformer layers; one second of 16 kHz audio.

Random weights from a config (nothing is downloaded); built for `aotc bench --suite`.
"""
import torch
from transformers import Wav2Vec2Config, Wav2Vec2Model


def build_model():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return Wav2Vec2Model(Wav2Vec2Config(num_hidden_layers=2)).eval()


def example_inputs():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(1, 16000, generator=g),)


def loss(outputs, *inputs, **kwargs):
    return outputs.last_hidden_state.pow(2).mean()
