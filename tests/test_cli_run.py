"""`aotc run` through CliRunner: given inputs, random inputs, joint bundles, errors."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import clone_inputs, fresh_sample, invoke


def test_run_with_inputs_matches_eager(sample_bundles, tmp_path):
    path = sample_bundles[("inplace", "inference")][0]
    spec = fresh_sample("inplace")
    x, y = clone_inputs(spec.args)
    save_file({"x": x, "y": y}, str(tmp_path / "in.safetensors"))
    result = invoke("run", path, "--inputs", tmp_path / "in.safetensors", "--output", tmp_path / "out.safetensors", "--json")
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert [o["name"] for o in summary["outputs"]] == ["output[0]", "output[1]", "output[2]"]
    written = load_file(str(tmp_path / "out.safetensors"))
    expected = spec.module.eval()(x.clone(), y.clone())
    for i, e in enumerate(expected):
        torch.testing.assert_close(written[f"output[{i}]"], e.detach())
        assert summary["outputs"][i]["shape"] == list(e.shape)


def test_run_bundle_is_what_the_cli_prints(sample_bundles, tmp_path):
    """The library function behind `aotc run`: eager's outputs, and the CLI's JSON summary."""
    import aotc

    path = sample_bundles[("inplace", "inference")][0]
    spec = fresh_sample("inplace")
    x, y = clone_inputs(spec.args)
    save_file({"x": x, "y": y}, str(tmp_path / "in.safetensors"))
    result = aotc.run_bundle(path, inputs=tmp_path / "in.safetensors")
    expected = spec.module.eval()(x.clone(), y.clone())
    assert list(result.values) == ["output[0]", "output[1]", "output[2]"]
    for got, want in zip(result.values.values(), expected):
        torch.testing.assert_close(got, want.detach())
    printed = json.loads(invoke("run", path, "--inputs", tmp_path / "in.safetensors", "--json").stdout)
    summary = result.summary()
    assert printed.pop("seconds").keys() == summary.pop("seconds").keys() == {"load", "call"}
    assert printed == summary


def test_run_random_inputs_table(sample_bundles):
    result = invoke("run", sample_bundles[("tiny_transformer", "inference")][0])
    assert result.exit_code == 0, result.stderr
    assert "(2, 8, 50)" in result.stderr and "random (seed 0)" in result.stderr


def test_run_joint_reports_loss_and_grads(sample_bundles, tmp_path):
    spec = fresh_sample("mlp")
    (x,) = clone_inputs(spec.args)
    save_file({"x": x}, str(tmp_path / "in.safetensors"))
    result = invoke("run", sample_bundles[("mlp", "joint")][0], "--inputs", tmp_path / "in.safetensors",
                    "--output", tmp_path / "out.safetensors", "--json")
    assert result.exit_code == 0, result.stderr
    names = [o["name"] for o in json.loads(result.stdout)["outputs"]]
    assert names[0] == "loss" and "grad:fc1.weight" in names
    # the loss and every parameter's gradient are eager's, by parameter name
    written = load_file(str(tmp_path / "out.safetensors"))
    eager = spec.module.train()
    loss = spec.loss(eager(x.clone()), x.clone())
    loss.backward()
    torch.testing.assert_close(written["loss"], loss.detach(), rtol=1e-4, atol=1e-5)
    params = dict(eager.named_parameters())
    assert {n.removeprefix("grad:") for n in names if n.startswith("grad:")} == set(params)
    for fqn, p in params.items():
        torch.testing.assert_close(written[f"grad:{fqn}"], p.grad, rtol=1e-4, atol=1e-5, msg=lambda m: f"{fqn}: {m}")


def test_run_inputs_file_with_wrong_names(sample_bundles, tmp_path):
    save_file({"z": torch.zeros(3, 4)}, str(tmp_path / "in.safetensors"))
    result = invoke("run", sample_bundles[("inplace", "inference")][0], "--inputs", tmp_path / "in.safetensors")
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        f"Error: the inputs file '{tmp_path / 'in.safetensors'}' must hold one tensor per input, named x, y; "
        "missing: x, y; unexpected: z."
    )


def test_run_inputs_with_wrong_shape(sample_bundles, tmp_path):
    save_file({"x": torch.zeros(3, 4), "y": torch.zeros(2, 4)}, str(tmp_path / "in.safetensors"))
    result = invoke("run", sample_bundles[("inplace", "inference")][0], "--inputs", tmp_path / "in.safetensors")
    assert result.exit_code == 1
    assert "Error: input 'y' has shape (2, 4); the bundle expects (3, 4)" in result.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error shown when no CUDA device exists")
def test_run_on_cuda_without_gpu(sample_bundles):
    result = invoke("run", sample_bundles[("mlp", "inference")][0], "--device", "cuda")
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        "Error: device 'cuda' was asked for, but no CUDA device was found (torch.cuda.is_available() is False)."
    )
