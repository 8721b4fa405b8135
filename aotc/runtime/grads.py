"""How a joint step's gradients become `.grad`, as autograd's accumulation leaves them."""

from __future__ import annotations

import torch


def spans(tensors) -> list[tuple[int, int]]:
    """The memory of each tensor's storage, as [start, end) addresses."""
    spans = []
    for t in tensors:
        storage = t.untyped_storage()
        spans.append((storage.data_ptr(), storage.data_ptr() + storage.nbytes()))
    return spans


def accumulate(target: torch.Tensor, grad: torch.Tensor, shared: bool) -> None:
    """Add `grad` to target.grad, as autograd does; a `shared` grad (its memory is also an
    input's or another .grad's, or it is not contiguous, e.g. an expanded scalar) is copied,
    so that an in-place change of one (clipping, zero_grad without set_to_none) misses the
    other and works."""
    if target.grad is None:
        target.grad = grad.clone() if shared else grad
    else:
        target.grad = target.grad + grad
