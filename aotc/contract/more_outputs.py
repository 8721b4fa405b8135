"""More output containers a loaded bundle rebuilds without the code that defined them.

aotc.contract.outputs holds the rule and the transformers containers; this module the rest:

| eager output | loaded module returns |
| --- | --- |
| `torch.return_types.*` (topk, sort, max(dim), ...) | the same class: torch's own (`out.values`, `out[0]`, `isinstance` holds) |
| a dataclass registered with pytree (`torch.export.register_dataclass`) | a dataclass made at load with the same name and fields: attributes, `dataclasses.fields`, `asdict`, `replace`; `isinstance` with the user's class does not hold |
| diffusers' `DiagonalGaussianDistribution` (`AutoencoderKLOutput.latent_dist`) | `GaussianOutput`: `.parameters`, `.mean`, `.logvar`, `.std`, `.var`, `.sample(generator)`, `.mode()`, `.kl()`, `.nll()`, computed as diffusers does |

(diffusers' `BaseOutput` subclasses come back as aotc's `ModelOutput`, as transformers' do.)
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
from typing import Any

import torch

from aotc._torch_compat import pytree

# ----------------------------------------------------------------------- torch.return_types


class ReturnTypeOutput:
    """A `torch.return_types` value while aotc handles it: pytree records its class's
    name; `unflatten_outputs` gives torch's own class back to the caller."""

    __slots__ = ("name", "values")

    def __init__(self, name: str, values: list):
        self.name, self.values = name, list(values)


def return_type_class(name: str) -> type:
    cls = getattr(torch.return_types, name, None) if isinstance(name, str) and name.isidentifier() else None
    if cls is None or not pytree.is_structseq_class(cls):
        raise ValueError(f"{name!r} is not one of torch.return_types")
    return cls


# ----------------------------------------------------------------------- dataclasses


class DataclassOutput:
    """A dataclass registered with pytree while aotc handles it: its class's name and
    fields; `unflatten_outputs` gives the caller a dataclass of that name and fields."""

    __slots__ = ("type_name", "fields", "values")

    def __init__(self, type_name: str, fields: tuple[str, ...], values: list):
        self.type_name, self.fields, self.values = type_name, tuple(fields), list(values)


@functools.cache
def made_dataclass(type_name: str, fields: tuple[str, ...]) -> type:
    """A dataclass with the eager class's name and fields, registered with pytree so that
    a loaded output flattens as the eager one did. Made from names only: nothing is imported."""
    cls = dataclasses.make_dataclass(type_name, list(fields))
    cls.__module__ = "aotc.outputs"
    pytree.register_pytree_node(
        cls, lambda o: ([getattr(o, f) for f in fields], None), lambda values, _: cls(*values),
        flatten_with_keys_fn=lambda o: ([(pytree.GetAttrKey(f), getattr(o, f)) for f in fields], None),
    )
    return cls


def _load_dataclass_context(dumped) -> tuple[str, tuple[str, ...]]:
    if (not isinstance(dumped, list) or len(dumped) != 2 or not isinstance(dumped[0], str)
            or not dumped[0].isidentifier() or not isinstance(dumped[1], list)
            or not all(isinstance(f, str) and f.isidentifier() for f in dumped[1])):
        raise ValueError("a dataclass output's context is [type name, [field names]]")
    return dumped[0], tuple(dumped[1])


# ----------------------------------------------------------------------- diffusers' Gaussian


class GaussianOutput:
    """diffusers' `DiagonalGaussianDistribution` (the `latent_dist` of AutoencoderKL's
    encode), rebuilt from its `parameters` as diffusers' __init__ computes it."""

    def __init__(self, parameters: torch.Tensor, deterministic: bool = False):
        self.parameters = parameters
        self.deterministic = deterministic
        self.mean, logvar = torch.chunk(parameters, 2, dim=1)
        self.logvar = torch.clamp(logvar, -30.0, 20.0)
        self.std = torch.exp(0.5 * self.logvar)
        self.var = torch.exp(self.logvar)
        if deterministic:
            self.var = self.std = torch.zeros_like(self.mean)

    def sample(self, generator: torch.Generator | None = None) -> torch.Tensor:
        noise = torch.randn(self.mean.shape, generator=generator, device=self.parameters.device,
                            dtype=self.parameters.dtype)
        return self.mean + self.std * noise

    def mode(self) -> torch.Tensor:
        return self.mean

    def kl(self, other: "GaussianOutput | None" = None) -> torch.Tensor:
        if self.deterministic:
            return torch.Tensor([0.0])
        if other is None:
            return 0.5 * torch.sum(torch.pow(self.mean, 2) + self.var - 1.0 - self.logvar, dim=[1, 2, 3])
        return 0.5 * torch.sum(torch.pow(self.mean - other.mean, 2) / other.var + self.var / other.var - 1.0
                               - self.logvar + other.logvar, dim=[1, 2, 3])

    def nll(self, sample: torch.Tensor, dims=(1, 2, 3)) -> torch.Tensor:
        if self.deterministic:
            return torch.Tensor([0.0])
        return 0.5 * torch.sum(math.log(2.0 * math.pi) + self.logvar + torch.pow(sample - self.mean, 2) / self.var,
                               dim=list(dims))

    def __repr__(self) -> str:
        return f"GaussianOutput(parameters of shape {tuple(self.parameters.shape)})"


