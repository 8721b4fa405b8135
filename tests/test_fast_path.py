"""The runtime's fast path (aotc/runtime/fast_path.py) on compiled bundles: it gives what
the full wrapper stack gives, and every call it cannot vouch for still meets the full
stack's checks and their named errors."""

from __future__ import annotations

import shutil

import pytest
import torch
from torch.overrides import TorchFunctionMode

import aotc
from aotc.errors import AmbientStateError, InputError
from aotc.runtime.fast_path import MISS
from conftest import fresh_sample


def _compiled(sample_bundles, tmp_path_factory, name: str):
    # a copy: compiling the shared bundle would move other tests' backend="auto" to aoti
    path = tmp_path_factory.mktemp("fast") / name
    shutil.copytree(sample_bundles[(name, "inference")][0], path)
    aotc.compile(path)  # the compile cache makes this cheap after the session's first compile
    return path


@pytest.fixture(scope="module")
def mlp_path(sample_bundles, tmp_path_factory):
    return _compiled(sample_bundles, tmp_path_factory, "mlp")


@pytest.fixture(scope="module")
def inplace_path(sample_bundles, tmp_path_factory):
    return _compiled(sample_bundles, tmp_path_factory, "inplace")


@pytest.fixture
def mlp(mlp_path):
    m = aotc.load(mlp_path, backend="aoti")
    assert m._fast is not None
    # served as a frozen model: under grad mode, parameters that require grad send a call
    # to the full stack, which gives the outputs history (see test_gradients.py)
    m.requires_grad_(False)
    return m


def test_fast_path_equals_the_full_stack_and_eager(mlp):
    eager = fresh_sample("mlp").module.eval()
    for batch in (2, 8, 33):
        x = torch.randn(batch, 16)
        assert mlp._fast((x,)) is not MISS  # taken, also for the first call after load
        fast, full = mlp(x), mlp.forward(x)
        assert torch.equal(fast, full)
        torch.testing.assert_close(fast, eager(x).detach(), rtol=1e-5, atol=1e-6)
        assert not fast.requires_grad and fast.grad_fn is None


def test_fast_path_leaves_refusals_to_the_full_stack(mlp):
    x = torch.randn(8, 16)
    mlp(x)
    with pytest.raises(InputError, match="input 'x' has dtype float64"):
        mlp(x.double())
    with pytest.raises(InputError, match=r"input 'x' dim 0 is 65, outside the exported range \[2, 64\]"):
        mlp(torch.randn(65, 16))
    with pytest.raises(InputError, match="input 'x' is a int; the bundle expects a tensor"):
        mlp(3)  # never reaches the C++ tensor guard, which takes tensors only
    with pytest.raises(AmbientStateError, match="input 'x' requires grad and grad mode is on"):
        mlp(x.clone().requires_grad_())
    with pytest.raises(AmbientStateError, match="exported outside autocast"), torch.autocast("cpu"):
        mlp(x)
    torch.set_default_dtype(torch.float64)
    try:
        with pytest.raises(AmbientStateError, match="the default dtype is float64"):
            mlp(x)
    finally:
        torch.set_default_dtype(torch.float32)

    class Mode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with pytest.raises(AmbientStateError, match="torch-function modes are active"), Mode():
        mlp(x)
    assert torch.equal(mlp(x), mlp.forward(x))  # and back on the fast path


def test_inputs_laid_out_otherwise_are_copied_not_misread(mlp):
    x = torch.randn(16, 8).t()  # (8, 16), not contiguous
    assert mlp._fast((x,)) is MISS
    assert torch.equal(mlp(x), mlp(x.contiguous()))


def test_hooks_run(mlp):
    seen = []
    handle = mlp.register_forward_hook(lambda module, args, out: seen.append("module"))
    mlp(torch.randn(4, 16))
    handle.remove()
    handle = torch.nn.modules.module.register_module_forward_hook(lambda module, args, out: seen.append("global"))
    try:
        mlp(torch.randn(4, 16))
    finally:
        handle.remove()
    assert seen == ["module", "global"]


def test_replaced_and_reloaded_weights_are_used(mlp):
    x = torch.randn(8, 16)
    other = fresh_sample("mlp").module.eval()
    with torch.no_grad():
        for p in other.parameters():
            p.mul_(-0.5)
    mlp.load_state_dict(other.state_dict())  # in place
    torch.testing.assert_close(mlp(x), other(x).detach(), rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        other.fc2.weight.add_(1.0)
    mlp.fc2.weight = torch.nn.Parameter(other.fc2.weight.detach().clone())  # a new tensor
    torch.testing.assert_close(mlp(x), other(x).detach(), rtol=1e-5, atol=1e-6)


def test_mutations_and_aliases_on_the_fast_path(inplace_path):
    m = aotc.load(inplace_path, backend="aoti")
    assert m._fast is not None
    eager = fresh_sample("inplace").module.eval()
    for _ in range(2):
        x, y = torch.randn(3, 4), torch.randn(3, 4)
        ey = y.clone()
        assert m._fast((x, y.clone())) is not MISS
        h, flat_y, ht = m(x, y)
        eh, eflat_y, eht = eager(x, ey)
        torch.testing.assert_close(y, ey)  # the mutation reached the caller's tensor
        torch.testing.assert_close(h, eh.detach())
        assert flat_y.data_ptr() == y.data_ptr() and flat_y.shape == eflat_y.shape  # a view of y, as in eager
        assert ht.data_ptr() == h.data_ptr() and ht.stride() == eht.stride()  # a view of h
    x = torch.randn(3, 4)
    with pytest.raises(InputError, match="'y' and 'x' share memory"):
        m(x, x)
    base = torch.randn(6, 4)
    with pytest.raises(InputError, match="'y' and 'x' share memory"):
        m(base[:3], base[2:5])
    e_base = torch.randn(6, 4)
    b_base = e_base.clone()
    expected = eager(e_base[:3], e_base[3:])
    actual = m(b_base[:3], b_base[3:])  # disjoint views of one tensor: independent
    torch.testing.assert_close(b_base, e_base.detach())
    for a, e in zip(actual, expected, strict=True):
        torch.testing.assert_close(a, e.detach())
