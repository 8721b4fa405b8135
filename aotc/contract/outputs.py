"""Model outputs as a loaded bundle returns them: the eager model's access paths, no library.

A bundle must load without the library (or the user's code) that defined the model's
output classes, yet the caller's code written for the eager model must run unchanged on
the loaded module. At capture (and in every eager run aotc compares with) `plain_outputs`
replaces each library object by one of aotc's own containers, which keep the access
paths and are pytree nodes with a JSON-serialisable context, so `signature.json`'s
`out_spec` records them and the runtime rebuilds them:

| eager output | loaded module returns |
| --- | --- |
| tensor, tuple, list, dict, None, number | the same |
| `collections.namedtuple` / `typing.NamedTuple` | `NamedTupleOutput`: a tuple with the same type name and fields, read by attribute, position, `_fields`, `_asdict()` |
| transformers `ModelOutput` | `aotc.contract.outputs.ModelOutput`: `out.logits`, `out["logits"]`, `out[0]`, `out[1:]`, `to_tuple()`, `keys()`, iteration in field order; `None` fields are not keys and read as `None` |
| `DynamicCache`, `StaticCache`, a model's own cache | `KVCache`: `layers[i]` with the eager layer's tensors and settings (`.keys`, `.values`, `.conv_states[0]`, `.sliding_window`, ...), `len()`, `cache[i] -> (keys, values)`, `get_seq_length()`, `to_legacy_cache()` (aotc.contract.caches) |
| `EncoderDecoderCache` | `EncoderDecoderKVCache`: `self_attention_cache`, `cross_attention_cache` (each a `KVCache`), `len()`, `get_seq_length()` |
| diffusers `BaseOutput` (`UNet2DConditionOutput`, `DecoderOutput`, ...) | `ModelOutput`, as transformers' |
| `torch.return_types`, dataclasses registered with pytree, diffusers' Gaussian | see aotc.contract.more_outputs |

`isinstance` with the eager class holds only for `torch.return_types` (torch's own class);
every other container is aotc's, with the eager class's name (`type_name`) and fields.

transformers and diffusers are never imported here: a value is recognised only when the
module that defines its class is already loaded.
"""

from __future__ import annotations

import keyword
import sys
from collections import OrderedDict
from typing import Any, Iterable

import torch

from aotc._torch_compat import pytree
from aotc.contract import cache_capture
from aotc.contract.caches import CACHE_CONTAINERS, CacheLayer, EncoderDecoderKVCache, KVCache  # noqa: F401 (re-exported)
from aotc.contract.more_outputs import PLAIN_CONTAINERS, library_output


def _transformers_class(name: str, module: str) -> type | None:
    mod = sys.modules.get(module)
    return getattr(mod, name, None) if mod is not None else None


def _names(value: Any, what: str) -> tuple[str, ...]:
    """A dumped context's list of identifiers, checked (a bundle's JSON is untrusted)."""
    if not isinstance(value, list) or not all(isinstance(v, str) and v.isidentifier() for v in value):
        raise ValueError(f"{what} must be a list of identifiers")
    return tuple(value)


# ----------------------------------------------------------------------- ModelOutput


_OLD_CACHE_NAMES = ("past_key_values", "cache_params")


