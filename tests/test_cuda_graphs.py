"""CUDA-graph replay's refusals that need no GPU (aotc.runtime.cuda_graphs): what a load
with cuda_graphs=True refuses before it records anything, in Python and in C++, and the
fingerprint a compiled package carries for it. The replays themselves are in the CUDA
suite (tests/test_cuda.py)."""

from __future__ import annotations

import shutil

import pytest
import torch

import aotc
from aotc.errors import CudaGraphError
from test_cpp_runtime import aotc_run, cpp_build  # noqa: F401 (cpp_build: the fixture that builds the runtime)


def _refusal(path, **kwargs) -> str:
    with pytest.raises(CudaGraphError) as e:
        aotc.load(path, **kwargs)
    return str(e.value)


def test_cuda_graphs_are_refused_off_cuda_and_on_uncompiled_backends(sample_bundles, compiled):
    path = sample_bundles[("mlp", "inference")][0]
    assert _refusal(path, backend="aoti", cuda_graphs=True) == (
        "cuda_graphs=True records CUDA kernels; this module is loaded for 'cpu'. Load it with device='cuda'.")
    assert _refusal(path, backend="fx", cuda_graphs=True) == (
        "cuda_graphs=True replays compiled packages; backend 'fx' has none. Load with backend='aoti' "
        "(aotc compile BUNDLE --device cuda first).")
    assert _refusal(path, cuda_graphs=-1) == "cuda_graphs must be True, False or a number of recordings >= 1, not -1."
    assert aotc.load(path, backend="aoti", cuda_graphs=False).backend == "aoti"


def test_a_graph_that_draws_random_numbers_is_refused_for_cuda_graphs(sample_bundles, compiled):
    """tiny_transformer's dropout in train mode: a recording would replay its place in the
    random stream, not eager's draws (checked before the device, so it is seen here too)."""
    path = sample_bundles[("tiny_transformer", "autograd")][0]
    message = _refusal(path, backend="aoti", mode="train", cuda_graphs=True)
    assert message.startswith(f"Bundle '{path}': the forward graph draws random numbers (aten.native_dropout.default)")
    assert message.endswith("Load it without cuda_graphs, or export the model deterministic (eval-mode dropout).")


def test_compiled_packages_name_the_random_ops_they_draw(sample_bundles, compiled):
    def recorded(key):
        bundle = aotc.Bundle.open(sample_bundles[key][0])
        return {f.graph: f.build["random_ops"] for f in bundle.manifest.files if f.kind == "compiled"}

    assert recorded(("mlp", "inference")) == {"inference": "none"}
    assert recorded(("tiny_transformer", "autograd")) == {"forward": "aten.native_dropout.default", "backward": "none"}


def test_aotc_run_refuses_cuda_graphs_off_cuda(cpp_build, sample_bundles, compiled):
    result = aotc_run(sample_bundles[("mlp", "inference")][0], "--check", "--cuda-graphs")
    assert result.returncode == 1
    assert result.stderr.strip().endswith(
        "cuda_graphs records CUDA kernels; this module is loaded for 'cpu'. Load it for cuda.")


def test_aotc_run_warmup_leaves_the_call_as_a_single_one(cpp_build, sample_bundles, compiled, tmp_path):
    """--warmup N calls on copies of the inputs, then puts the module's state back and clears
    its gradients: the call after it writes what a single call does (inplace mutates its
    input y; mlp's forward+backward updates BatchNorm's statistics and the gradients)."""
    from safetensors.torch import load_file, save_file

    from conftest import fresh_sample

    inplace = shutil.copytree(sample_bundles[("inplace", "inference")][0], tmp_path / "inplace")
    aotc.compile(inplace)  # the session compiles mlp's bundles, not this one
    bundles = {("inplace", "inference"): inplace, ("mlp", "autograd"): sample_bundles[("mlp", "autograd")][0]}

    def run(name: str, mode: str, *flags) -> dict:
        bundle = bundles[(name, mode)]
        spec = fresh_sample(name)
        names = [u.name for u in aotc.Bundle.open(bundle).signature.user_inputs]
        save_file(dict(zip(names, [t.contiguous() for t in spec.args])), tmp_path / "in.safetensors")
        out = tmp_path / "out.safetensors"
        result = aotc_run(bundle, "--inputs", tmp_path / "in.safetensors", "--output", out, *flags)
        assert result.returncode == 0, result.stderr
        return load_file(out)

    def same(a: dict, b: dict) -> bool:
        return a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)

    assert same(run("inplace", "inference"), run("inplace", "inference", "--warmup", "2"))
    outputs = run("mlp", "autograd")
    save_file({k: torch.ones_like(v) for k, v in outputs.items()}, tmp_path / "grads.safetensors")
    once = run("mlp", "autograd", "--backward", tmp_path / "grads.safetensors")
    assert any(k.startswith("grad:") for k in once)
    assert same(once, run("mlp", "autograd", "--backward", tmp_path / "grads.safetensors", "--warmup", "2"))
