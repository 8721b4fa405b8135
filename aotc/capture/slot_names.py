"""Names and roles of graph slots, from AOTAutograd's input and output descriptors.

Every flat input and output of a captured graph gets a Slot: parameters and buffers by
the FQN the bundle stores them under, user inputs by forward's argument names, and the
rest (mutated inputs, gradients, tangents, saved activations, ...) by what they belong to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from aotc import _torch_compat as tc
from aotc.bundle.schema import Slot
from aotc.errors import CaptureError

_PREFIX = "model."


def _strip(fqn: str) -> str:
    return fqn[len(_PREFIX):] if fqn.startswith(_PREFIX) else fqn




@dataclass(frozen=True)
class Names:
    """How graph slots are named: user inputs by forward's argument names, parameters and
    buffers by the FQN the bundle stores them under (the first name of a tied weight)."""

    user: list[str]
    aliases: dict[str, str]
    # user inputs on a synthetic base whose metadata the program changes, in input order
    # (AOTAutograd returns their new views as extra outputs, numbered in this order)
    metadata_mutated: tuple[int, ...] = ()

    def state(self, target: str) -> str:
        fqn = _strip(target)
        return self.aliases.get(fqn, fqn)


def input_name(desc: Any, names: Names) -> tuple[str, str, str | None, int | None]:
    """(slot name, role, target, index) for an AOTAutograd input descriptor."""
    if isinstance(desc, tc.ParamAOTInput):
        fqn = names.state(desc.target)
        return fqn, "parameter", fqn, None
    if isinstance(desc, tc.BufferAOTInput):
        fqn = names.state(desc.target)
        return fqn, "buffer", fqn, None
    if isinstance(desc, tc.PlainAOTInput):
        return names.user[desc.idx], "user_input", names.user[desc.idx], desc.idx
    if isinstance(desc, tc.TangentAOTInput):
        of = output_slot(desc.output, names, loss=False)
        return f"tangent:{of.name}", "tangent", of.name, of.index
    if isinstance(desc, (tc.ViewBaseAOTInput, tc.SyntheticBaseAOTInput)) and isinstance(desc.base_of, tc.PlainAOTInput):
        # user inputs that alias each other and are mutated are traced on their base
        user = names.user[desc.base_of.idx]
        return f"base_of:{user}", "synthetic_base", user, desc.base_of.idx
    if isinstance(desc, (tc.ForwardTokenAOTInput, tc.BackwardTokenAOTInput)):
        raise CaptureError(
            "forward calls an operator with side effects (printing, a custom op registered as "
            "effectful), which AOTAutograd orders with an effect token; aotc's graphs are pure and "
            "would not replay it. Move the call out of forward."
        )
    raise CaptureError(f"unexpected graph input {desc!r}; this model uses a feature aotc v1 does not support")


def output_slot(desc: Any, names: Names, loss: bool) -> Slot:
    if isinstance(desc, tc.InputMutationAOTOutput):
        name, _, target, index = input_name(desc.mutated_input, names)
        return Slot(f"mutated:{name}", "input_mutation", target, index)
    if isinstance(desc, tc.MetadataMutationAOTOutput):
        if desc.idx >= len(names.metadata_mutated):
            raise CaptureError(
                "the program changes the shape or strides of an input that shares memory with "
                "another mutated input in a way aotc cannot follow; pass separate tensors."
            )
        user = names.metadata_mutated[desc.idx]
        return Slot(f"mutated_metadata:{names.user[user]}", "input_mutation", names.user[user], user)
    if isinstance(desc, tc.PlainAOTOutput):
        if loss:
            return Slot("loss", "loss", None, desc.idx)
        return Slot(f"output[{desc.idx}]", "user_output", None, desc.idx)
    if isinstance(desc, tc.IntermediateBaseAOTOutput):
        of = output_slot(desc.base_of, names, loss)
        return Slot(f"base_of:{of.name}", "intermediate_base", of.name, of.index)
    if isinstance(desc, tc.SavedForBackwardsAOTOutput):
        return Slot(f"saved[{desc.idx}]", "saved", None, desc.idx)
    if isinstance(desc, tc.GradAOTOutput):
        name, _, target, index = input_name(desc.grad_of, names)
        return Slot(f"grad:{name}", "gradient", target, index)
    raise CaptureError(f"unexpected graph output {desc!r}; this model uses a feature aotc v1 does not support")


def state_aliases(model: torch.nn.Module) -> dict[str, str]:
    """Second names of tied parameters/buffers -> the name the bundle stores them under."""
    first: dict[int, str] = {}
    aliases = {}
    for name, t in [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]:
        if id(t) in first:
            aliases[name] = first[id(t)]
        else:
            first[id(t)] = name
    return aliases
