"""The CUDA suite (`pytest -m cuda`): every graph kind compiled for the GPU and compared with
eager on the same GPU, both runtimes, CUDA graphs, signing, verify and bench.

Without a GPU it skips, saying so; `make gpu-check` runs it on a lent one (under torch
2.11 there). AOTC_CUDA_SUITE_DEVICE=cpu runs its device-neutral tests on the CPU instead:
how the suite's own logic is checked on machines without a GPU (the CUDA-only tests,
CUDA graphs and the device refusals, still skip).

cuDNN's TF32 convolutions are turned off for the module: the bundles' references were
computed on the CPU in float32, and eager and the compiled packages call the same cuDNN
kernels under the same flag.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import pytest
import torch

import aotc
from aotc._torch_compat import pytree
from aotc.contract import optimizers
from aotc.errors import CudaGraphError, DeviceError, FrozenWeightsError, InputError, SignatureError
from aotc.sources.model_file import load_model
from aotc.tools.observe import model_args
from aotc.tools.verify import verify
from conftest import ROOT, SAMPLE_NAMES, SAMPLES, invoke, rehash
from test_cpp_runtime import aotc_run, cpp_build  # noqa: F401 (cpp_build: the fixture that builds the runtime)

DEVICE = os.environ.get("AOTC_CUDA_SUITE_DEVICE", "cuda")
ON_GPU = DEVICE.startswith("cuda")
pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(ON_GPU and not torch.cuda.is_available(),
                       reason="needs a CUDA device: make gpu-check runs this suite on a lent GPU "
                              "(AOTC_CUDA_SUITE_DEVICE=cpu runs its device-neutral tests here)"),
]
gpu_only = pytest.mark.skipif(not ON_GPU, reason="CUDA itself (CUDA graphs, devices): AOTC_CUDA_SUITE_DEVICE=cpu")
SUITE = ROOT / "aotc" / "tools" / "suite_models"
# the graph kinds of the suite, as aotc export's flags. AdamW's eps is 1e-4, not 1e-8: a
# gradient that is zero but for rounding (a bias before BatchNorm: mlp's fc1.bias) gets a
# step of lr * g / (|g| + eps), +-lr for any noise above eps, so two correct programs that
# round differently would step it apart by lr
KINDS = {
    "inference": [],
    "autograd": ["--autograd"],
    "joint-sgd": ["--joint", "--optimizer", "sgd", "--lr", "0.01", "--momentum", "0.9"],
    "joint-adamw": ["--joint", "--optimizer", "adamw", "--lr", "0.001", "--eps", "1e-4"],
}
NAMES = os.environ.get("AOTC_CUDA_SUITE_SAMPLES", ",".join(SAMPLE_NAMES)).split(",")


@pytest.fixture(scope="module", autouse=True)
def _fp32_convolutions():
    if not ON_GPU:
        yield
        return
    before = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32 = before


def _export_and_compile(source: str, flags: list[str], path: str) -> str:
    """'' when `source` exported with `flags` and compiled for DEVICE at `path`, else why not."""
    result = invoke("export", source, *flags, "-o", path)
    if result.exit_code != 0:
        return f"export: {result.stderr.strip()[-2000:]}"
    aotc.compile(path, devices=(DEVICE,))
    return ""


def build_all(jobs: dict[Path, tuple[Path, list[str]]]) -> None:
    """Each bundle at its path, exported with its flags and compiled, in parallel: on the GPU
    machine's 16 cores, most of the suite's time."""
    workers = max(1, min(len(jobs), (os.cpu_count() or 2) // 2))
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
        failed = {p: e for p, e in zip(jobs, pool.map(_export_and_compile, *zip(
            *[(str(source), flags, str(p)) for p, (source, flags) in jobs.items()]))) if e}
    assert not failed, failed


class Bundles(dict):
    """(sample, kind) -> bundle; a sample left out by AOTC_CUDA_SUITE_SAMPLES skips its tests."""

    def __missing__(self, key):
        pytest.skip(f"{key[0]} is not among AOTC_CUDA_SUITE_SAMPLES ({','.join(NAMES)})")


@pytest.fixture(scope="module")
def cuda_bundles(tmp_path_factory) -> Bundles:
    """(sample, kind) -> its bundle, compiled for DEVICE."""
    root = tmp_path_factory.mktemp("cuda")
    jobs = {root / f"{name}-{kind}": (SAMPLES / f"{name}.py", flags) for name in NAMES for kind, flags in KINDS.items()}
    build_all(jobs)
    return Bundles({(name, kind): root / f"{name}-{kind}" for name in NAMES for kind in KINDS})


def _on(tree, device=DEVICE):
    return pytree.tree_map_only(torch.Tensor, lambda t: t.to(device), tree)


def _clone(tree):
    return pytree.tree_map_only(torch.Tensor, lambda t: t.clone(), tree)


# ------------------------------------------------------------- every sample, every kind


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("name", NAMES)
def test_every_sample_in_every_graph_kind_matches_eager_on_the_gpu(cuda_bundles, name, kind):
    """verify on DEVICE alone: the fx graphs and the compiled package against the bundle's
    references and against eager rebuilt on the same device (outputs, mutated inputs,
    buffers, gradients, the optimizer's state after its step)."""
    report = verify(cuda_bundles[(name, kind)], model=str(SAMPLES / f"{name}.py"), samples=2, device=DEVICE)
    failed = [f"{c.artifact} {c.name}: {c.note} (max abs {c.max_abs:.2e})" for c in report.checks if not c.passed]
    assert report.ok, "\n".join(failed + report.integrity)
    labels = {c.artifact for c in report.checks}
    assert f"aoti/{DEVICE} vs eager (sample 2)" in labels, labels


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
@pytest.mark.parametrize("name", NAMES)
def test_three_steps_of_a_joint_bundle_and_its_optimizer_match_eager(cuda_bundles, name, optimizer):
    """Three train_steps against torch.optim's steps on the same device: the loss of each,
    then every parameter, buffer and optimizer state tensor."""
    path = cuda_bundles[(name, f"joint-{optimizer}")]
    spec = load_model(str(SAMPLES / f"{name}.py"))
    bundle = aotc.Bundle.open(path)
    eager = spec.module.to(DEVICE).train(bundle.metadata.training)
    opt = optimizers.build(bundle.metadata.optimizer, eager, bundle.optimizer_state())
    loaded = aotc.load(path, backend="aoti", device=DEVICE, mode="train")
    loss_fn = spec.training_loss()
    args, kwargs = _on((spec.args, spec.kwargs))
    for step in range(3):
        torch.manual_seed(step)
        ours = loaded.train_step(*_clone(args), **_clone(kwargs))
        torch.manual_seed(step)
        a, k = _clone(args), _clone(kwargs)
        loss = loss_fn(eager(*model_args(loss_fn, a), **k), *a, **k)
        loss.backward()
        opt.step()
        opt.zero_grad()
        torch.testing.assert_close(ours, loss.detach(), rtol=1e-4, atol=1e-5, msg=f"step {step + 1}'s loss")
    state = dict(loaded.named_parameters()) | dict(loaded.named_buffers())
    for fqn, tensor in list(eager.named_parameters()) + list(eager.named_buffers()):
        torch.testing.assert_close(state[fqn], tensor, rtol=1e-4, atol=1e-5, msg=fqn)
    ours_state = {(n, k): v for n, p in loaded.named_parameters() for k, v in loaded.optimizer.state[p].items()}
    for n, p in eager.named_parameters():
        for k, v in opt.state[p].items():
            torch.testing.assert_close(ours_state[(n, k)].to(v.device), v, rtol=1e-4, atol=1e-5, msg=f"{n}/{k}")


def test_a_dynamic_batch_inside_its_range_matches_eager_and_outside_is_refused(cuda_bundles):
    path = cuda_bundles[("mlp", "inference")]
    spec = load_model(str(SAMPLES / "mlp.py"))
    eager = spec.module.to(DEVICE).eval()
    loaded = aotc.load(path, backend="aoti", device=DEVICE)
    for batch in (2, 5, 64):
        x = torch.randn(batch, 16, device=DEVICE)
        with torch.no_grad():
            torch.testing.assert_close(loaded(x), eager(x), rtol=1e-4, atol=1e-5)
    with pytest.raises(InputError, match=r"input 'x' dim 0 is 65, outside the exported range \[2, 64\] of \w+"):
        loaded(torch.randn(65, 16, device=DEVICE))


@gpu_only
def test_tensors_on_another_device_are_refused_by_name(cuda_bundles):
    path = cuda_bundles[("mlp", "inference")]
    on_gpu = aotc.load(path, backend="aoti", device="cuda")
    with pytest.raises(InputError, match=r"input 'x' is on cpu; the bundle was loaded for cuda"):
        on_gpu(torch.randn(4, 16))
    cpu_bundle = shutil.copytree(path, path.parent / "mlp-cpu")
    aotc.compile(cpu_bundle)
    on_cpu = aotc.load(cpu_bundle, backend="aoti", device="cpu")
    with pytest.raises(InputError, match=r"input 'x' is on cuda:0; the bundle was loaded for cpu"):
        on_cpu(torch.randn(4, 16, device="cuda"))
    beyond = f"cuda:{torch.cuda.device_count()}"
    with pytest.raises(DeviceError) as e:
        aotc.load(path, backend="aoti", device=beyond)
    assert str(e.value) == f"device '{beyond}' is not present: this machine has {torch.cuda.device_count()} GPU(s)."


# ------------------------------------------------------------- dtypes, autocast


def _small_mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 32)).eval()


