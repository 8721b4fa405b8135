"""A Qwen2 decoder (hidden 512, 8 heads, 2 KV heads, FFN 1408), 2 layers, 8192 tokens; prefill of 128 tokens.

Random weights from a config (nothing is downloaded); built for `aotc bench --suite`.
"""
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM


def build_model():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return Qwen2ForCausalLM(Qwen2Config(hidden_size=512, intermediate_size=1408, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2, vocab_size=8192, use_cache=False)).eval()


def example_inputs():
    g = torch.Generator().manual_seed(0)
    return (torch.randint(0, 8192, (1, 128), generator=g),)


def loss(outputs, *inputs, **kwargs):
    return outputs.logits.logsumexp(-1).mean() - outputs.logits[..., 0].mean()
