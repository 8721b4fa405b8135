"""RoBERTa-base widths, 2 layers; batch 2, 128 tokens.

Random weights from a config (nothing is downloaded); built for `aotc bench --suite`.
"""
import torch
from transformers import RobertaConfig, RobertaModel


def build_model():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return RobertaModel(RobertaConfig(num_hidden_layers=2)).eval()


def example_inputs():
    g = torch.Generator().manual_seed(0)
    return (), {"input_ids": torch.randint(1000, 20000, (2, 128), generator=g), "attention_mask": torch.ones(2, 128, dtype=torch.long)}


def loss(outputs, *inputs, **kwargs):
    return outputs.last_hidden_state.pow(2).mean()
