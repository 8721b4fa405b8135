"""A model's copy for eager runs beside the capture (export's checks, the references,
verify): `copy.deepcopy`, which refuses a tensor that is not a graph leaf. A model can
hold one as state cached from its last call under grad mode (RecurrentGemma's recurrent
and convolution states, after a user's own forward); the copy takes it detached."""

from __future__ import annotations

import copy

import torch


def copy_module(module: torch.nn.Module) -> torch.nn.Module:
    memo = {id(value): value.detach().clone() for m in module.modules() for value in vars(m).values()
            if isinstance(value, torch.Tensor) and not value.is_leaf}
    return copy.deepcopy(module, memo)
