"""Golden references: what eager PyTorch did on the example inputs, kept in the bundle.

`reference.safetensors` holds the example inputs and eager's record of the call (see
aotc.tools.observe for its keys: outputs, inputs and buffers after the call, and for training
bundles the loss, the grad_outputs used and every parameter gradient). Tolerances per entry
go in the manifest, so a bundle can be verified where its source is not available. Eager
runs on a copy of the model under a fixed seed, so the caller's model is untouched.
"""

from __future__ import annotations

import copy

import torch

from aotc._torch_compat import pytree
from aotc.contract import optimizers
from aotc.contract.subclasses import dense_leaves
from aotc.tools.observe import SEED, Record, input_key, is_input_entry, observe

REFERENCE = "reference.safetensors"

# (rtol, atol) by dtype; integers and bools must match exactly. float32 allows for
# AOTInductor's fused kernels summing gradients over a batch in another order.
_TOLERANCE = {
    torch.float64: (1e-7, 1e-9),
    torch.float32: (1e-3, 1e-4),
    torch.float16: (1e-2, 1e-3),
    torch.bfloat16: (2e-2, 1e-2),
}


def tolerance(t: torch.Tensor) -> list[float]:
    return list(_TOLERANCE.get(t.dtype, (0.0, 0.0)))


def run_eager(model: torch.nn.Module, args, kwargs, names: list[str], mode: str, loss_fn=None,
              grad_seed: int = SEED, optimizer=None) -> Record:
    """The eager model's record (see aotc.tools.observe) with the inputs it was given; a joint
    step with `optimizer` (an OptimizerInfo and its state) steps torch.optim's own
    optimizer over the model."""
    flat = dense_leaves(pytree.tree_leaves((args, kwargs)))
    ref = {input_key(n): t.detach().clone() for n, t in zip(names, flat)}
    opt = None
    if optimizer is not None:

        info, state = optimizer
        opt = optimizers.build(info, model, state)
    return ref | observe(model, args, kwargs, names, mode, loss_fn, grad_seed, optimizer=opt)


def compute(model: torch.nn.Module, args, kwargs, names: list[str], mode: str, loss_fn, training: bool,
            optimizer=None):
    """References for a freshly captured model: (tensors, tolerance per name)."""
    ref = run_eager(copy.deepcopy(model).train(training), args, kwargs, names, mode, loss_fn, optimizer=optimizer)
    return ref, {k: tolerance(v) for k, v in ref.items() if not is_input_entry(k)}