def _load_flag(dumped) -> bool:
    if not isinstance(dumped, bool):
        raise ValueError("a Gaussian output's context is its 'deterministic' flag")
    return dumped


# ----------------------------------------------------------------------- registration


def _register() -> None:
    if ReturnTypeOutput in pytree.SUPPORTED_NODES:
        return
    pytree.register_pytree_node(
        ReturnTypeOutput, lambda r: (r.values, r.name), lambda values, name: ReturnTypeOutput(name, values),
        serialized_type_name="aotc.ReturnType", to_dumpable_context=lambda name: name,
        from_dumpable_context=lambda name: return_type_class(name).__name__,
        flatten_with_keys_fn=lambda r: ([(pytree.SequenceKey(i), v) for i, v in enumerate(r.values)], r.name),
    )
    pytree.register_pytree_node(
        DataclassOutput, lambda d: (d.values, (d.type_name, d.fields)),
        lambda values, ctx: DataclassOutput(*ctx, values), serialized_type_name="aotc.Dataclass",
        to_dumpable_context=lambda ctx: [ctx[0], list(ctx[1])], from_dumpable_context=_load_dataclass_context,
        flatten_with_keys_fn=lambda d: ([(pytree.GetAttrKey(f), v) for f, v in zip(d.fields, d.values)],
                                        (d.type_name, d.fields)),
    )
    pytree.register_pytree_node(
        GaussianOutput, lambda g: ([g.parameters], g.deterministic), lambda v, flag: GaussianOutput(v[0], flag),
        serialized_type_name="aotc.Gaussian", to_dumpable_context=lambda flag: flag,
        from_dumpable_context=_load_flag,
        flatten_with_keys_fn=lambda g: ([(pytree.GetAttrKey("parameters"), g.parameters)], g.deterministic),
    )


_register()


PLAIN_CONTAINERS = (ReturnTypeOutput, DataclassOutput, GaussianOutput)


def library_output(value: Any, plain) -> Any | None:
    """`value` as one of this module's containers (its children made plain by `plain`),
    or None when it is none of their kinds."""
    if pytree.is_structseq_instance(value) and getattr(torch.return_types, type(value).__name__, None) is type(value):
        return ReturnTypeOutput(type(value).__name__, [plain(v) for v in value])
    gaussian = _diffusers_gaussian()
    if gaussian is not None and isinstance(value, gaussian):
        return GaussianOutput(plain(value.parameters), bool(value.deterministic))
    if dataclasses.is_dataclass(value) and not isinstance(value, type) and type(value) in pytree.SUPPORTED_NODES:
        fields = tuple(f.name for f in dataclasses.fields(value))
        return DataclassOutput(type(value).__name__, fields, [plain(getattr(value, f)) for f in fields])
    return None


def _diffusers_gaussian() -> type | None:
    module = sys.modules.get("diffusers.models.autoencoders.vae")
    return getattr(module, "DiagonalGaussianDistribution", None) if module is not None else None


_LEAF = pytree.tree_flatten(0)[1]


def needs_finish(spec: pytree.TreeSpec) -> bool:
    """Whether an output spec holds containers `unflatten_outputs` turns into the caller's."""
    return spec.type in (ReturnTypeOutput, DataclassOutput) or any(needs_finish(c) for c in spec.children())


def unflatten_outputs(leaves: list, spec: pytree.TreeSpec) -> Any:
    """`pytree.tree_unflatten` for what a caller receives: torch.return_types as torch's
    own class, a dataclass output as a dataclass (made once per name and fields). Where
    `needs_finish(spec)` is False, `pytree.tree_unflatten` gives the same, faster."""
    values = iter(leaves)

    def build(s: pytree.TreeSpec):
        if s.is_leaf():
            return next(values)
        children = [build(c) for c in s.children()]
        if s.type is ReturnTypeOutput:
            return return_type_class(s.context)(children)
        if s.type is DataclassOutput:
            return made_dataclass(*s.context)(*children)
        return pytree.tree_unflatten(children, pytree.TreeSpec(s.type, s.context, [_LEAF] * len(children)))

    return build(spec)

