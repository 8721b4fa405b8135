"""Whisper-base encoder widths (512, 8 heads), 2 layers, 80 mel bins; 10 s of audio (1000 frames).

Random weights from a config (nothing is downloaded); built for `aotc bench --suite`.
"""
import torch
from transformers import WhisperConfig
from transformers.models.whisper.modeling_whisper import WhisperEncoder


def build_model():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return WhisperEncoder(WhisperConfig(d_model=512, encoder_layers=2, encoder_attention_heads=8, encoder_ffn_dim=2048, max_source_positions=500)).eval()


def example_inputs():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(1, 80, 1000, generator=g),)


def loss(outputs, *inputs, **kwargs):
    return outputs.last_hidden_state.pow(2).mean()