@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 2e-2), (torch.float16, 5e-3)], ids=["bf16", "fp16"])
def test_a_half_precision_model_matches_eager_in_its_dtype(tmp_path, dtype, tol):
    model = _small_mlp().to(dtype)
    x = torch.randn(8, 64, dtype=dtype)
    path = aotc.export(model, (x,), tmp_path / "b").path
    aotc.compile(path, devices=(DEVICE,))
    eager = model.to(DEVICE)
    for backend in ("fx", "aoti"):
        loaded = aotc.load(path, backend=backend, device=DEVICE)
        out = loaded(x.to(DEVICE))
        assert out.dtype == dtype
        with torch.no_grad():
            torch.testing.assert_close(out, eager(x.to(DEVICE)), rtol=tol, atol=tol, msg=backend)


def test_a_capture_under_autocast_holds_its_casts(tmp_path):
    """Captured under CPU autocast (the graph holds the casts), compiled for the GPU, and
    called outside CUDA autocast: eager under CUDA autocast, to the same dtype, is the
    reference. On the CPU the call is made under the autocast it was exported in."""
    model = _small_mlp()
    x = torch.randn(8, 64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        path = aotc.export(model, (x,), tmp_path / "b").path
    aotc.compile(path, devices=(DEVICE,))
    eager = model.to(DEVICE)
    with torch.no_grad(), torch.autocast(torch.device(DEVICE).type, dtype=torch.bfloat16):
        expected = eager(x.to(DEVICE))
    called_in = torch.autocast("cpu", dtype=torch.bfloat16) if not ON_GPU else contextlib.nullcontext()
    for backend in ("fx", "aoti"):
        with called_in:
            out = aotc.load(path, backend=backend, device=DEVICE)(x.to(DEVICE))
        assert out.dtype == torch.bfloat16
        torch.testing.assert_close(out, expected, rtol=2e-2, atol=2e-2, msg=backend)


# ------------------------------------------------------------- model libraries


@pytest.fixture(scope="module")
def library_bundles(tmp_path_factory) -> dict[str, Path]:
    """transformers' GPT-2 and BERT, diffusers' UNet2DConditionModel (the benchmark suite's
    model files: built from configs), compiled for DEVICE."""
    pytest.importorskip("transformers")
    pytest.importorskip("diffusers")
    root = tmp_path_factory.mktemp("libraries")
    names = ("gpt2", "bert", "unet2d_condition")
    build_all({root / name: (SUITE / f"{name}.py", []) for name in names})
    return {name: root / name for name in names}


@pytest.mark.parametrize("backend", ["fx", "aoti"])
@pytest.mark.parametrize("name,field", [("gpt2", "logits"), ("bert", "last_hidden_state"),
                                        ("unet2d_condition", "sample")])
def test_model_libraries_run_with_user_code_written_for_eager(library_bundles, name, field, backend):
    spec = load_model(str(SUITE / f"{name}.py"))
    eager = spec.module.to(DEVICE).eval()
    args, kwargs = _on((spec.args, spec.kwargs))
    loaded = aotc.load(library_bundles[name], backend=backend, device=DEVICE)
    with torch.no_grad():
        expected = eager(*args, **kwargs)
        out = loaded(*args, **kwargs)
    torch.testing.assert_close(getattr(out, field), getattr(expected, field), rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(out[0], expected[0], rtol=1e-3, atol=1e-3)


# ------------------------------------------------------------- weights


def test_new_weights_reach_the_compiled_package_and_a_frozen_one_refuses_them(cuda_bundles, tmp_path):
    path = cuda_bundles[("mlp", "inference")]
    spec = load_model(str(SAMPLES / "mlp.py"))
    eager = spec.module.eval()
    new = {k: v + 0.25 if v.is_floating_point() else v for k, v in eager.state_dict().items()}
    eager.load_state_dict(new)
    eager = eager.to(DEVICE)
    loaded = aotc.load(path, backend="aoti", device=DEVICE)
    loaded.load_state_dict(new)
    x = torch.randn(6, 16, device=DEVICE)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), eager(x), rtol=1e-4, atol=1e-5)
    frozen = shutil.copytree(path, tmp_path / "frozen")
    aotc.compile(frozen, devices=(DEVICE,), freeze=True)
    loaded = aotc.load(frozen, backend="aoti", device=DEVICE)
    with pytest.raises(FrozenWeightsError):
        loaded.load_state_dict(new)