class ModelOutput(OrderedDict):
    """A transformers `ModelOutput` without transformers: an ordered dict of the fields
    that are not None, readable as attributes, by key, by position and as a tuple.

    `type_name` is the eager class's name (e.g. `CausalLMOutputWithPast`); `fields` are all
    of its fields, so a field that was None reads as None rather than as a missing
    attribute, as on the eager object.
    """

    def __init__(self, type_name: str, fields: Iterable[str], items: Iterable[tuple[str, Any]] = ()):
        object.__setattr__(self, "_type_name", type_name)
        object.__setattr__(self, "_fields", tuple(fields))
        super().__init__(items)

    @property
    def type_name(self) -> str:
        return self._type_name

    def _field(self, name: str) -> str:
        # transformers 5.24 renamed the cache field past_key_values (cache_params for state
        # space models) to `cache`; its ModelOutput still answers to the old names
        if name in _OLD_CACHE_NAMES and name not in self._fields and "cache" in self._fields:
            return "cache"
        return name

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        name = self._field(name)
        if name in self:
            return OrderedDict.__getitem__(self, name)
        if name in self._fields:
            return None
        raise AttributeError(f"'{self._type_name}' object has no attribute '{name}'")

    def __getitem__(self, key):
        if isinstance(key, str):
            return OrderedDict.__getitem__(self, self._field(key))
        return self.to_tuple()[key]

    def __contains__(self, key) -> bool:
        return OrderedDict.__contains__(self, self._field(key) if isinstance(key, str) else key)

    def get(self, key, default=None):
        return OrderedDict.get(self, self._field(key) if isinstance(key, str) else key, default)

    def __setitem__(self, key, value):
        OrderedDict.__setitem__(self, self._field(key) if isinstance(key, str) else key, value)

    def __setattr__(self, name: str, value):
        name = self._field(name) if not name.startswith("_") else name
        if name in self._fields:
            if value is not None:
                OrderedDict.__setitem__(self, name, value)
            return
        object.__setattr__(self, name, value)

    def _refuse(self, *args, **kwargs):
        raise TypeError(f"a {self._type_name} does not allow removing or merging fields, as on the eager model")

    __delitem__ = setdefault = pop = popitem = update = _refuse

    def to_tuple(self) -> tuple:
        """The values of the fields that are not None, in field order."""
        return tuple(self.values())

    def __repr__(self) -> str:
        return f"{self._type_name}({', '.join(f'{k}={v!r}' for k, v in self.items())})"

    def __reduce__(self):
        return ModelOutput, (self._type_name, self._fields, list(self.items()))


def _model_output_flatten(out: ModelOutput):
    return list(out.values()), (out._type_name, out._fields, tuple(out.keys()))


def _model_output_unflatten(values, context) -> ModelOutput:
    type_name, fields, keys = context
    return ModelOutput(type_name, fields, zip(keys, values))


def _model_output_dump(context) -> list:
    type_name, fields, keys = context
    return [type_name, list(fields), list(keys)]


def _model_output_load(dumped) -> tuple:
    if not isinstance(dumped, list) or len(dumped) != 3 or not isinstance(dumped[0], str):
        raise ValueError("a ModelOutput context is [type name, fields, keys]")
    fields, keys = _names(dumped[1], "ModelOutput fields"), _names(dumped[2], "ModelOutput keys")
    if not set(keys) <= set(fields):
        raise ValueError("a ModelOutput's keys must be among its fields")
    return dumped[0], fields, keys


# ----------------------------------------------------------------------- namedtuples


class NamedTupleOutput(tuple):
    """A namedtuple without its class: a tuple that keeps the type name and the fields,
    read as attributes (`out.a`), by position, with `_fields`, `_asdict()` and
    `_replace()` as on the eager namedtuple."""

    def __new__(cls, type_name: str, fields: Iterable[str], values: Iterable[Any]):
        self = super().__new__(cls, values)
        self._type_name, self._field_names = type_name, tuple(fields)
        return self

    def __getattr__(self, name: str):
        if not name.startswith("_") and name in self._field_names:
            return self[self._field_names.index(name)]
        raise AttributeError(f"'{self._type_name}' object has no attribute '{name}'")

    @property
    def _fields(self) -> tuple[str, ...]:
        return self._field_names

    def _asdict(self) -> dict[str, Any]:
        return dict(zip(self._field_names, self))

    def _replace(self, **changes) -> "NamedTupleOutput":
        unknown = set(changes) - set(self._field_names)
        if unknown:
            raise ValueError(f"Got unexpected field names: {sorted(unknown)}")
        return NamedTupleOutput(self._type_name, self._field_names, (changes.get(f, v) for f, v in self._asdict().items()))

    def __repr__(self) -> str:
        return f"{self._type_name}({', '.join(f'{f}={v!r}' for f, v in zip(self._field_names, self))})"

    def __reduce__(self):
        return NamedTupleOutput, (self._type_name, self._field_names, tuple(self))


