"""The loaded module's weights: real Parameters and buffers under the original FQNs."""

from __future__ import annotations

import torch
from torch import nn

from aotc.errors import FrozenWeightsError


def _child(root: nn.Module, path: list[str]) -> nn.Module:
    module = root
    for part in path:
        if part not in module._modules:
            module.add_module(part, nn.Module())
        module = module._modules[part]
    return module


def populate(
    root: nn.Module,
    weights: dict[str, torch.Tensor],
    parameters: set[str],
    requires_grad: dict[str, bool],
    aliases: dict[str, str],
    non_persistent: set[str],
) -> None:
    """Register every tensor of `weights` on `root` under its FQN.

    Names in `parameters` become nn.Parameters; the rest buffers. `aliases` registers the
    same object under a second name (tied weights), so state_dict() matches the original.
    """
    for fqn, tensor in weights.items():  # in the order of the original named_parameters/buffers
        *path, name = fqn.split(".")
        owner = _child(root, path)
        if fqn in parameters:
            owner.register_parameter(name, nn.Parameter(tensor, requires_grad=requires_grad.get(fqn, True)))
        else:
            owner.register_buffer(name, tensor, persistent=fqn not in non_persistent)
    for alias, target in aliases.items():
        *path, name = alias.split(".")
        owner = _child(root, path)
        value = root.get_parameter(target) if target in parameters else root.get_buffer(target)
        if isinstance(value, nn.Parameter):
            owner.register_parameter(name, value)
        else:
            owner.register_buffer(name, value, persistent=alias not in non_persistent)


def slot_getter(root: nn.Module, fqn: str):
    """(owning module's dict, name): a fast, always-current way to read a parameter/buffer."""
    *path, name = fqn.split(".")
    owner = root
    for part in path:
        owner = owner._modules[part]
    table = owner._parameters if name in owner._parameters else owner._buffers
    return table, name


class FrozenState:
    """The weights a frozen compiled graph folded in, as they were at load.

    Such a graph never reads the module's parameters and buffers again: replacing one, or
    changing one in place, would be silently ignored, so `check()` refuses the call."""

    def __init__(self, root: nn.Module, fqns: list[str], bundle: str):
        self._entries = []
        for fqn in dict.fromkeys(fqns):
            table, name = slot_getter(root, fqn)
            self._entries.append((fqn, table, name, table[name], table[name]._version))
        self._bundle = bundle

    def check(self) -> None:
        for fqn, table, name, tensor, version in self._entries:
            if table[name] is not tensor or tensor._version != version:
                raise FrozenWeightsError(refusal(self._bundle, f"'{fqn}' was replaced or changed in place"))


def refusal(bundle: str, what: str) -> str:
    return (
        f"{what}, but '{bundle}' runs a graph compiled with its weights folded in (aotc compile --freeze), "
        "which cannot see new weights. Compile the bundle again without --freeze (or load it with "
        "backend='fx') to change its weights, or export a bundle of the new weights and compile that."
    )
