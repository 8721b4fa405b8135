"""A small traceable wrapper subclass and models that use it (tests/test_subclasses.py).

`PairTensor` holds two tensors and runs every op on both, like torch's own TwoTensor
test class; its flatten context is plain data (a label and a dtype), so a bundle can
store it. `OpaquePair` differs only in holding an object in its context, which aotc
must refuse to store. Imported by name (`subclass_models:PairTensor`) when a bundle is
loaded with it trusted.
"""

from __future__ import annotations

import torch
import torch.utils._pytree as pytree
from torch import nn
from torch.utils._python_dispatch import return_and_correct_aliasing


class PairTensor(torch.Tensor):
    @staticmethod
    def __new__(cls, a, b, label=("pair", 1)):
        return torch.Tensor._make_wrapper_subclass(
            cls, a.shape, strides=a.stride(), storage_offset=a.storage_offset(), dtype=a.dtype,
            device=a.device, layout=a.layout, requires_grad=a.requires_grad,
        )

    def __init__(self, a, b, label=("pair", 1)):
        self.a, self.b, self.label = a, b, label

    def __repr__(self):
        return f"{type(self).__name__}({self.a!r}, {self.b!r})"

    def __tensor_flatten__(self):
        return ["a", "b"], {"label": self.label, "dtype": self.a.dtype}

    @classmethod
    def __tensor_unflatten__(cls, inner, context, outer_size, outer_stride):
        return cls(inner["a"], inner["b"], context["label"])

    @classmethod
    def __torch_dispatch__(cls, func, types, args, kwargs=None):
        kwargs = kwargs or {}
        label = next(x.label for x in pytree.tree_leaves((args, kwargs)) if isinstance(x, cls))
        out_a = func(*pytree.tree_map_only(cls, lambda x: x.a, (args, kwargs))[0],
                     **pytree.tree_map_only(cls, lambda x: x.a, kwargs))
        out_b = func(*pytree.tree_map_only(cls, lambda x: x.b, (args, kwargs))[0],
                     **pytree.tree_map_only(cls, lambda x: x.b, kwargs))
        flat_a, spec = pytree.tree_flatten(out_a)
        flat_b = pytree.tree_leaves(out_b)
        out = pytree.tree_unflatten(
            [cls(x, y, label) if isinstance(x, torch.Tensor) else x for x, y in zip(flat_a, flat_b)], spec
        )
        return return_and_correct_aliasing(func, args, kwargs, out)


class TransposesPair(nn.Module):
    """Changes a subclass input's strides in place: torch 2.13 refuses this, 2.14 traces it."""

    def forward(self, x, y):
        y.t_()
        return x + y


class Marker:
    """Not plain data: a flatten context holding one cannot be stored without pickling."""


class OpaquePair(PairTensor):
    def __tensor_flatten__(self):
        return ["a", "b"], {"marker": Marker()}

    @classmethod
    def __tensor_unflatten__(cls, inner, context, outer_size, outer_stride):
        return cls(inner["a"], inner["b"])


def pair(*shape, seed=0, requires_grad=False, cls=PairTensor):
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(*shape, generator=g), torch.randn(*shape, generator=g)
    return cls(a.requires_grad_(requires_grad), b.requires_grad_(requires_grad), ("pair", seed))


class PairLinear(nn.Module):
    """Subclass parameters, a subclass input and a subclass output next to plain ones."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(pair(4, 3, seed=1))
        self.bias = nn.Parameter(pair(3, seed=2))

    def forward(self, x, y):
        h = x @ self.weight + self.bias + y
        return h.relu(), x.sum(dim=1)


def pair_inputs():
    g = torch.Generator().manual_seed(3)
    return torch.randn(2, 4, generator=g), pair(2, 3, seed=4)


class NestedScale(nn.Module):
    """A parameter that is a pair of pairs (four plain tensors), and a plain buffer."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(PairTensor(pair(3, seed=5), pair(3, seed=6)))
        self.register_buffer("offset", torch.arange(3.0))

    def forward(self, x):
        return (x * self.scale + self.offset).sum(dim=0)


class MutatesPairs(nn.Module):
    """Changes a subclass input and a subclass buffer in place."""

    def __init__(self):
        super().__init__()
        self.register_buffer("count", pair(3, seed=11))

    def forward(self, x, y):
        y.add_(1.0)
        self.count.mul_(2.0)
        return x + y + self.count
