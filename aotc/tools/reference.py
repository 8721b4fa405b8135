"""Golden references: what eager PyTorch did on the example inputs, kept in the bundle.

`reference.safetensors` holds the example inputs and eager's record of the call (see
aotc.tools.observe for its keys: outputs, inputs and buffers after the call, and for training
bundles the loss, the grad_outputs used and every parameter gradient). Tolerances per entry
go in the manifest, so a bundle can be verified where its source is not available. Eager
runs on a copy of the model under a fixed seed, so the caller's model is untouched.
"""

from __future__ import annotations


import torch

from aotc._torch_compat import pytree
from aotc.capture.module_copy import copy_module
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
    torch.complex64: (1e-3, 1e-4),
}


def tolerance(t: torch.Tensor) -> list[float]:
    return list(_TOLERANCE.get(t.dtype, (0.0, 0.0)))


def run_eager(model: torch.nn.Module, args, kwargs, names: list[str], mode: str, loss_fn=None,
              grad_seed: int = SEED, optimizer=None, given: Record | None = None, device=None) -> Record:
    """The eager model's record (see aotc.tools.observe) with the inputs it was given; a joint
    step with `optimizer` (an OptimizerInfo and its state) steps torch.optim's own
    optimizer over the model. `device`: the model (moved there) and the inputs run on it."""
    flat = dense_leaves(pytree.tree_leaves((args, kwargs)))
    ref = {input_key(n): t.detach().clone() for n, t in zip(names, flat)}
    if device is not None:
        model = model.to(device)
    opt = None
    if optimizer is not None:

        info, state = optimizer
        opt = optimizers.build(info, model, state)
    return ref | observe(model, args, kwargs, names, mode, loss_fn, grad_seed, given=given, optimizer=opt,
                         device=device)


def compute(model: torch.nn.Module, args, kwargs, names: list[str], mode: str, loss_fn, training: bool,
            optimizer=None):
    """References for a freshly captured model: (tensors, tolerance per name).

    A float entry's atol grows to 4x its own rounding noise where that exceeds the
    dtype's default: eager run again in float64 says how far eager's float32 result is
    from exact, and a correct graph, which sums in another order, lands as far. Where the
    forward goes another way in float64, eager run again at another thread count says
    instead how far summing in another order moves each entry. Gradients
    of thousands through a dozen BatchNorms (torchvision's DeepLabV3) carry noise of 0.1,
    and a gradient that is exactly zero carries its rounding alone; a wrong graph is off
    by far more (checked against perturbed and miswired graphs)."""
    ref = run_eager(copy_module(model).train(training), args, kwargs, names, mode, loss_fn, optimizer=optimizer)
    tolerances = {k: tolerance(v) for k, v in ref.items() if not is_input_entry(k)}
    if optimizer is None:
        # float64 where it runs the same path; else eager again at another thread count
        noise = _float64_noise(model, args, kwargs, names, mode, loss_fn, training, ref) \
            or _thread_noise(model, args, kwargs, names, mode, loss_fn, training, ref)
        for k, n in noise.items():
            rtol, atol = tolerances[k]
            tolerances[k] = [rtol, max(atol, 4 * n)]
    return ref, tolerances


def _distance(ref: Record, other: Record) -> dict[str, float]:
    """Per float entry of `ref` that `other` holds in the same shape: max |ref - other| over
    the places both are finite (the same infinity is no distance)."""
    out = {}
    for k, want in ref.items():
        got = other.get(k)
        if is_input_entry(k) or not want.is_floating_point() or got is None or got.shape != want.shape:
            continue
        both = want.isfinite() & got.isfinite()
        out[k] = (want.double() - got.double())[both].abs().max().item() if both.any() else 0.0
    return out


def _thread_noise(model, args, kwargs, names, mode, loss_fn, training, ref: Record) -> dict[str, float]:
    """Per float entry of `ref`, how far eager lands when run again at another intra-op thread
    count (same weights, inputs, seed and grad_outputs): the CPU kernels split their sums by
    thread, so this is how far a correct graph that sums in another order can land, measured
    with no dtype switch. It matters where float64 takes another path: grounding-dino's
    outputs move by up to 13% between 1 and 2 threads, in eager alone."""
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2 if threads == 1 else 1)
        given = {k: v for k, v in ref.items() if k.startswith("grad_output")}
        again = run_eager(copy_module(model).train(training), args, kwargs, names, mode, loss_fn, given=given)
    except Exception:  # eager ran once with these inputs: a second failure says nothing of the graph
        return {}
    finally:
        torch.set_num_threads(threads)
    return _distance(ref, again)


def _float64_noise(model, args, kwargs, names, mode, loss_fn, training, ref: Record) -> dict[str, float]:
    """Per float32 entry of `ref`, max |ref - eager in float64| (same weights, inputs, seed
    and grad_outputs). Empty where eager does not run in float64, or where its outputs
    differ by more than rounding (code that takes another path by dtype)."""
    def to64(t):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float32:
            return t
        return t.detach().double().requires_grad_(t.requires_grad)

    try:
        model64 = copy_module(model).double().train(training)
        args64, kwargs64 = pytree.tree_map(to64, (args, kwargs))
        given = {k: v.double() for k, v in ref.items() if k.startswith("grad_output")}
        ref64 = run_eager(model64, args64, kwargs64, names, mode, loss_fn, given=given)
    except Exception:  # a model that is float32-only (dtype-specific code): keep the defaults
        return {}
    noise = {k: d for k, d in _distance(ref, ref64).items() if ref[k].dtype == torch.float32}
    for k, d in noise.items():
        if k.startswith(("output", "loss")) and d > 1e-2 * ref64[k].abs().max().item() + 1e-5:
            return {}  # the forward itself went another way in float64: its noise says nothing
    return noise
