"""Model outputs as plain data: what a bundle returns in place of library objects.

A bundle's outputs are nested tuples, lists and dicts of tensors, so that loading one
never needs the library that produced them. Hugging Face objects are converted at capture
(and in every eager run aotc compares with) by `plain_outputs`:

- a `ModelOutput` becomes a dict with the same keys, in the same order (its fields that
  are None are left out, as the ModelOutput itself leaves them out of its keys);
- a `DynamicCache` or `StaticCache` becomes a list with one `[keys, values]` pair per
  layer, each of shape (batch, kv_heads, cached_length, head_dim);
- an `EncoderDecoderCache` becomes `{"self_attention": [...], "cross_attention": [...]}`,
  each a list of pairs as above.

transformers is never imported here: a value is recognised only when the module that
defines its class is already loaded.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from aotc.errors import CaptureError


def _transformers_class(name: str, module: str) -> type | None:
    mod = sys.modules.get(module)
    return getattr(mod, name, None) if mod is not None else None


def _cache_layers(cache: Any) -> list[list[torch.Tensor]]:
    pairs = []
    for i, layer in enumerate(getattr(cache, "layers", [])):
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if not isinstance(keys, torch.Tensor) or not isinstance(values, torch.Tensor):
            raise CaptureError(
                f"layer {i} of the {type(cache).__name__} in the model's output is a "
                f"{type(layer).__name__} without key and value tensors; aotc returns caches as "
                "[keys, values] per layer. Pass use_cache=False, or drop the cache from the output."
            )
        pairs.append([keys, values])
    return pairs


def plain_outputs(value: Any) -> Any:
    """`value` with every library object replaced by plain containers (see module doc)."""
    if isinstance(value, torch.Tensor) or value is None or isinstance(value, (int, float, bool, str)):
        return value
    model_output = _transformers_class("ModelOutput", "transformers.utils.generic")
    if model_output is not None and isinstance(value, model_output):
        return {k: plain_outputs(v) for k, v in value.items()}
    cache = _transformers_class("Cache", "transformers.cache_utils")
    if cache is not None and isinstance(value, cache):
        encoder_decoder = _transformers_class("EncoderDecoderCache", "transformers.cache_utils")
        if encoder_decoder is not None and isinstance(value, encoder_decoder):
            return {
                "self_attention": _cache_layers(value.self_attention_cache),
                "cross_attention": _cache_layers(value.cross_attention_cache),
            }
        return _cache_layers(value)
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(plain_outputs(v) for v in value)
    if isinstance(value, list):
        return [plain_outputs(v) for v in value]
    if isinstance(value, dict):
        return {k: plain_outputs(v) for k, v in value.items()}
    return value
