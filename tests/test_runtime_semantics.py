"""The semantic corpus: eager vs. `aotc.load` of the exported bundle, call by call.

For every case, eager runs on one fresh copy of model and inputs and the loaded bundle on
another; compared afterwards: outputs (values, shapes, strides), every input's value,
shape and stride, which outputs are (or share memory with) which inputs and each other,
the module's buffers, and for training cases every gradient. Tolerance: float32 values
must agree to rtol=1e-5/atol=1e-6 (the fx backend runs the same aten kernels as eager).
"""

from __future__ import annotations

import pytest
import torch

import aotc
from aotc._torch_compat import pytree
from conftest import backend_fixture
from corpus import BY_NAME, CASES

BACKENDS = ["fx", pytest.param("aoti", marks=pytest.mark.slow)]
# fx runs eager's kernels: only rounding differs. AOTInductor fuses and reorders float
# math, so its results differ from eager by a few ulps more.
TOL = {"fx": dict(rtol=1e-5, atol=1e-6), "aoti": dict(rtol=1e-4, atol=1e-5), "onnx": dict(rtol=1e-4, atol=1e-5)}


def _shares(a, b) -> bool:
    return (
        isinstance(a, torch.Tensor)
        and isinstance(b, torch.Tensor)
        and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    )


def _aliasing(outputs: list, inputs: list) -> list:
    """For each output: which inputs it is / shares memory with, and which earlier outputs."""
    return [
        (
            [j for j, x in enumerate(inputs) if o is x],
            [j for j, x in enumerate(inputs) if _shares(o, x)],
            [k for k, p in enumerate(outputs[:i]) if _shares(o, p)],
        )
        for i, o in enumerate(outputs)
    ]


def _compare_tensor(actual, expected, what: str, tol: dict) -> None:
    if not isinstance(expected, torch.Tensor):
        assert actual == expected, what
        return
    assert isinstance(actual, torch.Tensor), f"{what}: not a tensor"
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert actual.dtype == expected.dtype, f"{what}: dtype"
    if expected.numel() > 1:
        assert actual.stride() == expected.stride(), f"{what}: stride {actual.stride()} != {expected.stride()}"
    torch.testing.assert_close(actual.detach(), expected.detach(), **tol, msg=lambda m: f"{what}: {m}")


def _compare_call(case, eager_model, loaded, tol: dict):
    e_args, e_kwargs = case.make_inputs()
    b_args, b_kwargs = case.make_inputs()
    ambient = torch.is_grad_enabled()
    torch.manual_seed(0)
    e_out = pytree.tree_leaves(eager_model(*e_args, **e_kwargs))
    e_grad_mode = torch.is_grad_enabled()
    torch.set_grad_enabled(ambient)
    torch.manual_seed(0)
    b_out = pytree.tree_leaves(loaded(*b_args, **b_kwargs))
    b_grad_mode = torch.is_grad_enabled()
    torch.set_grad_enabled(ambient)
    assert b_grad_mode == e_grad_mode, "grad mode after the call differs from eager"

    e_in = pytree.tree_leaves((e_args, e_kwargs))
    b_in = pytree.tree_leaves((b_args, b_kwargs))
    assert len(b_out) == len(e_out)
    for i, (b, e) in enumerate(zip(b_out, e_out)):
        _compare_tensor(b, e, f"{case.name} output {i}", tol)
    for i, (b, e) in enumerate(zip(b_in, e_in)):
        _compare_tensor(b, e, f"{case.name} input {i} after the call", tol)
    assert _aliasing(b_out, b_in) == _aliasing(e_out, e_in), f"{case.name}: aliasing differs from eager"
    e_buffers = dict(eager_model.named_buffers())
    for name, value in loaded.named_buffers():
        _compare_tensor(value, e_buffers[name], f"{case.name} buffer {name}", tol)
    return e_out, b_out, e_in, b_in


def _train_backward(outputs: list, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    tensors, grads = [], []
    for out in outputs:
        if isinstance(out, torch.Tensor) and out.requires_grad:
            tensors.append(out)
            grads.append(torch.randn(out.shape, generator=g, dtype=out.dtype))
    assert tensors, "a training case must have an output that requires grad"
    torch.autograd.backward(tensors, grads)


@pytest.mark.parametrize("backend", [*BACKENDS, "onnx"])
@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_eval_matches_eager(request, corpus_bundles, name, backend):
    backend_fixture(request, backend, corpus_bundles[(name, "eval")])
    if backend == "onnx" and name == "two_views_of_one_intermediate":
        # Under no_grad the graph does not return the views' base, and onnxruntime copies
        # every output: the two views come back equal in value but not sharing memory.
        request.applymarker(pytest.mark.xfail(strict=True, reason="ONNX outputs cannot share an unreturned base"))
    case = BY_NAME[name]
    loaded = aotc.load(corpus_bundles[(name, "eval")], backend=backend)
    eager = case.build().eval()
    with torch.no_grad():  # inference bundles are for serving
        _compare_call(case, eager, loaded, TOL[backend])
        # and a second call: state (buffers, mutated inputs) carries over as in eager
        _compare_call(case, eager, loaded, TOL[backend])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", [c.name for c in CASES if c.train])
def test_train_matches_eager(request, corpus_bundles, name, backend):
    backend_fixture(request, backend)
    case = BY_NAME[name]
    loaded = aotc.load(corpus_bundles[(name, "train")], backend=backend, mode="train")
    eager = case.build().train()
    tol = TOL[backend]
    e_out, b_out, e_in, b_in = _compare_call(case, eager, loaded, tol)
    _train_backward(e_out, seed=3)
    _train_backward(b_out, seed=3)
    e_params = dict(eager.named_parameters())
    for pname, p in loaded.named_parameters():
        assert (p.grad is None) == (e_params[pname].grad is None), f"{name}: grad of {pname}"
        if p.grad is not None:
            _compare_tensor(p.grad, e_params[pname].grad, f"{name} grad of {pname}", tol)
    for i, (b, e) in enumerate(zip(b_in, e_in)):
        if e.requires_grad:
            _compare_tensor(b.grad, e.grad, f"{name} grad of input {i}", tol)


def test_corpus_size():
    assert len(CASES) >= 30
