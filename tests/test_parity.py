"""Every graph loaded back from graphs/<kind>.pt2 reproduces eager PyTorch.

Inference: user outputs and every input/buffer mutation. Joint: loss, buffer updates
and every parameter gradient. Forward + backward: outputs, buffer updates, and the
gradients for random grad_outputs. Tolerance for float32: rtol=1e-4, atol=1e-5 (the
graphs run the same aten kernels as eager; differences come only from op fusion order).
Dropout (tiny_transformer) is compared under the same seed: the captured graph calls
the same native_dropout kernel in the same order as eager, so the masks are identical.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.utils._pytree as pytree

from aotc.bundle import Bundle
from conftest import SAMPLE_NAMES, clone_inputs, fresh_sample, run_flat

TOL = dict(rtol=1e-4, atol=1e-5)


def _close(actual, expected, what):
    torch.testing.assert_close(actual, expected, **TOL, msg=lambda m: f"{what}: {m}")


def _user_inputs(spec):
    return pytree.tree_leaves((clone_inputs(spec.args), spec.kwargs))


def _mutations(bundle_outputs: dict, model, inputs: list, names: list[str]):
    """Pair each `mutated:<name>` graph output with eager's tensor after the call."""
    state = dict(model.named_buffers()) | dict(model.named_parameters())
    pairs = []
    for name, value in bundle_outputs.items():
        if name.startswith("mutated:"):
            target = name.removeprefix("mutated:")
            eager = state[target] if target in state else inputs[names.index(target)]
            pairs.append((name, value, eager))
    return pairs


def _assert_param_grads(outs: dict, signature, model, name: str) -> None:
    """Every trainable parameter has a gradient output, equal to eager's .grad."""
    grads = signature.backward.gradients_to_parameters
    assert sorted(grads.values()) == sorted(n for n, p in model.named_parameters() if p.requires_grad)
    for out_name, fqn in grads.items():
        _close(outs[out_name], model.get_parameter(fqn).grad, f"{name} grad of {fqn}")


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_inference_graph_matches_eager(sample_bundles, name):
    bundle = Bundle.open(sample_bundles[(name, "inference")][0])
    spec = fresh_sample(name)
    model = spec.module.eval()
    names = [u.name for u in bundle.signature.user_inputs]

    graph_inputs = _user_inputs(spec)
    outs = run_flat(bundle.load_program("inference"), bundle.signature.graphs["inference"], bundle.weights(), graph_inputs)

    eager_inputs = _user_inputs(spec)
    with torch.no_grad():
        expected = pytree.tree_leaves(model(*eager_inputs))
    assert {k for k in outs if k.startswith("output[")} == {f"output[{i}]" for i in range(len(expected))}
    for i, e in enumerate(expected):
        _close(outs[f"output[{i}]"], e, f"{name} output {i}")
    pairs = _mutations(outs, model, eager_inputs, names)
    if name == "inplace":
        assert [p[0] for p in pairs] == ["mutated:y"]
    for what, value, eager in pairs:
        _close(value, eager, f"{name} {what}")
    # The graph is functional: the inputs given to it are untouched.
    for given, fresh in zip(graph_inputs, _user_inputs(fresh_sample(name)), strict=True):
        torch.testing.assert_close(given, fresh, rtol=0, atol=0)


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_joint_graph_matches_eager(sample_bundles, name):
    bundle = Bundle.open(sample_bundles[(name, "joint")][0])
    spec = fresh_sample(name)
    model = copy.deepcopy(spec.module).train()
    names = [u.name for u in bundle.signature.user_inputs]

    torch.manual_seed(0)
    outs = run_flat(bundle.load_program("joint"), bundle.signature.graphs["joint"], bundle.weights(), _user_inputs(spec))

    eager_inputs = _user_inputs(spec)
    torch.manual_seed(0)
    loss = spec.loss(model(*eager_inputs), *eager_inputs)
    loss.backward()

    _close(outs["loss"], loss.detach(), f"{name} loss")
    _assert_param_grads(outs, bundle.signature.graphs["joint"], model, name)
    pairs = _mutations(outs, model, eager_inputs, names)
    if name in ("mlp", "cnn"):
        assert any(p[0].endswith(".running_mean") for p in pairs)
        assert any(p[0].endswith(".running_var") for p in pairs)
    for what, value, eager in pairs:
        _close(value, eager, f"{name} {what}")


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_forward_backward_graphs_match_eager(sample_bundles, name):
    bundle = Bundle.open(sample_bundles[(name, "autograd")][0])
    spec = fresh_sample(name)
    model = copy.deepcopy(spec.module).train()
    names = [u.name for u in bundle.signature.user_inputs]
    weights = bundle.weights()
    fw_sig = bundle.signature.graphs["forward"]
    bw_sig = bundle.signature.graphs["backward"]

    torch.manual_seed(0)
    fw = run_flat(bundle.load_program("forward"), fw_sig, weights, _user_inputs(spec))

    eager_inputs = _user_inputs(spec)
    torch.manual_seed(0)
    expected = pytree.tree_leaves(model(*eager_inputs))
    assert {k for k in fw if k.startswith("output[")} == {f"output[{i}]" for i in range(len(expected))}
    for i, e in enumerate(expected):
        _close(fw[f"output[{i}]"], e.detach(), f"{name} output {i}")
    pairs = _mutations(fw, model, eager_inputs, names)
    if name in ("mlp", "cnn"):  # train-mode BatchNorm updates its running stats in the forward graph
        assert any(p[0].endswith(".running_mean") for p in pairs)
        assert any(p[0].endswith(".running_var") for p in pairs)
    for what, value, eager in pairs:
        _close(value, eager, f"{name} {what}")

    # Random grad_outputs for every user output that takes a tangent.
    g = torch.Generator().manual_seed(1)
    tangents, eager_outs, eager_grads = {}, [], []
    for slot in bw_sig.inputs:
        if slot.role == "tangent":
            assert slot.target.startswith("output["), slot
            value = fw[slot.target]
            grad = torch.randn(value.shape, generator=g, dtype=value.dtype)
            tangents[slot.name] = grad
            eager_outs.append(expected[slot.index])
            eager_grads.append(grad)
    saved = {s.name: fw[s.name] for s in bw_sig.inputs if s.role == "saved"}
    bw = run_flat(bundle.load_program("backward"), bw_sig, weights, [], extra=saved | tangents)
    torch.autograd.backward(eager_outs, eager_grads)
    _assert_param_grads(bw, bw_sig, model, name)
