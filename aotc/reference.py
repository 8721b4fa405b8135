"""Golden references: what eager PyTorch did on the example inputs, kept in the bundle.

`reference.safetensors` holds the example inputs (`input:<name>`), eager's outputs
(`output[i]`), every input and buffer after the call (`after:<name>`, `buffer:<fqn>`),
and for training bundles the loss (joint), the grad_outputs used (forward+backward) and
every parameter gradient (`loss`, `grad_output[i]`, `grad:<fqn>`). Tolerances per entry
go in the manifest, so a bundle can be verified where its source is not available. Eager
runs on a copy of the model under a fixed seed, so the caller's model is untouched.
"""

from __future__ import annotations

import copy

import torch

from aotc._torch_compat import pytree
from aotc.aliasing import clone_like
from aotc.outputs import plain_outputs

REFERENCE = "reference.safetensors"
SEED = 0

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


def clone_tree(tree):
    """Clone every tensor of a pytree, keeping how they relate (see aliasing.clone_like)."""
    flat, spec = pytree.tree_flatten(tree)
    return pytree.tree_unflatten(clone_like(flat), spec)


def run_eager(model: torch.nn.Module, args, kwargs, names: list[str], mode: str, loss_fn=None,
              grad_seed: int = SEED) -> dict[str, torch.Tensor]:
    """Run `model` the way the bundle's `mode` ("inference", "joint", "autograd") does and
    record everything verify compares. `model` is used as given (pass a copy). A forward
    that leaves grad mode changed (as eager allows) does not leak out of here."""
    with torch.set_grad_enabled(torch.is_grad_enabled()):
        return _run_eager(model, args, kwargs, names, mode, loss_fn, grad_seed)


def _run_eager(model, args, kwargs, names, mode, loss_fn, grad_seed) -> dict[str, torch.Tensor]:
    args, kwargs = clone_tree((args, kwargs))
    flat = pytree.tree_leaves((args, kwargs))
    ref = {f"input:{n}": t.detach().clone() for n, t in zip(names, flat)}
    torch.manual_seed(SEED)
    outputs: list = []
    if mode == "inference":
        with torch.no_grad():
            outputs = pytree.tree_leaves(plain_outputs(model(*args, **kwargs)))
    elif mode == "joint":
        loss = loss_fn(model(*args, **kwargs), *args, **kwargs)
        loss.backward()
        ref["loss"] = loss.detach()
    else:
        outputs = pytree.tree_leaves(plain_outputs(model(*args, **kwargs)))
        ref |= backward_with_seeded_grads(outputs, grad_seed)
    ref |= _observe(outputs, names, flat, model)
    return ref


def backward_with_seeded_grads(outputs: list, seed: int, given: dict | None = None) -> dict[str, torch.Tensor]:
    """Backward through every output that requires grad, with random (or `given`) grads."""
    g = torch.Generator().manual_seed(seed)
    tensors, grads, record = [], [], {}
    for i, o in enumerate(outputs):
        if isinstance(o, torch.Tensor) and o.requires_grad:
            grad = given[f"grad_output[{i}]"] if given else torch.randn(o.shape, generator=g, dtype=o.dtype)
            tensors.append(o)
            grads.append(grad)
            record[f"grad_output[{i}]"] = grad
    if tensors:
        torch.autograd.backward(tensors, grads)
    return record


def _observe(outputs: list, names: list[str], flat: list, model: torch.nn.Module) -> dict[str, torch.Tensor]:
    seen = {f"output[{i}]": o.detach().clone() for i, o in enumerate(outputs) if isinstance(o, torch.Tensor)}
    seen |= {f"after:{n}": t.detach().clone() for n, t in zip(names, flat)}
    seen |= {f"buffer:{k}": b.detach().clone() for k, b in model.named_buffers()}
    seen |= {f"grad:{k}": p.grad.detach().clone() for k, p in model.named_parameters() if p.grad is not None}
    return seen


def compute(model: torch.nn.Module, args, kwargs, names: list[str], mode: str, loss_fn, training: bool):
    """References for a freshly captured model: (tensors, tolerance per name)."""
    ref = run_eager(copy.deepcopy(model).train(training), args, kwargs, names, mode, loss_fn)
    return ref, {k: tolerance(v) for k, v in ref.items() if not k.startswith(("input:", "grad_output"))}
