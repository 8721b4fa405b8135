"""transformers' caches as a loaded bundle returns them, without transformers.

A model's output may hold a cache (`out.past_key_values`): a `DynamicCache`, `StaticCache`,
`EncoderDecoderCache` or a model's own subclass (`MiniMaxCache`), whose `layers` are of
many classes: key/value layers (dynamic, sliding window, static, quantized), linear attention
layers (`conv_states[i]`, `recurrent_states[i]`: Mamba, Qwen3-Next, the other hybrids), layers
holding both, and models' own (DeepSeek-V4's compressor states).

`cache_capture.from_library` turns such a cache into aotc's containers, which keep what the
eager objects expose and are pytree nodes with a JSON context:

- `CacheLayer`: the eager layer's class name (`type_name`); each public attribute that
  holds tensors (`keys`, `values`, `conv_states`, `compressed_kv`, ...: a tensor, or a
  dict or list of them) as a pytree child; each plain setting (`sliding_window`,
  `is_initialized`, `conv_kernel_size`: numbers, strings, None, or dicts of them) in the
  context. All read by attribute, as on the eager layer. A layer whose class has its own
  `get_seq_length` (a model's: UnlimitedOcr's counts its prefix too) keeps what it gave at
  capture as the setting `get_seq_length`.
- `KVCache`: the cache's class name, `layers`, and the cache's own tensors and settings
  (`MiniMaxCache.linear_cache`); `len()`, `cache[i] -> (keys, values)`,
  `get_seq_length()` (as transformers computes it), `to_legacy_cache()`.
- `EncoderDecoderKVCache`: `self_attention_cache`, `cross_attention_cache`.

A setting that depends on the input's size (a symbolic int at capture, e.g. a sliding
window layer's `cumulative_length` under a dynamic sequence length) cannot be a constant
of the bundle: it is left out and reading it raises AttributeError saying so, rather
than returning the example's value.

Bundles written before layers kept their class (context None): a `DynamicCache`'s key/values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import torch

from aotc._torch_compat import pytree

SCALARS = (bool, int, float, str, type(None))  # a setting's values
# the setting holding what a layer's own get_seq_length gave at capture (no attribute shadows
# it: the method is found first)
OWN_SEQ_LENGTH = "get_seq_length"


# ----------------------------------------------------------------------- containers


@dataclass(frozen=True)
class _TensorsDevice:
    """A setting that was a torch.device (DeepSeek-V3.2-style indexers' `indexer_device`):
    read as the device the object's tensors are on, which follows the loaded module."""


TENSORS_DEVICE = _TensorsDevice()


class _Attributes:
    """An eager object's class name, tensors and settings, read by attribute."""

    def __init__(self, type_name: str, tensors: dict[str, Any], settings: dict[str, Any],
                 symbolic: Iterable[str] = ()):
        self._type_name, self._tensors, self._settings = type_name, dict(tensors), dict(settings)
        self._symbolic = tuple(symbolic)

    @property
    def type_name(self) -> str:
        return self._type_name

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        if self._settings.get(name) is TENSORS_DEVICE:
            leaves = [t for t in pytree.tree_leaves(self._tensors) if isinstance(t, torch.Tensor)]
            if not leaves:
                raise AttributeError(f"'{self._type_name}.{name}' is the device of its tensors, and it holds none")
            return leaves[0].device
        for found in (self._tensors, self._settings):
            if name in found:
                return found[name]
        if name in self._symbolic:
            raise AttributeError(
                f"'{self._type_name}.{name}' depended on the input's size when this bundle was captured, so the "
                "bundle does not return it; export with a fixed size to keep it")
        raise AttributeError(f"'{self._type_name}' object has no attribute '{name}'")

    def _has(self, name: str) -> bool:
        return name in self._tensors or name in self._settings


class CacheLayer(_Attributes):
    """One layer of a cache: see the module doc."""

    def get_seq_length(self) -> int:
        """As transformers' layers compute it: a sliding window or static layer counts the
        tokens seen (`cumulative_length`), a dynamic one its keys' length; a layer of a class
        with its own rule, what that gave at capture."""
        if OWN_SEQ_LENGTH in self._settings:
            return self._settings[OWN_SEQ_LENGTH]
        if OWN_SEQ_LENGTH in self._symbolic:
            raise AttributeError(f"the get_seq_length of a {self._type_name} layer (its class's own) depended on the "
                             "input's size when this bundle was captured, so the bundle does not return it; export "
                             "with a fixed size to keep it")
        if not self._has("keys"):
            raise ValueError(f"a {self._type_name} layer does not track a sequence length")
        if self._has("cumulative_length") or "cumulative_length" in self._symbolic:
            return self.cumulative_length if self._settings.get("is_initialized", True) else 0
        keys = self.keys
        return 0 if keys is None or keys.numel() == 0 else keys.shape[-2]

    def _counts_tokens(self) -> bool:  # transformers' DummyLayer holds keys=None, yet counts nothing
        return self._has("keys") and self._type_name != "DummyLayer"

    def __repr__(self) -> str:
        return f"{self._type_name}({', '.join(self._tensors)})"


class KVCache(_Attributes):
    """A transformers `Cache` (DynamicCache, StaticCache, a model's own): see the module doc."""

    def __init__(self, layers: Iterable[CacheLayer], type_name: str = "DynamicCache",
                 tensors: dict[str, Any] | None = None, settings: dict[str, Any] | None = None,
                 symbolic: Iterable[str] = (), length: int | None = None):
        super().__init__(type_name, tensors or {}, settings or {}, symbolic)
        self.layers = list(layers)
        self._length = len(self.layers) if length is None else length

    def __len__(self) -> int:
        return self._length  # the eager cache's len(): a model's own cache may count more than its layers

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        layer = self.layers[i]
        return layer.keys, layer.values

    def __iter__(self):
        return (self[i] for i in range(len(self.layers)))

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """As transformers' `Cache.get_seq_length`: a layer that counts no tokens (linear
        attention, a DummyLayer) asked for by default stands for the first that does."""
        if layer_idx >= len(self.layers):
            return 0
        if not self.layers[layer_idx]._counts_tokens():
            if layer_idx != 0:
                raise ValueError(f"layer {layer_idx} is a {self.layers[layer_idx].type_name} layer, which does not "
                                 "track a sequence length")
            with_keys = [i for i, layer in enumerate(self.layers) if layer._counts_tokens()]
            if not with_keys:
                raise ValueError("get_seq_length needs an attention layer, and this cache holds linear attention "
                                 "layers only")
            layer_idx = with_keys[0]
        return self.layers[layer_idx].get_seq_length()

    def to_legacy_cache(self) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
        return tuple(self)

    def __repr__(self) -> str:
        return f"{self._type_name}({len(self)} layers)"


class EncoderDecoderKVCache:
    """A transformers `EncoderDecoderCache`: the decoder's self-attention cache and the
    cross-attention cache over the encoder's output."""

    type_name = "EncoderDecoderCache"

    def __init__(self, self_attention_cache: KVCache, cross_attention_cache: KVCache):
        self.self_attention_cache = self_attention_cache
        self.cross_attention_cache = cross_attention_cache

    def __len__(self) -> int:
        return len(self.self_attention_cache)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, ...]:
        return (*self.self_attention_cache[i], *self.cross_attention_cache[i])

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.self_attention_cache.get_seq_length(layer_idx)

    def to_legacy_cache(self) -> tuple[tuple[torch.Tensor, ...], ...]:
        return tuple(self)

    def __repr__(self) -> str:
        return f"EncoderDecoderKVCache({len(self)} layers)"


