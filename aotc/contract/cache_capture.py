"""Capture side of aotc.contract.caches: a transformers cache, as the model returned it while
torch traced it, turned into aotc's containers (their tensors, plain settings, and the
settings that were symbolic: sizes that follow the input's)."""

from __future__ import annotations

import sys
from typing import Any

import torch

from aotc._torch_compat import pytree
from aotc.contract.caches import OWN_SEQ_LENGTH, SCALARS, TENSORS_DEVICE, CacheLayer, EncoderDecoderKVCache, KVCache
from aotc.errors import CaptureError

_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)
# attributes of the eager objects that are not the model's results: where they live, and
# how they were built
_SKIPPED = {"device", "dtype", "layers", "layer_class_to_replicate"}


def _library_class(name: str) -> type | None:
    mod = sys.modules.get("transformers.cache_utils")
    return getattr(mod, name, None) if mod is not None else None


def _all_tensors(value: Any) -> bool:
    leaves = pytree.tree_leaves(value)
    return any(isinstance(x, torch.Tensor) for x in leaves) and all(isinstance(x, torch.Tensor) for x in leaves)


def _plain(value: Any) -> bool:
    if isinstance(value, (*SCALARS, torch.dtype)):  # a dtype: DeepSeek-V3.2-style indexers' indexer_dtype
        return True
    return isinstance(value, dict) and all(isinstance(k, (int, str)) and isinstance(v, SCALARS)
                                           for k, v in value.items())


def _symbolic(value: Any) -> bool:
    values = value.values() if isinstance(value, dict) else [value]
    return any(isinstance(v, _SYMBOLIC) for v in values)


def _own_seq_length(obj: Any) -> bool:
    """Whether `obj` is a cache layer whose class computes get_seq_length its own way, not
    as transformers' layers do (which CacheLayer.get_seq_length follows)."""
    mixin = _library_class("CacheLayerMixin")
    method = getattr(type(obj), "get_seq_length", None)
    return (mixin is not None and isinstance(obj, mixin) and method is not None
            and not method.__module__.startswith("transformers.cache_utils"))


def _split(obj: Any) -> tuple[str, dict[str, Any], dict[str, Any], list[str]]:
    """An eager object's class name, tensor attributes, plain settings and the settings
    that were symbolic at capture. Other attributes (configs, functions) are not results."""
    tensors, settings, symbolic = {}, {}, []
    for name, value in vars(obj).items():
        if name.startswith("_") or name in _SKIPPED or not name.isidentifier():
            continue
        if _symbolic(value):
            symbolic.append(name)
        elif _all_tensors(value) and isinstance(value, (torch.Tensor, dict, list, tuple)):
            tensors[name] = value
        elif isinstance(value, torch.device):
            settings[name] = TENSORS_DEVICE
        elif _plain(value):
            settings[name] = value
    if _own_seq_length(obj):  # a model's own rule (UnlimitedOcr: its prefix plus the window)
        value = obj.get_seq_length()
        if _symbolic(value):
            symbolic.append(OWN_SEQ_LENGTH)
        elif isinstance(value, int):
            settings[OWN_SEQ_LENGTH] = value
    return type(obj).__name__, tensors, settings, symbolic


def _cache(cache: Any) -> KVCache:
    layers = []
    for layer in getattr(cache, "layers", []):
        layers.append(CacheLayer(*_split(layer)))
    type_name, tensors, settings, symbolic = _split(cache)
    return KVCache(layers, type_name, tensors, settings, symbolic, len(cache))


def from_library(value: Any) -> KVCache | EncoderDecoderKVCache | None:
    """aotc's container for a transformers cache, or None if `value` is not one."""
    cache = _library_class("Cache")
    if cache is None or not isinstance(value, cache):
        return None
    encoder_decoder = _library_class("EncoderDecoderCache")
    if encoder_decoder is not None and isinstance(value, encoder_decoder):
        return EncoderDecoderKVCache(_cache(value.self_attention_cache), _cache(value.cross_attention_cache))
    if not hasattr(value, "layers"):
        raise CaptureError(f"the model's output holds a {type(value).__name__} without layers; aotc returns "
                           "transformers' caches layer by layer. Pass use_cache=False, or drop the cache from the output.")
    return _cache(value)
