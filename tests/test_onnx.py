"""ONNX bundles: every sample model's inference graph through onnxruntime, joint graphs
where ONNX can express them, and clear refusals where it cannot."""

from __future__ import annotations

import json

import pytest
import torch

import aotc
from aotc._torch_compat import pytree
from conftest import SAMPLE_NAMES, SAMPLES, clone_inputs, fresh_sample, invoke

TOL = dict(rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def onnx_bundles(tmp_path_factory):
    root = tmp_path_factory.mktemp("onnx")
    out = {}
    for name in SAMPLE_NAMES:
        result = invoke("export", SAMPLES / f"{name}.py", "--onnx", "-o", root / name, "--json")
        assert result.exit_code == 0, result.stderr
        out[name] = root / name
    return out


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_inference_parity(onnx_bundles, name):
    m = aotc.load(onnx_bundles[name], backend="onnx")
    spec = fresh_sample(name)
    given, eager_inputs = clone_inputs(spec.args), clone_inputs(spec.args)
    outs = pytree.tree_leaves(m(*given))
    expected = pytree.tree_leaves(spec.module.eval()(*eager_inputs))
    for o, e in zip(outs, expected, strict=True):
        torch.testing.assert_close(o, e.detach(), **TOL)
    for a, b in zip(given, eager_inputs):  # inplace.py mutates y: applied by the epilogue
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_dynamic_batch_is_an_onnx_dynamic_axis(onnx_bundles):
    m = aotc.load(onnx_bundles["mlp"], backend="onnx")
    eager = fresh_sample("mlp").module.eval()
    for batch in (2, 37):
        x = torch.randn(batch, 16)
        torch.testing.assert_close(m(x), eager(x).detach(), **TOL)


def test_inspect_shows_onnx_without_running_it(onnx_bundles):
    path = onnx_bundles["inplace"]
    result = invoke("inspect", path)
    assert result.exit_code == 0
    assert "onnx/inference.onnx: opset 18; inputs lin_weight, lin_bias, x, y; outputs mutated_y" in " ".join(
        result.stderr.split()
    )
    files = {f["path"]: f for f in json.loads(invoke("inspect", path, "--json").stdout)["manifest"]["files"]}
    assert files["onnx/inference.onnx"]["build"]["opset"] == "18"


@pytest.mark.parametrize("name", ["inplace", "classifier"])
def test_joint_train_step_parity(tmp_path, name):
    out = tmp_path / name
    result = invoke("export", SAMPLES / f"{name}.py", "--joint", "--onnx", "-o", out)
    assert result.exit_code == 0, result.stderr
    step = aotc.load(out, backend="onnx", mode="train")
    spec = fresh_sample(name)
    eager = spec.module.train()
    inputs = clone_inputs(spec.args)
    loss = step.train_step(*clone_inputs(spec.args))
    expected = spec.loss(eager(*inputs), *inputs)
    expected.backward()
    torch.testing.assert_close(loss, expected.detach(), **TOL)
    for (n, p), (_, q) in zip(step.named_parameters(), eager.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, **TOL, msg=lambda m: f"{n}: {m}")


def test_untranslatable_operators_are_named(tmp_path):
    result = invoke("export", SAMPLES / "cnn.py", "--joint", "--onnx", "-o", tmp_path / "c")
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "Error: The joint graph cannot be exported to ONNX opset 18; operators without an ONNX translation: "
        "aten.convolution_backward.default, aten.max_pool2d_with_indices_backward.default, "
        "aten.native_batch_norm_backward.default, aten.select_backward.default, aten.threshold_backward.default."
    )
    assert not (tmp_path / "c").exists() or not (tmp_path / "c" / "onnx").exists()


def test_onnx_that_disagrees_with_the_graph_is_refused(tmp_path):
    # ONNX's training-mode BatchNormalization does not compute torch's batch statistics.
    result = invoke("export", SAMPLES / "mlp.py", "--joint", "--onnx", "-o", tmp_path / "m")
    assert result.exit_code == 1
    assert "Error: onnxruntime does not reproduce the joint graph: mutated:bn.running_mean" in result.stderr
