"""Inputs only the loss reads (targets, labels, masks): `loss_fn(model(x), y)` in one graph.

People train with `loss_fn(model(x), y)`: the model never sees `y`. A joint bundle's
graph takes both, so that `train_step(x, y)` is one call; aotc.export takes them apart
(`loss_inputs=`, or `loss_inputs()` in a model file) and calls the model on its inputs
and the loss on the outputs and the loss inputs. `LossOverInputs` carries that split
wherever aotc calls an eager model with its loss (capture, references, verify, bench):
the training call's last `count` positional inputs are the loss's.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch

from aotc.errors import AotcError


class LossOverInputs:
    """`fn(outputs, *loss_inputs)`, called as a training call's loss: `(outputs, *inputs,
    **keywords)` with the loss inputs the last `count` positional inputs."""

    def __init__(self, fn: Callable[..., torch.Tensor], count: int):
        if count < 1:
            raise ValueError("a loss over inputs takes at least one of them")
        self.fn, self.count = fn, count

    def __call__(self, outputs, *args, **kwargs) -> torch.Tensor:
        return self.fn(outputs, *args[len(args) - self.count:])

    def model_args(self, args: tuple) -> tuple:
        """The positional inputs the model takes: all but the loss's."""
        return tuple(args[: len(args) - self.count])

    def input_names(self) -> list[str]:
        """The loss inputs' names, from the loss's own parameters after the outputs
        (`F.cross_entropy` -> `target`), else `loss_inputs[i]`."""
        try:
            params = list(inspect.signature(self.fn).parameters.values())[1:]
        except (TypeError, ValueError):
            params = []
        names = []
        for i in range(self.count):
            p = params[i] if i < len(params) else None
            plain = p is not None and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            names.append(p.name if plain else f"loss_inputs[{i}]")
        return names


def model_args(loss, args: tuple) -> tuple:
    """The positional inputs of a call that go to the model (all of them, unless `loss`
    reads some of its own)."""
    return loss.model_args(args) if isinstance(loss, LossOverInputs) else args


def with_loss_inputs(mode: str, args: tuple, loss, loss_inputs) -> tuple[tuple, LossOverInputs]:
    """The training call's inputs (the model's, then the loss's) and its loss."""
    if mode != "joint":
        raise AotcError("loss_inputs= feeds the loss of a joint graph (graphs=(\"joint\",)); a forward+backward "
                        "bundle returns the model's outputs, and your loss takes its inputs in your code.")
    if loss is None:
        raise AotcError("loss_inputs= are the inputs of a loss: pass loss=, called as loss(outputs, *loss_inputs).")
    if isinstance(loss_inputs, torch.Tensor) or not isinstance(loss_inputs, (tuple, list)) or not loss_inputs:
        raise AotcError(f"loss_inputs= is a {type(loss_inputs).__name__}; give a tuple of the loss's inputs, e.g. "
                        "loss_inputs=(targets,).")
    return (*args, *loss_inputs), LossOverInputs(loss, len(loss_inputs))
