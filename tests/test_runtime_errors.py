"""Every check of the runtime names the input and both values, or says what to do."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

import aotc
from aotc.errors import InputError, ModeError
from conftest import ROOT, clone_inputs, fresh_sample


@pytest.fixture(scope="module")
def mlp(sample_bundles):
    return aotc.load(sample_bundles[("mlp", "inference")][0])


@pytest.fixture(scope="module")
def inplace(sample_bundles):
    return aotc.load(sample_bundles[("inplace", "inference")][0])


def test_wrong_count(inplace):
    with pytest.raises(InputError) as e:
        inplace(torch.randn(3, 4))
    assert str(e.value) == (
        "expected 2 input(s) (x, y) in the exported structure; got 1 in a different structure: "
        "1 positional, kwargs []."
    )


def test_wrong_static_shape(inplace):
    with pytest.raises(InputError) as e:
        inplace(torch.randn(3, 4), torch.randn(3, 5))
    assert str(e.value) == (
        "input 'y' has shape (3, 5); the bundle expects (3, 4) (no dynamic dims were exported; "
        "export with dynamic_shapes=, or aotc export --dynamic NAME:DIM)."
    )


def test_dynamic_dim_accepts_other_sizes(mlp, sample_bundles):
    spec = fresh_sample("mlp")
    eager = spec.module.eval()
    for batch in (2, 8, 33):
        x = torch.randn(batch, 16)
        torch.testing.assert_close(mlp(x), eager(x).detach(), rtol=1e-5, atol=1e-6)


def test_dynamic_dim_out_of_range(mlp):
    with pytest.raises(InputError) as e:
        mlp(torch.randn(65, 16))
    assert str(e.value) == (
        "input 'x' dim 0 is 65, outside the exported range [2, 64] of s33. Re-export with a wider range."
    )


def test_static_dim_of_dynamic_input(mlp):
    with pytest.raises(InputError, match=r"input 'x' has shape \(8, 15\); the bundle expects \(s33, 16\) \(dim 1 is static\)"):
        mlp(torch.randn(8, 15))


def test_wrong_dtype(mlp):
    with pytest.raises(InputError) as e:
        mlp(torch.randn(8, 16, dtype=torch.float64))
    assert str(e.value) == (
        "input 'x' has dtype float64; the bundle expects float32. Convert it with .to(torch.float32)."
    )


def test_wrong_device(mlp):
    with pytest.raises(InputError) as e:
        mlp(torch.randn(8, 16, device="meta"))
    assert str(e.value) == "input 'x' is on meta; the bundle was loaded for cpu. Move it with .to('cpu')."


def test_not_a_tensor(mlp):
    with pytest.raises(InputError, match="input 'x' is a float; the bundle expects a tensor."):
        mlp(1.0)


def test_train_bundle_in_eval(sample_bundles):
    path = sample_bundles[("mlp", "autograd")][0]
    with pytest.raises(ModeError) as e:
        aotc.load(path)
    assert "has only training graphs (forward, backward, captured in train mode); load it with mode='train'" in str(e.value)
    m = aotc.load(path, mode="train").eval()
    with pytest.raises(ModeError, match=r"captured in train mode \(forward, backward\); it has no eval-mode graph. Call .train\(\)"):
        m(torch.randn(8, 16))


def test_eval_bundle_in_train(sample_bundles):
    path = sample_bundles[("mlp", "inference")][0]
    with pytest.raises(ModeError, match=r"has only an eval-mode inference graph; load it with mode='eval', or export training graphs \(graphs="):
        aotc.load(path, mode="train")
    m = aotc.load(path).train()
    with pytest.raises(ModeError, match=r"captured in eval mode; it cannot run in train mode .* Call .eval\(\)"):
        m(torch.randn(8, 16))


def test_joint_bundle_is_called_through_train_step(sample_bundles):
    m = aotc.load(sample_bundles[("mlp", "joint")][0], mode="train")
    with pytest.raises(ModeError, match=r"This is a joint bundle: it runs whole training steps. Call module.train_step"):
        m(torch.randn(8, 16))
    fb = aotc.load(sample_bundles[("mlp", "autograd")][0], mode="train")
    with pytest.raises(ModeError, match="train_step needs a joint bundle; this one has forward, backward"):
        fb.train_step(torch.randn(8, 16))


def test_mutated_input_sharing_memory_is_refused(inplace):
    x = torch.randn(3, 4)
    with pytest.raises(InputError) as e:
        inplace(x, x)
    assert str(e.value) == (
        "inputs 'y' and 'x' share memory, and 'y' is mutated in place. The bundle was captured with "
        "separate tensors, so it cannot reproduce eager here. Pass separate tensors (e.g. x.clone()), "
        "or export with example inputs that share memory the same way."
    )
    base = torch.randn(6, 4)
    with pytest.raises(InputError, match="'y' and 'x' share memory"):
        inplace(base[:3], base[2:5])  # rows 2 of x and 0 of y are the same memory


def test_disjoint_views_of_one_tensor_replay(inplace):
    """Views of one storage that do not overlap are independent, as the graph assumes."""
    from conftest import fresh_sample

    eager = fresh_sample("inplace").module.eval()
    e_base = torch.randn(6, 4)
    b_base = e_base.clone()
    with torch.no_grad():
        expected = eager(e_base[:3], e_base[3:])
        actual = inplace(b_base[:3], b_base[3:])
    torch.testing.assert_close(b_base, e_base)  # y's rows were mutated in place, x's not
    for a, e in zip(actual, expected, strict=True):
        torch.testing.assert_close(a, e)


def test_captured_duplicate_must_stay_duplicate(tmp_path):
    def f(x, y):
        x.add_(1)
        return x * y

    a = torch.randn(3)
    m = aotc.load(aotc.export(f, (a, a), tmp_path / "dup").path)
    with pytest.raises(InputError) as e:
        m(torch.randn(3), torch.randn(3))
    assert str(e.value) == (
        "input 'y' was the same tensor as 'x' when the bundle was captured, and the graph treats them "
        "as one. Pass the same tensor for both, or re-export with distinct example inputs."
    )


def test_state_dict_round_trips(sample_bundles):
    for name in ("mlp", "cnn", "tiny_transformer", "classifier"):
        original = fresh_sample(name).module
        loaded = aotc.load(sample_bundles[(name, "inference")][0])
        assert list(loaded.state_dict()) == list(original.state_dict())
        loaded.load_state_dict(original.state_dict())  # strict: same keys and shapes
        assert all(isinstance(p, torch.nn.Parameter) for p in loaded.parameters())
        assert sum(p.numel() for p in loaded.parameters()) == sum(p.numel() for p in original.parameters())


def test_load_in_fresh_process_without_model_source(sample_bundles, tmp_path):
    """A new interpreter loads and runs the bundle; the model file is never imported."""
    path = sample_bundles[("tiny_transformer", "inference")][0]
    spec = fresh_sample("tiny_transformer")
    (tokens,) = clone_inputs(spec.args)
    save_file({"tokens": tokens}, str(tmp_path / "in.safetensors"))
    code = f"""
