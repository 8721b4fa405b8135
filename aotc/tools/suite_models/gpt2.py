"""GPT-2 small widths (768, 12 heads), 2 layers, an 8192-token vocabulary; prefill of 128 tokens: `out.logits`.

Random weights from a config (nothing is downloaded); built for `aotc bench --suite`.
"""
import torch
from transformers import GPT2Config, GPT2LMHeadModel


def build_model():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return GPT2LMHeadModel(GPT2Config(n_layer=2, vocab_size=8192, use_cache=False)).eval()


def example_inputs():
    g = torch.Generator().manual_seed(0)
    return (torch.randint(0, 8192, (1, 128), generator=g),)


def loss(outputs, *inputs, **kwargs):
    return outputs.logits.logsumexp(-1).mean() - outputs.logits[..., 0].mean()
