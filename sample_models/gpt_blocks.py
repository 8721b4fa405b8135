"""A small GPT-style stack of identical blocks, and a greedy generation loop in Python.

Token and position embeddings, `depth` pre-norm blocks (causal self-attention with
scaled_dot_product_attention, GELU MLP), a final norm and a tied-free LM head. The
blocks are identical but for their weights, so `--regions 'blocks.*'` captures and
compiles one block graph that every block runs. `generate` is the user's own Python
loop around the model (no KV cache), which stays Python under `aotc.apply`.
"""
import torch
from torch import nn
from torch.nn import functional as F


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.out = nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab: int = 128, width: int = 64, heads: int = 4, depth: int = 6, context: int = 64):
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, ids):
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.tokens(ids) + self.positions(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


@torch.no_grad()
def generate(model: nn.Module, ids: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """Greedy decoding: the whole sequence through the model for every new token."""
    for _ in range(new_tokens):
        next_id = model(ids)[:, -1].argmax(dim=-1, keepdim=True)
        ids = torch.cat([ids, next_id], dim=1)
    return ids


def build_model() -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return GPT().eval()


def example_inputs():
    g = torch.Generator().manual_seed(0)
    return (torch.randint(0, 128, (2, 16), generator=g),)


def loss(outputs, ids):
    return F.cross_entropy(outputs[:, :-1].reshape(-1, outputs.shape[-1]), ids[:, 1:].reshape(-1))


dynamic_shapes = {"ids": {0: torch.export.Dim("batch", min=1, max=16), 1: torch.export.Dim("seq", min=1, max=64)}}
