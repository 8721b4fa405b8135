"""One checker for "the loaded bundle did what eager did", call by call.

`Observation` records everything a caller can see after a call: outputs (values, dtype,
shape, strides, storage offset, requires_grad, is_leaf), every input after the call
together with the whole storage it views, which outputs are or share storage with which
inputs and with each other, buffers, and grad mode. After `backward`, gradients of every
leaf: parameters and the leaves the inputs were computed from. `compare` asserts that two
observations agree and names the first difference.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from aotc._torch_compat import pytree


def _storage_of(t: torch.Tensor) -> torch.Tensor:
    """The whole storage `t` views, as a flat tensor of t's dtype."""
    numel = t.untyped_storage().nbytes() // t.element_size()
    return t.detach().as_strided((numel,), (1,), 0)


def _shares(a, b) -> bool:
    return (
        isinstance(a, torch.Tensor)
        and isinstance(b, torch.Tensor)
        and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    )


def _aliasing(outputs: list, inputs: list) -> list:
    """Per output: inputs it is, inputs it shares storage with, earlier outputs it is or shares with."""
    return [
        (
            [j for j, x in enumerate(inputs) if o is x],
            [j for j, x in enumerate(inputs) if _shares(o, x)],
            [k for k, p in enumerate(outputs[:i]) if o is p],
            [k for k, p in enumerate(outputs[:i]) if _shares(o, p)],
        )
        for i, o in enumerate(outputs)
    ]


