"""Gradients as eager gives them, or a named refusal: never a silent difference.

The corpus (test_runtime_semantics.py) checks forward+backward bundles program by program,
None-ness of every gradient included. Here: inference bundles called under grad mode, joint
bundles' `.grad` (values and None-ness, custom autograd.Functions on the way), and what
capture refuses up front rather than at call.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import aotc
from aotc.errors import CaptureError, ModeError
from conftest import backend_fixture, fresh_sample

BACKENDS = ["fx", pytest.param("aoti", marks=pytest.mark.slow)]


class _HalfGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, g):
        return g * 0.5


class HeadAndSpare(nn.Module):
    """A custom Function on the way to the loss, and a parameter the loss never reaches."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(6, 4)
        self.spare = nn.Linear(6, 4)  # eager leaves its .grad None

    def forward(self, x):
        return _HalfGrad.apply(self.body(x)).relu()


def _loss(out, x):
    return out.square().mean()


class DetachedTwin(nn.Module):
    """Two outputs of one layer, the second detached: only the first has history in eager."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(5, 3)

    def forward(self, x):
        h = self.lin(x)
        return h, h.detach() * 2, h.argmax(-1)


@pytest.fixture(scope="module")
def joint_bundle(tmp_path_factory):
    torch.manual_seed(0)
    x = torch.randn(3, 6)
    return aotc.export(HeadAndSpare(), ((x,), {}), tmp_path_factory.mktemp("grads") / "joint",
                       graphs=("joint",), loss=_loss).path


@pytest.mark.parametrize("backend", BACKENDS)
def test_joint_step_keeps_custom_backward_and_none_grads(request, joint_bundle, backend):
    if backend == "aoti":
        request.getfixturevalue("compiled")
        aotc.compile(joint_bundle)
    torch.manual_seed(0)
    eager = HeadAndSpare()
    step = aotc.load(joint_bundle, backend=backend, mode="train")
    step.load_state_dict(eager.state_dict())
    tol = dict(rtol=1e-5, atol=1e-6) if backend == "fx" else dict(rtol=1e-4, atol=1e-5)
    for _ in range(2):  # .grad accumulates over steps, as in eager
        x = torch.randn(3, 6)
        expected = _loss(eager(x), x)
        expected.backward()
        loss = step.train_step(x)
        torch.testing.assert_close(loss, expected.detach(), **tol)
    for name, p in eager.named_parameters():
        q = step.get_parameter(name)
        assert (q.grad is None) == (p.grad is None), f"{name}: .grad {q.grad} vs eager's {p.grad}"
        if p.grad is not None:  # halved by the Function's own backward, as in eager
            torch.testing.assert_close(q.grad, p.grad, **tol)
    assert step.spare.weight.grad is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_inference_bundle_under_grad_mode_refuses_backward(request, sample_bundles, backend):
    backend_fixture(request, backend)
    loaded = aotc.load(sample_bundles[("mlp", "inference")][0], backend=backend)
    eager = fresh_sample("mlp").module.eval()
    x = torch.randn(4, 16)
    out, expected = loaded(x), eager(x)
    assert out.requires_grad and expected.requires_grad  # history, as eager's output has
    torch.testing.assert_close(out.detach(), expected.detach(), rtol=1e-4, atol=1e-5)
    with pytest.raises(ModeError, match=r"no backward graph.*aotc export --autograd.*torch.no_grad"):
        out.sum().backward()
    assert all(p.grad is None for p in loaded.parameters())
    with torch.no_grad():
        assert not loaded(x).requires_grad
    loaded.requires_grad_(False)  # frozen, as eager's would then be: no history at all
    eager.requires_grad_(False)
    assert loaded(x).requires_grad == eager(x).requires_grad == False  # noqa: E712


def test_only_outputs_with_history_in_eager_get_it(tmp_path):
    torch.manual_seed(0)
    model = DetachedTwin()
    x = torch.randn(2, 5)
    loaded = aotc.load(aotc.export(model, ((x,), {}), tmp_path / "b").path)
    flags = [o.requires_grad for o in loaded(x)]
    assert flags == [o.requires_grad for o in model(x)] == [True, False, False]


def test_custom_function_with_dynamic_shapes_is_refused_at_export(tmp_path):
    x = torch.randn(3, 6)
    with pytest.raises(CaptureError, match=r"custom autograd.Functions \(_HalfGrad\).*static shapes only"):
        aotc.export(HeadAndSpare(), ((x,), {}), tmp_path / "b", graphs=("forward", "backward"),
                    dynamic_shapes={"x": {0: torch.export.Dim("batch", min=2, max=16)}})


class _CountsThenHalves(nn.Module):
    """PhiMoE's router: a custom Function beside code only torch.export traces (a count read
    into Python, as its attention mask reads sizes)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(6, 4)

    def forward(self, x):
        return _HalfGrad.apply(self.body(x)) * int((x > 0).sum())


