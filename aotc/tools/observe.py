"""Run a model, eager or loaded from a bundle, the way a bundle's mode does, and record
what happened: the one place that says what "behaving like eager" is measured by.

The record's keys, used by reference.safetensors, the manifest's tolerances and verify:

    input:<name>      a user input before the call (references only)
    output[i]         the i-th tensor among the flat outputs
    after:<name>      a user input after the call (in-place mutations)
    buffer:<fqn>      a buffer after the call
    loss              the loss of a joint training step
    grad_output[i]    the gradient fed to output i (forward+backward)
    grad:<fqn>        a parameter's gradient after the step
    param:<fqn>       a parameter after the step (a joint bundle that carries its optimizer)
    optimizer:<fqn>/<key>  the optimizer's state after the step (same)
"""

from __future__ import annotations

import torch

from aotc._torch_compat import pytree
from aotc.contract.aliasing import clone_like
from aotc.contract.call_inputs import unwrap
from aotc.contract.loss_inputs import model_args
from aotc.contract.outputs import plain_outputs
from aotc.contract.subclasses import dense_leaves, is_subclass, named_plain
from aotc.errors import BundleError
from aotc.runtime.module import LoadedModule

Record = dict[str, torch.Tensor]
SEED = 0
LOSS = "loss"


def input_key(name: str) -> str:
    return f"input:{name}"


def output_key(i: int) -> str:
    return f"output[{i}]"


def after_key(name: str) -> str:
    return f"after:{name}"


def buffer_key(fqn: str) -> str:
    return f"buffer:{fqn}"


def grad_key(fqn: str) -> str:
    return f"grad:{fqn}"


def param_key(fqn: str) -> str:
    return f"param:{fqn}"


def grad_output_key(i: int) -> str:
    return f"grad_output[{i}]"


def is_input_entry(key: str) -> bool:
    """Entries that are given to a run (inputs, grad_outputs), not compared after it."""
    return key.startswith(("input:", "grad_output"))


def _like(o: torch.Tensor, plain: list[torch.Tensor]) -> torch.Tensor:
    """A tensor of `o`'s subclass around `plain` (its inner tensors, nested ones included)."""
    attrs, context = o.__tensor_flatten__()
    inner, at = {}, 0
    for attr in attrs:
        value = getattr(o, attr)
        n = len(named_plain("", value))
        inner[attr] = _like(value, plain[at : at + n]) if is_subclass(value) else plain[at]
        at += n
    return type(o).__tensor_unflatten__(inner, context, o.size(), o.stride())


def clone_tree(tree):
    """Clone every tensor of a pytree, keeping how they relate (see aliasing.clone_like). A
    torch.Size stays one (torch's pytree unflattens it as a plain tuple, and a bundle
    exported from a tuple refuses the Size the model passes)."""
    flat, spec = pytree.tree_flatten(tree, is_leaf=lambda x: isinstance(x, torch.Size))
    return pytree.tree_unflatten(clone_like(flat), spec)


def observe(model: torch.nn.Module, args, kwargs, names: list[str], mode: str, loss_fn=None,
            grad_seed: int = SEED, given: Record | None = None, device: torch.device | str | None = None,
            optimizer=None) -> Record:
    """Call `model` (used as given: pass a copy) on clones of the inputs the way `mode`
    ("inference", "joint", "autograd") runs, under a fixed seed, and record everything
    verify compares, on the CPU. A joint step of a loaded bundle is its `train_step`;
    an eager one is `loss_fn(outputs, *inputs)` and backward. Forward+backward feeds
    `given`'s grad_outputs when set, else random ones from `grad_seed`. A joint step with
    an `optimizer` (eager's; a loaded bundle brings its own) also steps it and zeroes the
    gradients, and records the parameters and optimizer state after. Grad mode is
    restored afterwards, whatever the model did to it."""
    with torch.set_grad_enabled(torch.is_grad_enabled()):
        return _observe(model, args, kwargs, names, mode, loss_fn, grad_seed, given, device, optimizer)


def _observe(model, args, kwargs, names, mode, loss_fn, grad_seed, given, device, optimizer) -> Record:
    args, kwargs = clone_tree((args, kwargs))
    if device is not None:
        args, kwargs = pytree.tree_map_only(torch.Tensor, lambda t: t.to(device), (args, kwargs))
    flat = dense_leaves(pytree.tree_leaves((args, kwargs)))  # tensor subclasses as their inner tensors
    args, kwargs = unwrap((args, kwargs))  # constants and ints as a user passes them
    torch.manual_seed(SEED)
    seen: Record = {}
    outputs: list = []
    if mode == "inference":
        with torch.no_grad():
            outputs = pytree.tree_leaves(plain_outputs(model(*args, **kwargs)))
    elif mode == "joint":

        if isinstance(model, LoadedModule):
            seen[LOSS] = model.train_step(*args, **kwargs)
            optimizer = model.optimizer
        else:
            loss = loss_fn(model(*model_args(loss_fn, args), **kwargs), *args, **kwargs)
            loss.backward()
            seen[LOSS] = loss
            if optimizer is not None:
                optimizer.step()
                optimizer.zero_grad()
        if optimizer is not None:
            seen |= optimizer_record(model, optimizer)
    else:
        outputs = pytree.tree_leaves(plain_outputs(model(*args, **kwargs)))
        seen |= backward_with_seeded_grads(outputs, grad_seed, given)
    seen |= {output_key(i): o for i, o in enumerate(dense_leaves(outputs)) if isinstance(o, torch.Tensor)}
    seen |= {after_key(n): t for n, t in zip(names, flat)}
    seen |= {buffer_key(k): v for name, b in model.named_buffers() for k, v in named_plain(name, b)}
    seen |= {grad_key(k): v for name, p in model.named_parameters() if p.grad is not None
             for k, v in named_plain(name, p.grad)}
    return {k: v.detach().cpu().clone() for k, v in seen.items()}


def optimizer_record(model: torch.nn.Module, optimizer) -> Record:
    """Every parameter and every optimizer state tensor, after a step."""
    names = {id(p): n for n, p in model.named_parameters()}
    seen = {param_key(n): p for n, p in model.named_parameters()}
    for p, state in optimizer.state.items():
        seen |= {f"optimizer:{names[id(p)]}/{k}": v for k, v in state.items() if isinstance(v, torch.Tensor)}
    return seen


def backward_with_seeded_grads(outputs: list, seed: int, given: Record | None = None) -> Record:
    """Backward through every output that requires grad, with random (or `given`) grads.
    A tensor subclass output gets a gradient of its class, made of one per inner tensor
    (keyed by their places among the outputs' inner tensors, as the bundle numbers them)."""
    g = torch.Generator().manual_seed(seed)
    tensors, grads, record = [], [], {}
    at = 0
    for o in outputs:
        plain = named_plain("", o)
        first, at = at, at + len(plain)
        if not (isinstance(o, torch.Tensor) and o.requires_grad):
            continue
        parts = []
        for i, (_, p) in enumerate(plain, start=first):
            key = grad_output_key(i)
            if given is not None and key not in given:

                raise BundleError(f"reference.safetensors has no '{key}' for an output that takes a gradient.")
            parts.append(given[key].to(p.device) if given is not None
                         else torch.randn(p.shape, generator=g, dtype=p.dtype))
            record[key] = parts[-1]
        tensors.append(o)
        grads.append(parts[0] if len(plain) == 1 and not is_subclass(o) else _like(o, parts))
    if tensors:
        torch.autograd.backward(tensors, grads)
    return record
