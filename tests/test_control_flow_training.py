"""Training through torch.cond and torch.while_loop with parameters in branches and bodies.

Their autograd Functions are torch's own (CondAutogradOp, WhileLoopAutogradOp): torch.export
and AOTAutograd differentiate them as higher-order ops, so they are not the user Functions
aotc captures with AOTAutograd alone. Forward+backward and joint bundles (with the
optimizer's update) give eager's gradients and parameters, dynamic batch included, on fx;
cond on aoti too, while a differentiated while_loop is refused at compile by name.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.export import Dim

import aotc
from aotc.errors import AotcError


class CondNet(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: self.a(x).relu(), lambda x: self.b(x) * 2, (x,))


class WhileNet(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.step = nn.Linear(4, 4)

    def forward(self, x):
        def cond_fn(i, h):
            return i < 3

        def body_fn(i, h):
            return i + 1, self.step(h).tanh()

        return torch.while_loop(cond_fn, body_fn, (torch.tensor(0), x))[1]


def _batches():
    g = torch.Generator().manual_seed(1)
    return [torch.randn(3, 4, generator=g), -torch.randn(5, 4, generator=g).abs(), torch.randn(2, 4, generator=g).abs()]


def _check_forward_backward(model, bundle, backend):
    loaded = aotc.load(bundle, backend=backend, mode="train")
    for x in _batches():  # both branches of the cond, and other batch sizes
        eager = copy.deepcopy(model)
        loaded.zero_grad()
        out, want = loaded(x), eager(x)
        torch.testing.assert_close(out, want)
        out.square().sum().backward()
        want.square().sum().backward()
        for (name, p), q in zip(loaded.named_parameters(), eager.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, msg=name)


def _check_joint(model, bundle, backend):
    step = aotc.load(bundle, backend=backend, mode="train")
    eager = copy.deepcopy(model)
    opt = torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    for x in _batches():
        loss = step.train_step(x)
        want = eager(x).square().mean()
        want.backward()
        opt.step()
        opt.zero_grad()
        torch.testing.assert_close(loss, want.detach())
    for (name, p), q in zip(step.named_parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(p, q, msg=name)


def _export(model, path, graphs):
    x, model = _batches()[0], copy.deepcopy(model)
    kwargs = {}
    if graphs == ("joint",):
        kwargs = dict(loss=lambda out, x: out.square().mean(),
                      optimizer=torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    return aotc.export(model, (x,), path, graphs=graphs, dynamic_shapes={"x": {0: Dim("batch", min=2, max=8)}},
                       **kwargs).path


@pytest.mark.parametrize("net", [CondNet, WhileNet])
def test_forward_backward_and_joint_through_control_flow(tmp_path, net):
    model = net()
    _check_forward_backward(model, _export(model, tmp_path / "fb", ("forward", "backward")), "fx")
    _check_joint(model, _export(model, tmp_path / "joint", ("joint",)), "fx")


@pytest.mark.slow
def test_cond_trains_on_aoti(tmp_path):
    model = CondNet()
    bundle = _export(model, tmp_path / "joint", ("joint",))
    aotc.compile(bundle)
    _check_joint(model, bundle, "aoti")


@pytest.mark.slow
def test_a_differentiated_while_loop_is_refused_by_aoti_by_name(tmp_path):
    bundle = _export(WhileNet(), tmp_path / "fb", ("forward", "backward"))
    with pytest.raises(AotcError, match=r"while_loop_stack_output.*runs on the fx backend"):
        aotc.compile(bundle)
    _check_forward_backward(WhileNet(), bundle, "fx")  # the bundle is left as it was
