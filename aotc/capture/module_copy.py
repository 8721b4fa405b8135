"""A model's copy for eager runs beside the capture (export's checks, the references,
verify): `copy.deepcopy`, which refuses a tensor that is not a graph leaf. A model can
hold one as state cached from its last call under grad mode (RecurrentGemma's recurrent
and convolution states, after a user's own forward); the copy takes it detached.

And the user's model kept as it was through a trace: see `attributes_restored`."""

from __future__ import annotations

import contextlib
import copy
import inspect
from typing import Iterator

import torch

from aotc import _torch_compat as tc
from aotc._torch_compat import pytree


def copy_module(module: torch.nn.Module) -> torch.nn.Module:
    memo = {id(value): value.detach().clone() for m in module.modules() for value in vars(m).values()
            if isinstance(value, torch.Tensor) and not value.is_leaf}
    return copy.deepcopy(module, memo)


@contextlib.contextmanager
def attributes_restored(model: torch.nn.Module) -> Iterator[None]:
    """Tracing runs the user's forward on fake tensors. A forward that caches a tensor on
    first call (diffusers' rope embedders, plain objects held by a module: `self.freqs_cis =
    ...`) would leave the trace's fake tensors on the user's model, and the next copy or call
    of it fails. Every attribute that holds one after the trace gets its value from before;
    a functools.lru_cache on the model's classes that the trace added entries to is cleared
    (NucleusMoE's and QwenImage's `_compute_video_freqs`: it cannot drop single entries)."""
    holders = _holders(model)
    before = [(obj, dict(vars(obj))) for obj in holders]
    caches = [(f, f.cache_info().misses) for f in _lru_caches(holders)]
    try:
        yield
    finally:
        for obj, saved in before:
            for name, value in list(vars(obj).items()):
                if saved.get(name, _MISSING) is value or not _holds_traced(value):
                    continue
                if name in saved:
                    obj.__dict__[name] = saved[name]
                else:
                    del obj.__dict__[name]
        for cache, misses in caches:
            if cache.cache_info().misses != misses:
                cache.cache_clear()


def _lru_caches(holders: list[object]) -> list:
    """functools.lru_cache-wrapped functions defined on the holders' classes."""
    found = {}
    for cls in {type(obj) for obj in holders}:
        for klass in cls.__mro__:
            if klass.__module__.startswith(("torch.", "builtins")):
                continue
            for value in vars(klass).values():
                if callable(getattr(value, "cache_clear", None)) and callable(getattr(value, "cache_info", None)):
                    found[id(value)] = value
    return list(found.values())


_MISSING = object()


def _holders(model: torch.nn.Module, depth: int = 2) -> list[object]:
    """The model's modules, and the plain objects with attributes they hold (to `depth`)."""
    found: dict[int, object] = {id(m): m for m in model.modules()}
    layer = list(found.values())
    for _ in range(depth):
        inner = []
        for obj in layer:
            for value in vars(obj).values():
                if id(value) not in found and _plain_object(value):
                    found[id(value)] = value
                    inner.append(value)
        layer = inner
    return list(found.values())


def _plain_object(value: object) -> bool:
    return (hasattr(value, "__dict__") and not isinstance(value, (type, torch.Tensor, torch.nn.Module))
            and not inspect.isroutine(value) and not type(value).__module__.startswith(("torch", "builtins")))


def _holds_traced(value: object) -> bool:
    traced = (tc.FakeTensor, tc.FunctionalTensor)
    return any(isinstance(leaf, traced) for leaf in pytree.tree_leaves(value))
