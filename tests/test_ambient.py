"""The global state a bundle was exported under (metadata.json `ambient`) and the calls
the runtime refuses because eager would compute something else under theirs."""

from __future__ import annotations

import json

import pytest
import torch

import aotc
from aotc.errors import AmbientStateError
from conftest import invoke


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)).eval()


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    root = tmp_path_factory.mktemp("ambient")
    x = torch.randn(2, 8)
    aotc.export(_model(), (x,), root / "plain")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        aotc.export(_model(), (x,), root / "autocast")
    aotc.export(_model(), (x,), root / "train", graphs=("forward", "backward"))
    aotc.export(_model(), (x.clone().requires_grad_(True),), root / "train_x", graphs=("forward", "backward"))
    return root


def test_the_export_state_is_recorded_and_shown(bundles):
    info = json.loads(invoke("inspect", bundles / "autocast", "--json").stdout)
    assert info["metadata"]["ambient"] == {
        "grad_enabled": True, "autocast": {"cpu": "bfloat16"}, "default_dtype": "float32",
        "deterministic": False, "torch_function_modes": [],
    }
    assert "autocast cpu to bfloat16" in invoke("inspect", bundles / "autocast").stderr


def test_autocast_must_be_as_exported(bundles):
    x = torch.randn(2, 8)
    loaded = aotc.load(bundles / "autocast")
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
        got, want = loaded(x), _model()(x)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    with pytest.raises(AmbientStateError, match="exported under autocast to bfloat16 .* called outside autocast"):
        loaded(x)
    with torch.autocast("cpu", dtype=torch.float16), pytest.raises(AmbientStateError, match="autocast to float16"):
        loaded(x)


def test_default_dtype_deterministic_and_modes_are_checked(bundles):
    loaded = aotc.load(bundles / "plain")
    x = torch.randn(2, 8)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with pytest.raises(AmbientStateError, match="default dtype is float64; .* exported with float32"):
            loaded(x)
    finally:
        torch.set_default_dtype(previous)
    torch.use_deterministic_algorithms(True)
    try:
        with pytest.raises(AmbientStateError, match="deterministic algorithms are on"):
            loaded(x)
    finally:
        torch.use_deterministic_algorithms(False)

    class Recorder(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Recorder(), pytest.raises(AmbientStateError, match="torch-function modes are active \\(.*Recorder\\)"):
        loaded(x)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), _model()(x))  # the state as exported: it runs


def test_inference_graph_refuses_inputs_that_want_a_gradient(bundles):
    x = torch.randn(2, 8, requires_grad=True)
    with pytest.raises(AmbientStateError, match="input 'input' requires grad .* no autograd history"):
        aotc.load(bundles / "plain")(x)
    with torch.no_grad():
        aotc.load(bundles / "plain")(x)
    # forward+backward graphs exported without a gradient for the input compute none either
    with pytest.raises(AmbientStateError, match="exported with it not requiring grad"):
        aotc.load(bundles / "train", mode="train")(x)
    loaded = aotc.load(bundles / "train_x", mode="train")
    loaded(x).sum().backward()
    eager_x = x.detach().clone().requires_grad_(True)
    _model()(eager_x).sum().backward()
    torch.testing.assert_close(x.grad, eager_x.grad)


@pytest.mark.parametrize("graphs", [("inference",), ("joint",), ("forward", "backward")])
def test_export_leaves_the_callers_random_state_as_it_was(tmp_path, graphs):
    """Export runs the model eagerly (its references, training mode's checks) and seeds torch
    for it: the caller's next draw is the one it would have been without the export."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5)).train(graphs != ("inference",))
    x = torch.randn(2, 8)
    loss = (lambda out, x: out.sum()) if graphs == ("joint",) else None
    torch.manual_seed(123)
    want = torch.rand(4)
    torch.manual_seed(123)
    aotc.export(model, (x,), tmp_path / "b", graphs=graphs, loss=loss)
    assert torch.equal(torch.rand(4), want)
    torch.manual_seed(123)
    aotc.export_regions(model, (x,), tmp_path / "r", regions="0", graphs=("forward", "backward")
                        if graphs != ("inference",) else graphs)
    assert torch.equal(torch.rand(4), want)
