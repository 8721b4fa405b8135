"""The user's example inputs, flattened: their names, what aotc accepts, and their aliasing."""

from __future__ import annotations

from typing import Any

import torch

from aotc._torch_compat import pytree
from aotc.contract.subclasses import check_capturable, is_subclass
from aotc.errors import CaptureError
from aotc.sources.model_file import forward_arg_names


def flat_user_names(model, args: tuple, kwargs: dict) -> tuple[list[str], list[str]]:
    """Readable name and pytree path of every flat user input."""
    arg_names = forward_arg_names(model, args, kwargs)
    leaves, _ = pytree.tree_flatten_with_path((args, kwargs))
    names, paths = [], []
    for path, _ in leaves:
        head, rest = path[0], path[1:]
        if head.idx == 0:
            base = arg_names[rest[0].idx]
            rest = rest[1:]
        else:
            base = rest[0].key
            rest = rest[1:]
        suffix = pytree.keystr(rest) if rest else ""
        names.append(base + suffix)
        paths.append(pytree.keystr(path))
    return names, paths


def check_tensors(module: torch.nn.Module, flat: list[Any], names: list[str]) -> None:
    """Inputs must be tensors; subclasses (inputs, parameters, buffers) ones aotc can store."""
    for name, value in zip(names, flat):
        if not isinstance(value, torch.Tensor):
            raise CaptureError(
                f"Input '{name}' is a {type(value).__name__}; aotc bundles take tensors only. "
                "Make it a tensor, or bake the constant into the model."
            )
        if is_subclass(value):
            check_capturable(value, name)
    for fqn, t in [*module.named_parameters(), *module.named_buffers()]:
        if is_subclass(t):
            check_capturable(t, fqn)


def duplicate_positions(flat_user: list[Any]) -> dict[int, int]:
    """Later position -> first position of the same tensor object."""
    duplicates: dict[int, int] = {}
    for j, t in enumerate(flat_user):
        first = next((i for i in range(j) if flat_user[i] is t), None)
        if first is not None:
            duplicates[j] = first
    return duplicates


def value_range(t: torch.Tensor) -> list[int] | None:
    if t.dtype.is_floating_point or t.dtype.is_complex or t.numel() == 0:
        return None
    return [int(t.min()), int(t.max())]
