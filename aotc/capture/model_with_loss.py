"""`Program`: the model, optionally followed by its loss, as the one module torch traces."""

from __future__ import annotations

import torch

from aotc.contract.call_inputs import unwrap
from aotc.contract.loss_inputs import model_args
from aotc.contract.outputs import plain_outputs
from aotc.errors import CaptureError


class Program(torch.nn.Module):
    """The model, optionally followed by its loss: the thing torch.export traces. It
    takes the inputs bound (aotc.contract.call_inputs) and calls the model on their values.

    With `keywords`, the last len(keywords) positional arguments are passed to the model
    as those keywords: torch.export is then called with positional inputs only, since it
    mis-matches dynamic_shapes with keyword inputs of a forward that takes **kwargs.
    """

    def __init__(self, model: torch.nn.Module, loss=None, keywords: tuple[str, ...] = ()):
        super().__init__()
        self.model = model
        self.loss = loss
        self.keywords = keywords

    def forward(self, *args, **kwargs):
        if self.keywords:
            split = len(args) - len(self.keywords)
            args, kwargs = args[:split], dict(zip(self.keywords, args[split:]), **kwargs)
        args, kwargs = unwrap((args, kwargs))  # constants and ints as the model takes them
        buffers = dict(self.model.named_buffers())
        out = self.model(*model_args(self.loss, args), **kwargs)  # a loss may read inputs of its own
        _reassigned_as_copies(self.model, buffers)
        if self.loss is None:
            return plain_outputs(out)
        return self.loss(out, *args, **kwargs)


def _reassigned_as_copies(model: torch.nn.Module, before: dict[str, torch.Tensor]) -> None:
    """A buffer forward replaced (`self.buf = self.buf + 1`) put back and given the new
    values in place: torch.export sees an in-place buffer update, which it records and
    the runtime applies, where it misses a replacement in a submodule of what it traces."""
    for name, old in before.items():
        prefix, _, attr = name.rpartition(".")
        owner = model.get_submodule(prefix)
        new = owner._buffers.get(attr)
        if new is old or not isinstance(new, torch.Tensor):
            continue
        if new.shape != old.shape or new.dtype != old.dtype:
            raise CaptureError(
                f"forward replaces buffer '{name}' ({tuple(old.shape)}, {old.dtype}) with a tensor of shape "
                f"{tuple(new.shape)} and dtype {new.dtype}; a bundle keeps each buffer's shape and dtype. Update it "
                "in place, or keep the new value in another buffer."
            )
        owner._buffers[attr] = old
        with torch.no_grad():
            old.copy_(new)