# ------------------------------------------------------------- signing


def test_a_signed_bundle_with_gpu_packages_loads_and_a_swapped_package_is_refused(cuda_bundles, tmp_path):
    pytest.importorskip("model_signing", reason="the sign extra")
    from test_signing import _key_pair

    private, public = _key_pair(tmp_path, "publisher")
    path = shutil.copytree(cuda_bundles[("mlp", "inference")], tmp_path / "signed")
    assert invoke("sign", path, "--key", private).exit_code == 0
    x = torch.randn(4, 16, device=DEVICE)
    expected = aotc.load(cuda_bundles[("mlp", "inference")], backend="aoti", device=DEVICE)(x)
    torch.testing.assert_close(aotc.load(path, backend="aoti", device=DEVICE, public_keys=[public])(x), expected)
    package = f"compiled/{torch.device(DEVICE).type}/inference.pt2"
    shutil.copyfile(cuda_bundles[("cnn", "inference")] / package, path / package)
    rehash(path)  # the manifest agrees with the new package; the signature does not
    with pytest.raises(SignatureError):
        aotc.load(path, backend="aoti", device=DEVICE, public_keys=[public])


# ------------------------------------------------------------- the CLI


def test_verify_and_bench_on_the_device(cuda_bundles):
    path = cuda_bundles[("tiny_transformer", "inference")]
    result = invoke("verify", path, "--model", SAMPLES / "tiny_transformer.py", "--device", DEVICE, "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    labels = {c["artifact"] for c in json.loads(result.stdout)["checks"]}
    assert {f"aoti/{DEVICE}", f"aoti/{DEVICE} vs eager (sample 1)"} <= labels
    result = invoke("bench", path, "--device", DEVICE, "--iters", "20", "--warmup", "5", "--baselines", "eager,raw",
                    "--model", SAMPLES / "tiny_transformer.py", "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    rows = {r["variant"] for r in json.loads(result.stdout)["results"]}
    assert {f"aotc aoti/{DEVICE}", "eager"} <= rows, rows


# ------------------------------------------------------------- the C++ runtime


def _python_outputs(path: Path, inputs: dict, cuda_graphs: bool) -> dict:
    loaded = aotc.load(path, backend="aoti", device=DEVICE, cuda_graphs=cuda_graphs)
    names = [u.name for u in aotc.Bundle.open(path).signature.user_inputs]
    calls = 3 if cuda_graphs else 1  # a recording replays from the second call on
    for _ in range(calls):
        given = [inputs[n].to(DEVICE).clone() for n in names]
        out = loaded(*given)
    leaves = pytree.tree_leaves(out)
    return {"leaves": [t.cpu() for t in leaves], "after": {n: t.cpu() for n, t in zip(names, given)}}


@pytest.mark.parametrize("cuda_graphs", [False, pytest.param(True, marks=gpu_only)], ids=["plain", "cuda_graphs"])
@pytest.mark.parametrize("name", ["mlp", "tiny_transformer", "inplace"])
def test_the_cpp_runtime_serves_bitwise_as_python(cpp_build, cuda_bundles, tmp_path, name, cuda_graphs):
    from safetensors.torch import load_file, save_file

    path = cuda_bundles[(name, "inference")]
    spec = load_model(str(SAMPLES / f"{name}.py"))
    names = [u.name for u in aotc.Bundle.open(path).signature.user_inputs]
    inputs = dict(zip(names, [t.contiguous() for t in spec.args]))
    save_file(inputs, tmp_path / "in.safetensors")
    flags = ["--cuda-graphs", "--warmup", "2"] if cuda_graphs else []
    result = aotc_run(path, "--inputs", tmp_path / "in.safetensors", "--output", tmp_path / "out.safetensors",
                      "--device", DEVICE, *flags)
    assert result.returncode == 0, result.stderr
    ours = load_file(tmp_path / "out.safetensors")
    python = _python_outputs(path, inputs, cuda_graphs)
    outputs = [v for k, v in ours.items() if not k.startswith("after:")]
    assert len(outputs) == len(python["leaves"])
    for a, b in zip(outputs, python["leaves"]):
        assert torch.equal(a, b)
    for n, after in python["after"].items():
        if f"after:{n}" in ours:
            assert torch.equal(ours[f"after:{n}"], after), n


@pytest.mark.parametrize("cuda_graphs", [False, pytest.param(True, marks=gpu_only)], ids=["plain", "cuda_graphs"])
def test_the_cpp_runtime_trains_bitwise_as_python(cpp_build, cuda_bundles, tmp_path, cuda_graphs):
    from safetensors.torch import load_file, save_file

    path = cuda_bundles[("mlp", "joint-sgd")]
    spec = load_model(str(SAMPLES / "mlp.py"))
    x = spec.args[0]
    save_file({"x": torch.stack([x, x * 0.5, x + 1]).contiguous()}, tmp_path / "data.safetensors")
    flags = ["--cuda-graphs"] if cuda_graphs else []
    result = aotc_run(path, "--train-steps", "3", "--data", tmp_path / "data.safetensors", "--output",
                      tmp_path / "trained.safetensors", "--device", DEVICE, *flags)
    assert result.returncode == 0, result.stderr
    loaded = aotc.load(path, backend="aoti", device=DEVICE, mode="train", cuda_graphs=cuda_graphs)
    for batch in (x, x * 0.5, x + 1):
        loaded.train_step(batch.to(DEVICE))
    trained = load_file(tmp_path / "trained.safetensors")
    state = dict(loaded.named_parameters()) | dict(loaded.named_buffers())
    for name, value in trained.items():
        assert torch.equal(value, state[name].cpu()), name


# ------------------------------------------------------------- CUDA graphs


@gpu_only
def test_cuda_graphs_replay_the_package_bitwise_and_record_each_shape(cuda_bundles):
    path = cuda_bundles[("mlp", "inference")]
    plain = aotc.load(path, backend="aoti", device="cuda")
    graphed = aotc.load(path, backend="aoti", device="cuda", cuda_graphs=True)
    earlier = []
    for batch in (4, 4, 4, 9, 9, 4):
        x = torch.randn(batch, 16, device="cuda")
        out = graphed(x)
        assert torch.equal(out, plain(x))
        earlier.append((out, out.clone()))
    for out, copy in earlier:  # a replay never overwrites what an earlier call returned
        assert torch.equal(out, copy)


@gpu_only
def test_cuda_graphs_apply_mutations_to_the_callers_tensors_and_keep_aliases(cuda_bundles):
    path = cuda_bundles[("inplace", "inference")]
    eager = load_model(str(SAMPLES / "inplace.py")).module.cuda().eval()
    graphed = aotc.load(path, backend="aoti", device="cuda", cuda_graphs=True)
    for _ in range(3):
        x, y = torch.randn(3, 4, device="cuda"), torch.randn(3, 4, device="cuda")
        y_eager = y.clone()
        with torch.no_grad():
            h, flat, t = graphed(x, y)
            he, flate, te = eager(x, y_eager)
        torch.testing.assert_close(y, y_eager, rtol=0, atol=0)  # y.add_(1) reached the caller's y
        torch.testing.assert_close(h, he, rtol=1e-5, atol=1e-6)
        assert flat.data_ptr() == y.data_ptr()  # y.view(-1), a view of the caller's y, as eager's
        torch.testing.assert_close(t, te, rtol=1e-5, atol=1e-6)


@gpu_only
def test_cuda_graphs_past_their_recordings_are_refused_by_name(cuda_bundles):
    graphed = aotc.load(cuda_bundles[("mlp", "inference")], backend="aoti", device="cuda", cuda_graphs=2)
    graphed(torch.randn(2, 16, device="cuda"))
    graphed(torch.randn(3, 16, device="cuda"))
    graphed(torch.randn(3, 16, device="cuda"))
    with pytest.raises(CudaGraphError, match=r"has recorded 2 input shapes .*its limit; this call's \[\(4, 16\)\]"):
        graphed(torch.randn(4, 16, device="cuda"))


@gpu_only
def test_cuda_graphs_train_bitwise_as_the_plain_package(cuda_bundles):
    for kind in ("joint-sgd", "joint-adamw"):
        path = cuda_bundles[("mlp", kind)]
        plain = aotc.load(path, backend="aoti", device="cuda", mode="train")
        graphed = aotc.load(path, backend="aoti", device="cuda", mode="train", cuda_graphs=True)
        for step in range(4):
            x = torch.randn(8, 16, device="cuda", generator=torch.Generator("cuda").manual_seed(step))
            assert torch.equal(graphed.train_step(x), plain.train_step(x)), f"{kind} step {step + 1}"
        for (name, a), (_, b) in zip(graphed.state_dict().items(), plain.state_dict().items()):
            assert torch.equal(a, b), f"{kind}: {name}"


@gpu_only
def test_cuda_graphs_forward_and_backward_match_the_plain_package(cuda_bundles):
    path = cuda_bundles[("mlp", "autograd")]
    plain = aotc.load(path, backend="aoti", device="cuda", mode="train")
    graphed = aotc.load(path, backend="aoti", device="cuda", mode="train", cuda_graphs=True)
    for step in range(3):
        x = torch.randn(8, 16, device="cuda")
        for m in (plain, graphed):
            m.zero_grad()
            m(x).pow(2).sum().backward()
        for (name, a), (_, b) in zip(graphed.named_parameters(), plain.named_parameters()):
            assert torch.equal(a.grad, b.grad), f"step {step + 1}: {name}"


@gpu_only
def test_a_cpu_tensor_reaching_a_recorded_package_is_refused_by_name():
    from aotc.runtime.cuda_graphs import CudaGraphOptions, CudaGraphRun

    run = CudaGraphRun(lambda args: [args[0] * 2], ["user_input"], CudaGraphOptions(), "the test graph")
    x = torch.ones(3, device="cuda")
    assert torch.equal(run([x])[0], x * 2)
    assert torch.equal(run([x])[0], x * 2)
    with pytest.raises(CudaGraphError, match=r"input 0 of the test graph is a tensor on cpu"):
        run([torch.ones(4)])