CACHE_CONTAINERS = (CacheLayer, KVCache, EncoderDecoderKVCache)


# ----------------------------------------------------------------------- pytree nodes


class _FrozenDict(tuple):
    """A dict setting inside a treespec's context, which is compared and hashed: its pairs."""


def _frozen(value: Any) -> Any:
    return _FrozenDict(value.items()) if isinstance(value, dict) else value


def _check_name(name: Any, what: str) -> str:
    if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
        raise ValueError(f"{what} must be a public identifier, found {name!r}")
    return name


def _dump_setting(value: Any) -> Any:
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if value is TENSORS_DEVICE:
        return {"device": "tensors"}
    return {"items": [[k, v] for k, v in value]} if isinstance(value, _FrozenDict) else value


def _load_setting(dumped: Any) -> Any:
    if dumped == {"device": "tensors"}:
        return TENSORS_DEVICE
    if isinstance(dumped, dict) and set(dumped) == {"dtype"}:
        dtype = getattr(torch, dumped["dtype"], None) if isinstance(dumped["dtype"], str) else None
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"a cache setting's dtype is a torch dtype's name, found {dumped['dtype']!r}")
        return dtype
    if isinstance(dumped, dict):
        items = dumped.get("items")
        if set(dumped) != {"items"} or not isinstance(items, list) or not all(
                isinstance(p, list) and len(p) == 2 and isinstance(p[0], (int, str)) and isinstance(p[1], SCALARS)
                for p in items):
            raise ValueError("a cache setting that is a dict is {'items': [[key, value], ...]}")
        return _FrozenDict((k, v) for k, v in items)
    if not isinstance(dumped, SCALARS):
        raise ValueError(f"a cache setting is a number, string, None, a dtype or a dict of them, found {dumped!r}")
    return dumped


def _attributes_context(obj: _Attributes) -> tuple:
    settings = tuple((k, _frozen(v)) for k, v in obj._settings.items())
    return obj._type_name, tuple(obj._tensors), settings, obj._symbolic


