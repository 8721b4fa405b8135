"""GPT-2-shaped decoder-only language model, small enough for a laptop CPU.

4 pre-LN blocks of width 256 with 4 heads (causal self-attention through
scaled_dot_product_attention(is_causal=True), GELU MLP 4x, residuals), learned position
embeddings, a final LayerNorm, and an LM head whose weight is tied to the token embedding.
No dropout (p=0 everywhere), so the forward pass is deterministic. Sequence 128, batch 4.
Exercises a model several MB in size, SDPA, tied parameters (one tensor behind two
module attributes) and a next-token LM loss.
"""
import math

import torch
from torch import nn
from torch.nn import functional as F

VOCAB = 512
WIDTH = 256
HEADS = 4
DEPTH = 4
SEQ = 128
BATCH = 4


class Block(nn.Module):
    def __init__(self, width=WIDTH, heads=HEADS):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(width)
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)
        self.ln_2 = nn.LayerNorm(width)
        self.c_fc = nn.Linear(width, 4 * width)
        self.mlp_proj = nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class GPTSmall(nn.Module):
    def __init__(self, vocab=VOCAB, width=WIDTH, heads=HEADS, depth=DEPTH, context=SEQ):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.h = nn.ModuleList(Block(width, heads) for _ in range(depth))
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as in GPT-2

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.wte(tokens) + self.wpe(positions)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def _init_(model, seed):
    """Deterministically re-initialise all parameters from a local generator (GPT-2's scheme:
    N(0, 0.02), residual projections scaled by 1/sqrt(2 * depth))."""
    g = torch.Generator().manual_seed(seed)
    residual_std = 0.02 / math.sqrt(2 * len(model.h))
    with torch.no_grad():
        for name, m in model.named_modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.fill_(1.0)
                m.bias.zero_()
            elif isinstance(m, nn.Linear) and m is not model.lm_head:  # lm_head is wte (tied)
                std = residual_std if name.endswith(("c_proj", "mlp_proj")) else 0.02
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) * std)
                m.bias.zero_()
            elif isinstance(m, nn.Embedding):
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) * 0.02)
    return model


def build_model() -> nn.Module:
    # fork_rng: the default nn init draws from the global RNG; restore it so building has no side effects.
    with torch.random.fork_rng(devices=[]):
        model = GPTSmall()
    return _init_(model, seed=0)


def example_inputs():
    g = torch.Generator().manual_seed(0)
    return (torch.randint(0, VOCAB, (BATCH, SEQ), generator=g, dtype=torch.int64),)


def loss(outputs, tokens):
    # Next-token cross-entropy: logits at position t predict tokens[:, t + 1].
    return F.cross_entropy(outputs[:, :-1, :].reshape(-1, outputs.shape[-1]), tokens[:, 1:].reshape(-1))
