"""`Program`: the model, optionally followed by its loss, as the one module torch traces."""

from __future__ import annotations

import torch

from aotc.contract.call_inputs import unwrap
from aotc.contract.loss_inputs import model_args
from aotc.contract.outputs import plain_outputs


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
        out = self.model(*model_args(self.loss, args), **kwargs)  # a loss may read inputs of its own
        if self.loss is None:
            return plain_outputs(out)
        return self.loss(out, *args, **kwargs)