def _thawed(settings: tuple) -> dict[str, Any]:
    return {k: dict(v) if isinstance(v, _FrozenDict) else v for k, v in settings}


def _dump_attributes(context) -> list:
    type_name, tensor_names, settings, symbolic = context[:4]
    return [type_name, list(tensor_names), [[k, _dump_setting(v)] for k, v in settings], list(symbolic)]


def _load_attributes(dumped, what: str) -> tuple:
    if not isinstance(dumped, list) or len(dumped) != 4 or not all(isinstance(x, list) for x in dumped[1:]):
        raise ValueError(f"a {what} context is [type name, tensor names, settings, symbolic names]")
    type_name = _check_name(dumped[0], f"a {what}'s type name")
    tensor_names = tuple(_check_name(n, f"a {what}'s tensor name") for n in dumped[1])
    settings = []
    for pair in dumped[2]:
        if not isinstance(pair, list) or len(pair) != 2:
            raise ValueError(f"a {what}'s settings are [name, value] pairs")
        settings.append((_check_name(pair[0], f"a {what}'s setting name"), _load_setting(pair[1])))
    symbolic = tuple(_check_name(n, f"a {what}'s symbolic name") for n in dumped[3])
    return type_name, tensor_names, tuple(settings), symbolic


def _layer_flatten(layer: CacheLayer):
    return list(layer._tensors.values()), _attributes_context(layer)


def _layer_unflatten(values, context) -> CacheLayer:
    if context is None:  # written before layers kept their class: keys and values
        return CacheLayer("DynamicLayer", dict(zip(("keys", "values"), values)), {})
    type_name, tensor_names, settings, symbolic = context
    return CacheLayer(type_name, dict(zip(tensor_names, values)), _thawed(settings), symbolic)


def _layer_load(dumped):
    return None if dumped is None else _load_attributes(dumped, "cache layer")


def _cache_flatten(cache: KVCache):
    # the layers, then the cache's own tensors; the context says how many layers
    return [*cache.layers, *cache._tensors.values()], (*_attributes_context(cache), len(cache.layers), len(cache))


def _cache_unflatten(values, context) -> KVCache:
    if context is None:  # written before caches kept their class
        return KVCache(values)
    type_name, tensor_names, settings, symbolic, n, length = context
    return KVCache(values[:n], type_name, dict(zip(tensor_names, values[n:])), _thawed(settings), symbolic, length)


def _cache_dump(context) -> list:
    return [*_dump_attributes(context), *context[4:]]


def _cache_load(dumped):
    if dumped is None:
        return None
    if not isinstance(dumped, list) or len(dumped) != 6 or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in dumped[4:]):
        raise ValueError("a cache context is [type name, tensor names, settings, symbolic names, layer count, length]")
    return (*_load_attributes(dumped[:4], "cache"), dumped[4], dumped[5])


def _keyed(obj: _Attributes, children: list) -> list:
    names = list(obj._tensors)
    return [(pytree.GetAttrKey(n), c) for n, c in zip(names, children[len(children) - len(names):])]


def _no_context(dumped) -> None:
    if dumped is not None:
        raise ValueError("this node has no context")


def _register() -> None:
    if CacheLayer in pytree.SUPPORTED_NODES:
        return
    pytree.register_pytree_node(
        CacheLayer, _layer_flatten, _layer_unflatten, serialized_type_name="aotc.CacheLayer",
        to_dumpable_context=lambda c: None if c is None else _dump_attributes(c), from_dumpable_context=_layer_load,
        flatten_with_keys_fn=lambda c: (_keyed(c, list(c._tensors.values())), _layer_flatten(c)[1]),
    )
    pytree.register_pytree_node(
        KVCache, _cache_flatten, _cache_unflatten, serialized_type_name="aotc.KVCache",
        to_dumpable_context=lambda c: None if c is None else _cache_dump(c), from_dumpable_context=_cache_load,
        flatten_with_keys_fn=lambda c: (
            [(pytree.SequenceKey(i), x) for i, x in enumerate(c.layers)] + _keyed(c, _cache_flatten(c)[0]),
            _cache_flatten(c)[1]),
    )
    pytree.register_pytree_node(
        EncoderDecoderKVCache, lambda c: ([c.self_attention_cache, c.cross_attention_cache], None),
        lambda v, _: EncoderDecoderKVCache(*v), serialized_type_name="aotc.EncoderDecoderKVCache",
        to_dumpable_context=lambda _: None, from_dumpable_context=_no_context,
        flatten_with_keys_fn=lambda c: ([(pytree.GetAttrKey("self_attention_cache"), c.self_attention_cache),
                                         (pytree.GetAttrKey("cross_attention_cache"), c.cross_attention_cache)], None),
    )


_register()