@dataclass
class Observation:
    outputs: list
    inputs: list
    leaves: list
    module: torch.nn.Module
    grad_mode: bool
    storages: list = field(default_factory=list)

    @classmethod
    def call(cls, fn, args: tuple, kwargs: dict, leaves: list, module: torch.nn.Module, seed: int = 0):
        """Call `fn(*args, **kwargs)` under `seed` and record what the caller sees; grad
        mode is restored afterwards (and recorded as the call left it)."""
        ambient = torch.is_grad_enabled()
        torch.manual_seed(seed)
        try:
            outputs = pytree.tree_leaves(fn(*args, **kwargs))
            grad_mode = torch.is_grad_enabled()
        finally:
            torch.set_grad_enabled(ambient)
        inputs = pytree.tree_leaves((args, kwargs))
        storages = [_storage_of(t).clone() if isinstance(t, torch.Tensor) else None for t in inputs]
        return cls(outputs, inputs, leaves, module, grad_mode, storages)

    def roots(self, which: str = "all") -> list[torch.Tensor]:
        """What a caller may differentiate: "all" is every output that requires grad and
        every input whose value the call left differentiable (mutated under grad);
        "outputs" the outputs alone; "first" the first of all."""
        outputs = [t for t in self.outputs if isinstance(t, torch.Tensor) and t.requires_grad]
        inputs = [t for t in self.inputs if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        chosen = {"all": [*outputs, *inputs], "outputs": outputs, "first": [*outputs, *inputs][:1]}
        return chosen[which]

    def backward(self, seed: int, which: str = "all") -> None:
        """Backward through `roots(which)`, with random gradients."""
        g = torch.Generator().manual_seed(seed)
        tensors = self.roots(which)
        assert tensors, "a training case must leave an output or input that requires grad"
        grads = [torch.randn(t.shape, generator=g, dtype=t.dtype) for t in tensors]
        torch.autograd.backward(tensors, grads)


def _tensor(actual, expected, what: str, tol: dict) -> None:
    if not isinstance(expected, torch.Tensor):
        assert actual == expected, f"{what}: {actual!r} != {expected!r}"
        return
    assert isinstance(actual, torch.Tensor), f"{what}: {type(actual).__name__}, expected a tensor"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    if expected.numel() > 1:
        # the strides of size-1 dims say nothing about memory (torch's "significant strides")
        significant = [d for d, size in enumerate(expected.shape) if size != 1]
        a_strides = [actual.stride(d) for d in significant]
        e_strides = [expected.stride(d) for d in significant]
        assert a_strides == e_strides, f"{what}: stride {actual.stride()} != {expected.stride()}"
    assert actual.storage_offset() == expected.storage_offset(), (
        f"{what}: storage offset {actual.storage_offset()} != {expected.storage_offset()}"
    )
    assert actual.requires_grad == expected.requires_grad, (
        f"{what}: requires_grad {actual.requires_grad} != {expected.requires_grad}"
    )
    torch.testing.assert_close(actual.detach(), expected.detach(), **tol, msg=lambda m: f"{what}: {m}")


def compare(actual: Observation, expected: Observation, name: str, tol: dict) -> None:
    """Assert that the bundle's call (`actual`) left what eager's (`expected`) left."""
    assert actual.grad_mode == expected.grad_mode, f"{name}: grad mode after the call differs from eager"
    assert len(actual.outputs) == len(expected.outputs), f"{name}: number of outputs"
    for i, (a, e) in enumerate(zip(actual.outputs, expected.outputs, strict=True)):
        _tensor(a, e, f"{name} output {i}", tol)
    assert len(actual.inputs) == len(expected.inputs), f"{name}: number of inputs"
    for i, (a, e) in enumerate(zip(actual.inputs, expected.inputs, strict=True)):
        _tensor(a, e, f"{name} input {i} after the call", tol)
        if isinstance(e, torch.Tensor):
            assert a.is_leaf == e.is_leaf, f"{name} input {i}: is_leaf {a.is_leaf} != {e.is_leaf}"
    for i, (a, e) in enumerate(zip(actual.storages, expected.storages, strict=True)):
        if e is not None:
            torch.testing.assert_close(a, e, **tol, msg=lambda m: f"{name} storage of input {i}: {m}")
    assert _aliasing(actual.outputs, actual.inputs) == _aliasing(expected.outputs, expected.inputs), (
        f"{name}: aliasing differs from eager: {_aliasing(actual.outputs, actual.inputs)} != "
        f"{_aliasing(expected.outputs, expected.inputs)}"
    )
    buffers = dict(expected.module.named_buffers())
    actual_buffers = dict(actual.module.named_buffers())
    assert actual_buffers.keys() == buffers.keys(), f"{name}: buffers {sorted(actual_buffers)} != eager's {sorted(buffers)}"
    for bname, value in actual_buffers.items():
        _tensor(value, buffers[bname], f"{name} buffer {bname}", tol)


def compare_grads(actual: Observation, expected: Observation, name: str, tol: dict) -> None:
    """After backward on both: every parameter's and every leaf's gradient."""
    params = dict(expected.module.named_parameters())
    actual_params = dict(actual.module.named_parameters())
    assert actual_params.keys() == params.keys(), f"{name}: parameters {sorted(actual_params)} != eager's {sorted(params)}"
    for pname, p in actual_params.items():
        e = params[pname]
        assert (p.grad is None) == (e.grad is None), f"{name}: grad of {pname} is {p.grad} vs eager {e.grad}"
        if p.grad is not None:
            torch.testing.assert_close(p.grad, e.grad, **tol, msg=lambda m: f"{name} grad of {pname}: {m}")
    leaves = [*actual.leaves, *[t for t in actual.inputs if isinstance(t, torch.Tensor) and t.is_leaf]]
    e_leaves = [*expected.leaves, *[t for t in expected.inputs if isinstance(t, torch.Tensor) and t.is_leaf]]
    assert len(leaves) == len(e_leaves), f"{name}: number of leaves"
    for i, (a, e) in enumerate(zip(leaves, e_leaves, strict=True)):
        assert (a.grad is None) == (e.grad is None), f"{name}: grad of leaf {i} is {a.grad} vs eager {e.grad}"
        if a.grad is not None:
            torch.testing.assert_close(a.grad, e.grad, **tol, msg=lambda m: f"{name} grad of leaf {i}: {m}")