def test_a_custom_function_only_aotautograd_could_keep_is_refused_saying_why(tmp_path):
    """torch.export traces the model but would drop _HalfGrad's backward, and AOTAutograd alone
    cannot read the count: the refusal says both, not that torch.export failed."""
    with pytest.raises(CaptureError, match=r"_CountsThenHalves could not be captured: torch.export traced it, but "
                                           r"its graph cannot be used \(custom autograd.Functions _HalfGrad lose "
                                           r"their backward in torch.export\); AOTAutograd alone failed: "):
        aotc.export(_CountsThenHalves(), (torch.randn(3, 6),), tmp_path / "b", graphs=("forward", "backward"))


# ------------------------------------------ layouts the re-exported flat programs must take


class TransposedOutput(nn.Module):
    """The output is a transpose, so AOTAutograd traces the backward with its tangent laid
    out so, and views it on that layout; the runtime passes incoming gradients contiguous
    (diffusers' HunyuanImage, Sana and UNet3D in the coverage sweep)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x).transpose(1, 2)


class ChannelsLast3dConv(nn.Module):
    """A convolution of a channels-last-3d input, then a view only that layout allows:
    torch.export's trace gives the convolution a contiguous output, eager and AOTAutograd
    a channels-last one (diffusers' Mochi VAE)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv3d(8, 32, 1)

    def forward(self, x):
        y = self.conv(x.contiguous(memory_format=torch.channels_last_3d))
        return y.permute(0, 2, 1, 3, 4).reshape(4, 32, 2, 2).tanh()


@pytest.mark.parametrize("make, shape", [(TransposedOutput, (2, 64, 4)), (ChannelsLast3dConv, (2, 8, 2, 2, 2))])
def test_forward_backward_with_layouts_torch_export_traces_otherwise(tmp_path, make, shape):
    model, x = make(), torch.randn(shape)
    bundle = aotc.export(model, ((x.clone().requires_grad_(),), {}), tmp_path / "b", graphs=("forward", "backward")).path
    loaded = aotc.load(bundle, backend="fx", mode="train")
    xe, xl = x.clone().requires_grad_(), x.clone().requires_grad_()
    want, got = model(xe), loaded(xl)
    torch.testing.assert_close(got, want)
    grad = torch.randn_like(want)
    want.backward(grad)
    got.backward(grad)
    torch.testing.assert_close(xl.grad, xe.grad)
    for (name, p), q in zip(model.named_parameters(), loaded.parameters()):
        torch.testing.assert_close(q.grad, p.grad, msg=name)


def test_tied_weights_taken_twice_get_the_sum_of_their_gradients(tmp_path):
    """BLOOM's LM head is its embedding, and its graph takes that parameter once per use, with
    a gradient each: .grad is their sum, as eager's (it was the head's alone, and export's
    check refused the bundle)."""
    pytest.importorskip("transformers", reason="the hf extra (make test installs it)")
    from benchmarks.sweep.zoos import find

    model, inputs = find("transformers/bloom/causal-lm").build()
    inputs = {**inputs, "use_cache": False}
    assert model.lm_head.weight is model.transformer.word_embeddings.weight
    bundle = aotc.export(model, ((), inputs), tmp_path / "b", graphs=("forward", "backward")).path
    loaded = aotc.load(bundle, backend="fx", mode="train")
    model.train(loaded.training)
    model(**inputs).logits.square().mean().backward()
    loaded(**inputs).logits.square().mean().backward()
    want = model.transformer.word_embeddings.weight.grad
    torch.testing.assert_close(dict(loaded.named_parameters())["transformer.word_embeddings.weight"].grad, want)


def test_a_backward_whose_eager_layout_is_not_the_traced_one(tmp_path):
    """Doge's backward: softplus_backward's CPU kernel lays its result out as its
    non-contiguous gradient, where the traced (fake) layout is contiguous, and a view the
    traced layout allowed failed at run time."""
    pytest.importorskip("transformers", reason="the hf extra (make test installs it)")
    from benchmarks.sweep.zoos import find

    model, inputs = find("transformers/doge/causal-lm").build()
    inputs = {**inputs, "use_cache": False}
    bundle = aotc.export(model, ((), inputs), tmp_path / "b", graphs=("forward", "backward")).path
    loaded = aotc.load(bundle, backend="fx", mode="train")
    model.train(loaded.training)
    torch.manual_seed(0)
    model(**inputs).logits.square().mean().backward()
    torch.manual_seed(0)
    loaded(**inputs).logits.square().mean().backward()
    mine = dict(loaded.named_parameters())
    for name, p in model.named_parameters():
        if p.grad is not None:
            torch.testing.assert_close(mine[name].grad, p.grad, rtol=1e-3, atol=1e-5, msg=lambda m: f"{name}: {m}")
