"""Text generation from a bundle: a prefill graph and a one-token decode graph over a
static KV cache held as buffers.

`StaticCacheLM` wraps a causal LM so that its cache is a set of buffers
(`key_cache_<i>`, `value_cache_<i>`, `cumulative_length_<i>` per layer, sized for
`batch_size` sequences of `max_cache_len` tokens); a generation bundle holds two
inference graphs of it, `forward(input_ids, cache_position) -> logits`: "prefill" for a
prompt of any length and "decode" for one token. Both graphs take the same buffers;
each call writes its keys and values into them, and the runtime's epilogue copies the
new cache into those buffers in place (the buffer mutations the metadata records), so
the cache lives across calls. aotc.tools.generation_export writes such bundles.

`generate(bundle, input_ids, max_new_tokens)` runs prefill once, then decode per token,
greedy or sampling. Greedy tokens equal eager `model.generate(do_sample=False)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

import aotc
from aotc.errors import CaptureError, InputError


class StaticCacheLM(torch.nn.Module):
    """A causal LM whose KV cache is this module's buffers: `forward(input_ids, cache_position)`
    writes the keys and values of the given positions and returns the logits.

    Like transformers' ExecuTorch recipe (TorchExportableModuleWithStaticCache), but the
    cache layers are pointed at the module's buffers on every call: torch.export
    (non-strict) then sees the cache writes as buffer mutations, not as writes to
    constants.
    """

    def __init__(self, model: torch.nn.Module, batch_size: int, max_cache_len: int):
        super().__init__()
        from transformers import StaticCache  # transformers: optional, and only for generation bundles
        from transformers.cache_utils import StaticLayer
        from transformers.configuration_utils import get_head_shapes

        config = model.config.get_text_config()
        self.model = model
        cache = StaticCache(max_cache_len=max_cache_len, config=config)
        unsupported = {type(layer).__name__ for layer in cache.layers if type(layer) is not StaticLayer}
        if unsupported:
            raise CaptureError(
                f"{type(model).__name__} uses cache layers of kind {', '.join(sorted(unsupported))} (sliding "
                "window or shared KV); aotc's static-cache generation supports full-attention layers only."
            )
        num_heads, head_dim = get_head_shapes(config)
        cache.early_initialization(batch_size, num_heads, head_dim, model.dtype, torch.device("cpu"))
        self.cache = cache
        for i, layer in enumerate(cache.layers):
            self.register_buffer(f"key_cache_{i}", layer.keys, persistent=False)
            self.register_buffer(f"value_cache_{i}", layer.values, persistent=False)
            self.register_buffer(f"cumulative_length_{i}", layer.cumulative_length, persistent=False)
            layer.keys = layer.values = layer.cumulative_length = None

    def forward(self, input_ids: torch.Tensor, cache_position: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.cache.layers):
            layer.keys = getattr(self, f"key_cache_{i}")
            layer.values = getattr(self, f"value_cache_{i}")
            layer.cumulative_length = getattr(self, f"cumulative_length_{i}")
            # the cache is written from cache_position on: a new prompt overwrites an old one
            layer.cumulative_length.copy_(cache_position[0])
        try:
            out = self.model(input_ids=input_ids, past_key_values=self.cache, use_cache=True, attention_mask=None)
        finally:
            # the layers keep no tensor between calls (tracing hands them stand-ins)
            for layer in self.cache.layers:
                layer.keys = layer.values = layer.cumulative_length = None
        return out.logits


@dataclass
class Sampling:
    """How the next token is chosen: greedy (`do_sample=False`) or sampled from the logits
    scaled by `temperature`, restricted to the `top_k` most likely and to the smallest set
    whose probability reaches `top_p`."""

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None

    def __post_init__(self):
        self.generator = torch.Generator().manual_seed(self.seed) if self.seed is not None else None

    def next_token(self, logits: torch.Tensor) -> torch.Tensor:
        logits = logits.float()
        if not self.do_sample:
            return logits.argmax(dim=-1)
        if self.temperature <= 0:
            raise InputError(f"temperature is {self.temperature}; it must be above 0 (or use greedy decoding).")
        logits = logits / self.temperature
        if self.top_k:
            kth = torch.topk(logits, min(self.top_k, logits.shape[-1])).values[..., -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if self.top_p is not None and self.top_p < 1.0:
            ordered, order = torch.sort(logits, descending=True)
            cumulative = ordered.softmax(-1).cumsum(-1)
            drop = cumulative > self.top_p
            drop[..., 1:] = drop[..., :-1].clone()  # keep the token that crosses top_p
            drop[..., 0] = False
            logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
        probs = logits.softmax(-1)
        return torch.multinomial(probs, 1, generator=self.generator).squeeze(-1)


def generate(bundle: Any, input_ids: torch.Tensor, max_new_tokens: int, *, do_sample: bool = False,
             temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
             seed: int | None = None, eos_token_id: int | list[int] | None = None, backend: str = "auto",
             device: str | None = None) -> torch.Tensor:
    """Prompt plus up to `max_new_tokens` generated tokens, shape (batch, length).

    `bundle` is a generation bundle's path or the module `aotc.load` returned for it. A
    sequence ends at an end-of-sequence token (the model's, unless `eos_token_id` is
    given); finished sequences are padded with the pad token, as `model.generate` does.
    """

    module = bundle if isinstance(bundle, torch.nn.Module) else aotc.load(bundle, backend=backend, device=device)
    info = module.generation
    if info is None:
        raise InputError(
            f"bundle '{module.bundle_path}' has no prefill and decode graphs; export it with "
            "aotc export FOLDER --task text-generation (or aotc.export_generation)."
        )
    if input_ids.dim() != 2 or input_ids.shape[0] != info.batch_size:
        raise InputError(
            f"input_ids has shape {tuple(input_ids.shape)}; this bundle generates for batch size "
            f"{info.batch_size}: pass ({info.batch_size}, prompt length) token ids."
        )
    prompt_len = input_ids.shape[1]
    if prompt_len < 1 or prompt_len + max_new_tokens > info.max_cache_len:
        raise InputError(
            f"a prompt of {prompt_len} tokens plus {max_new_tokens} new ones does not fit the bundle's "
            f"cache of {info.max_cache_len} tokens; shorten them, or export with a larger --max-cache-len."
        )
    eos = info.eos_token_ids if eos_token_id is None else [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)
    pad = info.pad_token_id if info.pad_token_id is not None else (eos[0] if eos else 0)
    sampling = Sampling(do_sample, temperature, top_k, top_p, seed)
    dev = module.device
    tokens = input_ids.to(dev)
    done = torch.zeros(tokens.shape[0], dtype=torch.bool, device=dev)
    with torch.no_grad():
        logits = module.run_graph("prefill", input_ids=tokens, cache_position=torch.arange(prompt_len, device=dev))
        for step in range(max_new_tokens):
            nxt = sampling.next_token(logits[:, -1, :])
            nxt = torch.where(done, torch.full_like(nxt, pad), nxt)
            tokens = torch.cat([tokens, nxt[:, None]], dim=1)
            if eos:
                done = done | torch.isin(nxt, torch.tensor(eos, device=dev))
                if bool(done.all()):
                    break
            if step + 1 < max_new_tokens:
                position = torch.tensor([prompt_len + step], device=dev)
                logits = module.run_graph("decode", input_ids=nxt[:, None], cache_position=position)
    return tokens
