"""Wrapper layers 1-3: check the call against the signature, dedupe, refuse bad aliasing.

Built once at load from metadata.json; on each call they cost a few comparisons per input.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from aotc.errors import InputError
from aotc.schema import Metadata, ProgramMeta, UserInput

_DTYPES = {str(d).removeprefix("torch."): d for d in vars(torch).values() if isinstance(d, torch.dtype)}


@dataclass(frozen=True)
class InputCheck:
    """What one flat user input must look like. `static` is set when no dim is dynamic."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    dynamic: dict[int, tuple[str, int, int | None]]
    static: torch.Size | None

    def check(self, value, device: torch.device, sizes: dict[str, tuple[int, str]]) -> None:
        if not isinstance(value, torch.Tensor):
            raise InputError(f"input '{self.name}' is a {type(value).__name__}; the bundle expects a tensor.")
        if value.dtype != self.dtype:
            raise InputError(
                f"input '{self.name}' has dtype {str(value.dtype).removeprefix('torch.')}; the bundle "
                f"expects {str(self.dtype).removeprefix('torch.')}. Convert it with .to({self.dtype})."
            )
        if value.device != device:
            raise InputError(
                f"input '{self.name}' is on {value.device}; the bundle was loaded for {device}. "
                f"Move it with .to('{device}')."
            )
        if self.static is not None:
            if value.shape != self.static:
                raise InputError(
                    f"input '{self.name}' has shape {tuple(value.shape)}; the bundle expects "
                    f"{tuple(self.static)} (no dynamic dims were exported; use --dynamic NAME:DIM)."
                )
            return
        self._check_dynamic(value, sizes)

    def _check_dynamic(self, value: torch.Tensor, sizes: dict[str, tuple[int, str]]) -> None:
        expected = self.describe()
        if value.dim() != len(self.shape):
            raise InputError(f"input '{self.name}' has shape {tuple(value.shape)}; the bundle expects {expected}.")
        for i, size in enumerate(value.shape):
            if i not in self.dynamic:
                if size != self.shape[i]:
                    raise InputError(
                        f"input '{self.name}' has shape {tuple(value.shape)}; the bundle expects {expected} "
                        f"(dim {i} is static)."
                    )
                continue
            symbol, lo, hi = self.dynamic[i]
            if size < lo or (hi is not None and size > hi):
                raise InputError(
                    f"input '{self.name}' dim {i} is {size}, outside the exported range "
                    f"[{lo}, {'inf' if hi is None else hi}] of {symbol}. Re-export with a wider range."
                )
            seen = sizes.setdefault(symbol, (size, f"{self.name} dim {i}"))
            if seen[0] != size:
                raise InputError(
                    f"input '{self.name}' dim {i} is {size}, but {seen[1]} is {seen[0]}; both are "
                    f"{symbol} in the bundle and must be equal."
                )

    def describe(self) -> str:
        dims = [self.dynamic[i][0] if i in self.dynamic else str(s) for i, s in enumerate(self.shape)]
        return "(" + ", ".join(dims) + ")"


def build_checks(metadata: Metadata, user_inputs: list[UserInput]) -> list[InputCheck]:
    checks = []
    for spec, meta in zip(user_inputs, metadata.user_inputs, strict=True):
        dynamic = {int(k): (d.symbol, d.min, d.max) for k, d in meta.dynamic_dims.items()}
        checks.append(
            InputCheck(
                name=spec.name,
                dtype=_DTYPES[meta.dtype],
                shape=tuple(meta.shape),
                dynamic=dynamic,
                static=None if dynamic else torch.Size(meta.shape),
            )
        )
    return checks


@dataclass(frozen=True)
class AliasGuard:
    """Duplicates the program was captured with, and the user inputs it mutates.

    The graphs are valid only for the aliasing pattern seen at capture: a captured
    duplicate must be passed as the same tensor again, and a mutated input must not share
    memory with another input unless it did at capture.
    """

    names: list[str]
    duplicates: dict[int, int]
    mutated: list[int]

    @property
    def active(self) -> bool:
        return bool(self.duplicates or self.mutated)

    def check(self, flat: list[torch.Tensor]) -> None:
        for j, i in self.duplicates.items():
            if flat[j] is not flat[i]:
                raise InputError(
                    f"input '{self.names[j]}' was the same tensor as '{self.names[i]}' when the bundle "
                    "was captured, and the graph treats them as one. Pass the same tensor for both, "
                    "or re-export with distinct example inputs."
                )
        for m in self.mutated:
            storage = flat[m].untyped_storage().data_ptr()
            for k, other in enumerate(flat):
                if k == m or self.duplicates.get(k) == m or self.duplicates.get(m) == k:
                    continue
                if other.untyped_storage().data_ptr() == storage:
                    raise InputError(
                        f"inputs '{self.names[m]}' and '{self.names[k]}' share memory, and "
                        f"'{self.names[m]}' is mutated in place. The bundle was captured with separate "
                        "tensors, so it cannot reproduce eager here. Pass separate tensors "
                        f"(e.g. {self.names[k]}.clone()), or export with example inputs that share "
                        "memory the same way."
                    )


def build_guard(program: ProgramMeta, user_inputs: list[UserInput]) -> AliasGuard:
    duplicates = {int(k): v for k, v in program.duplicate_user_inputs.items()}
    by_name = {u.name: i for i, u in enumerate(user_inputs)}
    mutated = [
        by_name[i.name]
        for i in program.inputs
        if i.kind == "user_input" and i.mutation_type != "NOT_MUTATED"
    ]
    return AliasGuard([u.name for u in user_inputs], duplicates, mutated)


def random_inputs(metadata: Metadata, in_spec, seed: int = 0, device: str | torch.device = "cpu",
                  vary_dynamic: bool = False):
    """(args, kwargs) of random tensors shaped like the example inputs: floats from a normal
    distribution, integers and bools within the example's value range. With
    `vary_dynamic`, each dynamic size is drawn from its exported range (capped at twice
    the example's), the same for every input that shares it."""
    from aotc._torch_compat import pytree

    g = torch.Generator().manual_seed(seed)
    sizes: dict[str, int] = {}
    flat = []
    for meta in metadata.user_inputs:
        shape = list(meta.shape)
        if vary_dynamic:
            for dim, d in meta.dynamic_dims.items():
                if d.symbol not in sizes:
                    example = meta.shape[int(dim)]
                    hi = min(d.max if d.max is not None else 2 * example, 2 * example)
                    lo = min(max(d.min, 1), hi)
                    sizes[d.symbol] = int(torch.randint(lo, hi + 1, (), generator=g))
                shape[int(dim)] = sizes[d.symbol]
        dtype = _DTYPES[meta.dtype]
        if dtype.is_floating_point or dtype.is_complex:
            t = torch.randn(shape, generator=g, dtype=dtype)
        else:
            lo, hi = meta.value_range or [0, 1]
            t = torch.randint(lo, hi + 1, shape, generator=g).to(dtype)
        flat.append(t.to(device))
    return pytree.tree_unflatten(flat, in_spec)