import sys
import aotc
from safetensors.torch import load_file, save_file
m = aotc.load({str(path)!r})
out = m(load_file({str(tmp_path / 'in.safetensors')!r})["tokens"])
assert not any("tiny_transformer" in name or name.startswith("aotc_model_") for name in sys.modules)
save_file({{"out": out.contiguous()}}, {str(tmp_path / 'out.safetensors')!r})
"""
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path, timeout=300)
    expected = spec.module.eval()(tokens)
    torch.testing.assert_close(load_file(str(tmp_path / "out.safetensors"))["out"], expected.detach())


def test_autocast_does_not_recast_the_captured_graph(mlp):
    """A bundle exported outside autocast refuses a call under it (eager would compute in
    bfloat16); the caller turning autocast off runs the graph as exported."""
    from aotc.errors import AmbientStateError

    x = torch.randn(8, 16)
    expected = mlp(x)
    # the float32 result eager computes outside autocast, which the bundle was captured from
    torch.testing.assert_close(expected, fresh_sample("mlp").module.eval()(x).detach(), rtol=1e-5, atol=1e-6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with pytest.raises(AmbientStateError, match="exported outside autocast .* called under autocast to bfloat16"):
            mlp(x)
        with torch.autocast("cpu", enabled=False):
            out = mlp(x)
        assert torch.is_autocast_enabled("cpu")  # restored after the call
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