def _namedtuple_load(dumped) -> tuple:
    if not isinstance(dumped, list) or len(dumped) != 2 or not isinstance(dumped[0], str):
        raise ValueError("a namedtuple context is [type name, fields]")
    type_name, fields = dumped[0], _names(dumped[1], "namedtuple fields")
    if not type_name.isidentifier() or keyword.iskeyword(type_name) or any(keyword.iskeyword(f) for f in fields):
        raise ValueError("a namedtuple's type name and fields must be identifiers")
    return type_name, fields


def _register() -> None:
    """aotc's output containers as pytree nodes, with names that signature.json records."""
    registered = pytree.SUPPORTED_NODES
    if ModelOutput in registered:
        return
    pytree.register_pytree_node(
        ModelOutput, _model_output_flatten, _model_output_unflatten, serialized_type_name="aotc.ModelOutput",
        to_dumpable_context=_model_output_dump, from_dumpable_context=_model_output_load,
        flatten_with_keys_fn=lambda o: ([(pytree.MappingKey(k), v) for k, v in o.items()], _model_output_flatten(o)[1]),
    )
    pytree.register_pytree_node(
        NamedTupleOutput, lambda t: (list(t), (t._type_name, t._field_names)),
        lambda values, ctx: NamedTupleOutput(*ctx, values), serialized_type_name="aotc.NamedTuple",
        to_dumpable_context=lambda ctx: [ctx[0], list(ctx[1])], from_dumpable_context=_namedtuple_load,
        flatten_with_keys_fn=lambda t: ([(pytree.GetAttrKey(f), v) for f, v in zip(t._field_names, t)],
                                        (t._type_name, t._field_names)),
    )


_register()


# ----------------------------------------------------------------------- capture side


def _is_namedtuple(value: Any) -> bool:
    return isinstance(value, tuple) and isinstance(getattr(type(value), "_fields", None), tuple)


def plain_outputs(value: Any) -> Any:
    """`value` with every library object replaced by aotc's containers (see module doc)."""
    if isinstance(value, torch.Tensor) or value is None or isinstance(value, (int, float, bool, str)):
        return value
    if isinstance(value, (ModelOutput, NamedTupleOutput, *CACHE_CONTAINERS, *PLAIN_CONTAINERS)):
        return value
    model_output = _transformers_class("ModelOutput", "transformers.utils.generic")
    base_output = _transformers_class("BaseOutput", "diffusers.utils.outputs")  # diffusers' ModelOutput
    if any(cls is not None and isinstance(value, cls) for cls in (model_output, base_output)):
        fields = [f.name for f in getattr(type(value), "__dataclass_fields__", {}).values()] or list(value.keys())
        return ModelOutput(type(value).__name__, fields, ((k, plain_outputs(v)) for k, v in value.items()))
    cache = cache_capture.from_library(value)
    if cache is not None:
        return cache
    library = library_output(value, plain_outputs)  # torch.return_types, dataclasses, diffusers' Gaussian
    if library is not None:
        return library
    if _is_namedtuple(value):
        return NamedTupleOutput(type(value).__name__, tuple(type(value)._fields), (plain_outputs(v) for v in value))
    if isinstance(value, tuple):
        return tuple(plain_outputs(v) for v in value)
    if isinstance(value, list):
        return [plain_outputs(v) for v in value]
    if isinstance(value, dict):
        return {k: plain_outputs(v) for k, v in value.items()}
    return value


def load_spec(text: str) -> pytree.TreeSpec:
    """A pytree spec from a bundle's JSON. Every spec is read through here: this module
    registers the output containers a spec may name, so importing it is part of reading."""
    return pytree.treespec_loads(text)
