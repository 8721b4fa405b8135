"""One-block pre-LN decoder-only transformer with hand-written causal self-attention.
Exercises int64 token inputs, embeddings, matmul/softmax attention with a torch.triu mask,
Dropout, GELU, LayerNorm, a real next-token LM loss, and a dynamic batch dimension.
"""
import math

import torch
from torch import nn

VOCAB = 50
DIM = 32
HEADS = 2
SEQ = 8


class Block(nn.Module):
    def __init__(self, dim=DIM, heads=HEADS, p_drop=0.1):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.drop = nn.Dropout(p_drop)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        B, T, C = x.shape
        hd = C // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=-1)
        q = q.view(B, T, self.heads, hd).transpose(1, 2)
        k = k.view(B, T, self.heads, hd).transpose(1, 2)
        v = v.view(B, T, self.heads, hd).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(hd)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=1)
        scores = scores.masked_fill(mask, float("-inf"))
        attn = self.drop(torch.softmax(scores, dim=-1))
        y = torch.matmul(attn, v).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        x = x + self.mlp(self.ln2(x))
        return x


class TinyTransformer(nn.Module):
    def __init__(self, vocab=VOCAB, dim=DIM, max_len=SEQ):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, dim)
        self.pos_emb = nn.Parameter(torch.zeros(max_len, dim))
        self.block = Block(dim)
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)  # not tied to tok_emb

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.tok_emb(tokens) + self.pos_emb[:T]
        x = self.block(x)
        return self.head(self.ln_f(x))


def _init_(model, seed):
    """Deterministically re-initialise all parameters from a local generator."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.fill_(1.0)
                m.bias.zero_()
            elif isinstance(m, nn.Linear):
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) / math.sqrt(m.in_features))
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.02)
            elif isinstance(m, nn.Embedding):
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) * 0.1)
        model.pos_emb.copy_(torch.randn(model.pos_emb.shape, generator=g) * 0.1)
    return model


def build_model() -> nn.Module:
    # fork_rng: the default nn init draws from the global RNG; restore it so building has no side effects.
    with torch.random.fork_rng(devices=[]):
        model = TinyTransformer()
    return _init_(model, seed=0)


def example_inputs():
    g = torch.Generator().manual_seed(0)
    return (torch.randint(0, VOCAB, (2, SEQ), generator=g, dtype=torch.int64),)


def loss(outputs, tokens):
    # Next-token cross-entropy: logits at position t predict tokens[:, t + 1].
    logits = outputs[:, :-1, :]
    targets = tokens[:, 1:]
    target_logit = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return (logits.logsumexp(-1) - target_logit).mean()


dynamic_shapes = {"tokens": {0: torch.export.Dim("batch", min=2, max=64)}}
