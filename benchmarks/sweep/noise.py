"""How far a correct graph may land from eager: eager's own rounding noise, measured per
case the way aotc's references measure it (aotc.tools.reference), and the loss and gradients
the forward+backward column compares."""

from __future__ import annotations

import copy
from typing import Any

import torch


def inference_noise(model: torch.nn.Module, inputs: dict[str, Any], eager: Any) -> dict[int, float]:
    """See columns.Context.noise."""
    from aotc._torch_compat import pytree

    def wide(x):
        return x.double() if isinstance(x, torch.Tensor) and x.dtype == torch.float32 else x

    def again(model, inputs) -> list | None:
        try:
            torch.manual_seed(0)
            with torch.no_grad():
                return _leaves(model(**inputs))
        except Exception:
            return None

    want = _leaves(eager)
    noise = _distances(want, again(copy.deepcopy(model).double(), pytree.tree_map(wide, inputs)), far=1e-2)
    if noise is None:
        threads = torch.get_num_threads()
        torch.set_num_threads(2 if threads == 1 else 1)
        try:
            noise = _distances(want, again(model, inputs)) or {}
        finally:
            torch.set_num_threads(threads)
    return {k: 4 * d for k, d in noise.items()}


def _leaves(out: Any) -> list:
    from aotc._torch_compat import pytree
    from aotc.contract.outputs import plain_outputs

    return pytree.tree_leaves(plain_outputs(out))


def _distances(want: list, got: list | None, far: float | None = None) -> dict[int, float] | None:
    """max |want - got| per float32 tensor of `want` (by id); None where `got` has another
    structure, or (with `far`) where a tensor moved by over `far` of its largest value."""
    if got is None or len(got) != len(want):
        return None
    out = {}
    for w, g in zip(want, got):
        if not (isinstance(w, torch.Tensor) and w.dtype == torch.float32 and isinstance(g, torch.Tensor)) \
                or g.shape != w.shape or not w.numel():
            continue
        d = (w.double() - g.double()).abs().nan_to_num(0.0).max().item()
        if far is not None and d > far * g.double().abs().nan_to_num(0.0).max().item() + 1e-5:
            return None
        out[id(w)] = d
    return out


def loss(out: Any) -> torch.Tensor:
    """A loss over every floating output, as a test of the whole backward."""
    from aotc._torch_compat import pytree
    from aotc.contract.outputs import plain_outputs

    leaves = [x for x in pytree.tree_leaves(plain_outputs(out))
              if isinstance(x, torch.Tensor) and x.is_floating_point() and x.requires_grad]
    return sum(x.float().square().mean() for x in leaves)


def grads(model: torch.nn.Module, inputs: dict) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    value = loss(model(**inputs))
    if not isinstance(value, torch.Tensor):
        return None, {}
    value.backward()
    return value.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


def gradient_noise(model: torch.nn.Module, inputs: dict[str, Any], training: bool, value: torch.Tensor,
                   got: dict[str, torch.Tensor]) -> dict[str, float]:
    """How far eager's float32 loss and gradients are from eager's in float64: a correct
    graph sums in another order and lands about as far (aotc's own check does the same,
    aotc.tools.reference). Gradients of thousands through a dozen BatchNorms carry noise
    of 0.1 (timm's rexnet); EfficientViM's, whose loss in float64 is 0.2% off float32's, of
    9 (of 47) where aotc's is 0.8 from eager's. Empty where the model does not run in
    float64, or where its loss in float64 is over 1% off (another path, other random draws),
    the same bound as aotc's own check."""
    def wide(x):
        return x.double() if isinstance(x, torch.Tensor) and x.dtype == torch.float32 else x

    try:
        model = copy.deepcopy(model).double().train(training)
        loss64, grads64 = grads(model, {k: wide(v) for k, v in inputs.items()})
    except Exception:
        return {}
    if loss64 is None or abs(value.double().item() - loss64.item()) > 1e-2 * abs(loss64.item()) + 1e-6:
        return {}
    noise = {n: (g.double() - grads64[n]).abs().max().item() for n, g in got.items()
             if n in grads64 and g.dtype == torch.float32 and g.numel()}
    return noise | {"loss": abs(value.double().item() - loss64.item())}
