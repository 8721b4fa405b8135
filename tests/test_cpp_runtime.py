"""The C++ runtime (cpp/: libaotc_runtime and aotc-run; examples/cpp) against the Python
runtime, on the same bundles.

Inference outputs must be bitwise equal to `aotc.load(..., backend="aoti")`'s (the same
compiled package, fed the same tensors); training steps bitwise equal to the Python
`train_step` and within verify's tolerances of eager torch.optim; refusals the same
error, word for word. make test builds the C++ code first (make cpp); run alone, the
`cpp_build` fixture configures and builds it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import aotc
from aotc.bundle.cpp_support import cpp_graphs
from aotc.bundle.files import Bundle
from aotc.errors import AotcError
from aotc.tools.reference import tolerance
from conftest import ROOT, SAMPLE_NAMES, SAMPLES, clone_inputs, fresh_sample, rehash

# make test-torch builds the runtime against its own torch's libtorch, in a folder of its own
BUILD = Path(os.environ.get("AOTC_CPP_BUILD", ROOT / "build" / "cpp"))
AOTC_RUN = BUILD / "aotc-run"


@pytest.fixture(scope="session")
def cpp_build() -> Path:
    """build/cpp (or $AOTC_CPP_BUILD), configured and built (ninja does nothing when make cpp
    already built it)."""
    if not (BUILD / "build.ninja").is_file():
        subprocess.run(["cmake", "-S", ROOT / "cpp", "-B", BUILD, "-G", "Ninja", *cmake_args()], check=True,
                       capture_output=True)
    subprocess.run(["ninja", "-C", BUILD], check=True, capture_output=True)
    return BUILD


def cmake_args() -> list[str]:
    """The flags that build against this torch (a CUDA wheel wants a CUDA toolkit too)."""
    return subprocess.run([sys.executable, ROOT / "cpp" / "cmake_args.py"], check=True, capture_output=True,
                          text=True).stdout.split()


def aotc_run(*args, keys: str | None = None, **extra_env: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "AOTC_PUBLIC_KEYS"}
    if keys is not None:
        env["AOTC_PUBLIC_KEYS"] = keys
    env.update(extra_env)
    return subprocess.run([str(AOTC_RUN), *map(str, args)], capture_output=True, text=True, env=env, timeout=300)


def run_json(*args) -> dict:
    result = aotc_run(*args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def python_error(call) -> str:
    with pytest.raises(AotcError) as e:
        call()
    return str(e.value)


def _compile(path: str) -> str:
    aotc.compile(path)
    return path


def compile_all(paths: list[Path]) -> None:
    todo = [str(p) for p in paths if not any(f.kind == "compiled" for f in Bundle.open(p).manifest.files)]
    with ProcessPoolExecutor(max_workers=2, mp_context=get_context("spawn")) as pool:
        list(pool.map(_compile, todo))


def compiled_copies(sample_bundles, mode: str, names: list[str], root: Path) -> dict[str, Path]:
    """Copies of the session's sample bundles, compiled (other tests want the session's
    bundles as they are; a copy of one the session already compiled keeps its packages)."""
    paths = {name: shutil.copytree(sample_bundles[(name, mode)][0], root / f"{name}-{mode}") for name in names}
    compile_all(list(paths.values()))
    return paths


@pytest.fixture(scope="module")
def inference_bundles(sample_bundles, cpp_build, tmp_path_factory) -> dict[str, Path]:
    """Every sample model's inference bundle, compiled."""
    return compiled_copies(sample_bundles, "inference", SAMPLE_NAMES, tmp_path_factory.mktemp("cpp-inference"))


# --- inference ---------------------------------------------------------------------------


def names_of(path: Path) -> list[str]:
    return [u.name for u in Bundle.open(path).signature.user_inputs]


def run_both(path: Path, args: tuple, tmp_path: Path):
    """(Python's outputs and inputs after the call, C++'s output file, C++'s --json summary)."""
    names = names_of(path)
    save_file({n: a.contiguous() for n, a in zip(names, args)}, tmp_path / "in.safetensors")
    summary = run_json(path, "--inputs", tmp_path / "in.safetensors", "--output", tmp_path / "out.safetensors")
    inputs = clone_inputs(args)
    with torch.no_grad():
        outputs = aotc.load(path, backend="aoti")(*inputs)
    flat = torch.utils._pytree.tree_leaves(outputs)
    return flat, dict(zip(names, inputs)), load_file(tmp_path / "out.safetensors"), summary


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_inference_outputs_are_bitwise_equal_to_python(inference_bundles, name, tmp_path):
    path = inference_bundles[name]
    spec = fresh_sample(name)
    outputs, inputs_after, cpp, summary = run_both(path, tuple(spec.args), tmp_path)
    names = list(summary["outputs"])
    assert len(names) == len(outputs)
    for n, want in zip(names, outputs):
        assert cpp[n].dtype == want.dtype and cpp[n].shape == want.shape, n
        assert torch.equal(cpp[n], want), f"{name} {n}: max diff {(cpp[n] - want).abs().max()}"
    for n, value in inputs_after.items():  # an input the call mutated is written as after:NAME
        assert torch.equal(cpp.get(f"after:{n}", value), value), n


def test_a_cpu_package_keeps_the_heap_as_python_does(inference_bundles):
    """The first CPU package keeps glibc's freed heap in the process (aotc/runtime/heap.py,
    cpp/src/heap.cpp): the same conditions and the same words in either runtime."""
    from aotc.runtime import heap

    path = inference_bundles["mlp"]
    expected = "kept" if heap._glibc_version() else "off: not glibc"
    assert run_json(path, "--check")["heap"] == expected
    for env, said in [({"AOTC_KEEP_HEAP": "0"}, "off: AOTC_KEEP_HEAP=0"),
                      ({"MALLOC_TOP_PAD_": "131072"}, "off: the environment sets MALLOC_TOP_PAD_")]:
        result = aotc_run(path, "--check", "--json", **env)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["heap"] == (said if heap._glibc_version() else expected)


def test_inplace_sample_mutates_inputs_and_returns_views(inference_bundles, tmp_path):
    """inplace.py: y.add_(1) reaches the caller's y; y.view(-1) is a view of y, and
    h.transpose(0, 1) a view of the first output, as in eager."""
    spec = fresh_sample("inplace")
    x, y = clone_inputs(spec.args)
    eager = spec.module(x, y)
    _, _, cpp, summary = run_both(inference_bundles["inplace"], tuple(spec.args), tmp_path)
    assert torch.equal(cpp["after:y"], y)
    views = {n: o["views"] for n, o in summary["outputs"].items()}
    assert views == {"output[0]": None, "output[1]": "input y", "output[2]": "output output[0]"}
    assert eager[1]._base is y and eager[2]._base is eager[0]  # what those views replay
    assert summary["outputs"]["output[2]"]["shape"] == [4, 3]


def test_dynamic_sizes_inside_and_outside_the_range(inference_bundles, tmp_path):
    """mlp.py's batch is dynamic in [2, 64]: 5 runs, bitwise as Python; 1 and 65 are
    refused with Python's message."""
    path = inference_bundles["mlp"]
    x = torch.randn(5, 16, generator=torch.Generator().manual_seed(3))
    outputs, _, cpp, _ = run_both(path, (x,), tmp_path)
    assert torch.equal(cpp["output[0]"], outputs[0])
    model = aotc.load(path, backend="aoti")
    for batch in (1, 65):
        bad = torch.randn(batch, 16)
        save_file({"x": bad}, tmp_path / "bad.safetensors")
        result = aotc_run(path, "--inputs", tmp_path / "bad.safetensors", "--output", tmp_path / "o.safetensors")
        assert result.returncode == 1
        assert result.stderr.strip() == f"Error: {python_error(lambda: model(bad))}"


def test_wrong_inputs_are_refused_as_python_refuses_them(inference_bundles, tmp_path):
    path = inference_bundles["classifier"]
    model = aotc.load(path, backend="aoti")
    (name,) = names_of(path)
    for bad in (torch.randn(4, 8, dtype=torch.float64), torch.randn(4, 9)):
        save_file({name: bad}, tmp_path / "bad.safetensors")
        result = aotc_run(path, "--inputs", tmp_path / "bad.safetensors", "--output", tmp_path / "o.safetensors")
        assert (result.returncode, result.stderr.strip()) == (1, f"Error: {python_error(lambda: model(bad))}")
    save_file({"other": torch.randn(4, 8)}, tmp_path / "other.safetensors")
    result = aotc_run(path, "--inputs", tmp_path / "other.safetensors", "--output", tmp_path / "o.safetensors")
    assert result.returncode == 1 and f"has no tensor '{name}'; the bundle takes {name}." in result.stderr


# --- training ----------------------------------------------------------------------------

OPTIMIZERS = {
    "sgd": lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9),
    # eps=1e-3, as tests/test_runtime_training.py: a bias before train-mode BatchNorm has a
    # true gradient of 0, and Adam turns its rounding noise into full steps at eps=1e-8
    "adamw": lambda params: torch.optim.AdamW(params, lr=1e-2, eps=1e-3),
}
# each model and each optimizer once: the C++ runtime runs the update the joint graph holds,
# and its optimizer state; the other two pairings added two exports and AOTInductor compiles
# of joint graphs (about 45 s of a clean-clone make test) and no path of the runtime
TRAINED = [("mlp", "sgd"), ("tiny_transformer", "adamw")]
STEPS = 10


def batches(name: str, example: torch.Tensor) -> torch.Tensor:
    """STEPS batches shaped like the example input, stacked."""
    g = torch.Generator().manual_seed(7)
    if example.dtype.is_floating_point:
        return torch.randn(STEPS, *example.shape, generator=g)
    return torch.randint(0, int(example.max()) + 1, (STEPS, *example.shape), generator=g)


@pytest.fixture(scope="module")
def joint_bundles(tmp_path_factory, cpp_build) -> dict[tuple[str, str], Path]:
    """mlp as a joint bundle carrying SGD (momentum), tiny_transformer one carrying AdamW, compiled."""
    root = tmp_path_factory.mktemp("cpp-joint")
    out = {}
    for name, optimizer in TRAINED:
        spec = fresh_sample(name)
        model = spec.module.train()
        path = root / f"{name}-{optimizer}"
        aotc.export(model, tuple(spec.args), path, graphs=("joint",), loss=spec.loss,
                    optimizer=OPTIMIZERS[optimizer](model.parameters()))
        out[(name, optimizer)] = path
    compile_all(list(out.values()))
    return out


@pytest.mark.parametrize("name,optimizer", TRAINED)
def test_train_steps_equal_python_and_eager(joint_bundles, name, optimizer, tmp_path):
    path = joint_bundles[(name, optimizer)]
    spec = fresh_sample(name)
    (input_name,) = names_of(path)
    data = batches(name, spec.args[0])
    save_file({input_name: data}, tmp_path / "data.safetensors")
    summary = run_json(path, "--train-steps", STEPS, "--data", tmp_path / "data.safetensors", "--seed", 0,
                       "--output", tmp_path / "trained.safetensors", "--optimizer-state", tmp_path / "state.safetensors")
    trained = load_file(tmp_path / "trained.safetensors")

    loaded = aotc.load(path, backend="aoti", mode="train")
    eager = spec.module.train()
    opt = OPTIMIZERS[optimizer](eager.parameters())
    for step in range(STEPS):
        torch.manual_seed(step)
        loss = loaded.train_step(data[step].clone())
        assert summary["losses"][step] == loss.item(), f"step {step + 1}"
        torch.manual_seed(step)
        eager_loss = spec.loss(eager(data[step].clone()), data[step].clone())
        eager_loss.backward()
        opt.step()
        opt.zero_grad()
        torch.testing.assert_close(torch.tensor(summary["losses"][step]), eager_loss.detach(), rtol=1e-3, atol=1e-4)
    python_state, eager_state = loaded.state_dict(), eager.state_dict()
    assert trained.keys() == python_state.keys()
    for key, value in trained.items():
        assert torch.equal(value, python_state[key]), f"{key} differs from Python's train_step"
        rtol, atol = tolerance(value)
        torch.testing.assert_close(value, eager_state[key], rtol=rtol, atol=atol, msg=lambda m: f"{key}: {m}")
    state = load_file(tmp_path / "state.safetensors")
    for fqn, per in loaded.optimizer.state_dict()["state"].items():
        param = loaded.optimizer.param_groups[0]["params"][fqn]
        key = next(n for n, p in loaded.named_parameters() if p is param)
        for k, v in per.items():
            assert torch.equal(state[f"{key}/{k}"], v.reshape(state[f"{key}/{k}"].shape)), f"{key}/{k}"
    # the trained weights load back into the Python runtime
    again = aotc.load(path, backend="aoti", mode="train")
    again.load_state_dict(trained)
    assert all(torch.equal(again.state_dict()[k], v) for k, v in trained.items())


# --- refusals ----------------------------------------------------------------------------


def test_refusals_name_what_python_names(inference_bundles, tmp_path):
    """A file changed after export, a library planted in the bundle, and each refused
    before any compiled code is loaded, with the Python runtime's words."""
    spec = fresh_sample("mlp")
    save_file({"x": spec.args[0].contiguous()}, tmp_path / "in.safetensors")

    def refused(path: Path, keys: str | None = None) -> str:
        result = aotc_run(path, "--inputs", tmp_path / "in.safetensors", "--output", tmp_path / "o.safetensors", keys=keys)
        assert result.returncode == 1, result.stderr
        return result.stderr.strip()

    tampered = shutil.copytree(inference_bundles["mlp"], tmp_path / "tampered")
    with open(tampered / "weights.safetensors", "r+b") as f:
        f.seek(-4, 2)
        f.write(b"\x00\x00\x80\x7f")
    assert refused(tampered) == f"Error: {python_error(lambda: aotc.load(tampered, backend='aoti'))}"

    planted = shutil.copytree(inference_bundles["mlp"], tmp_path / "planted")
    (planted / "compiled" / "cpu" / "libevil.so").write_bytes(b"\x7fELF")
    assert refused(planted) == f"Error: {python_error(lambda: aotc.load(planted, backend='aoti'))}"

    # a link to itself: refused by what it is, never followed (following it fails with ELOOP)
    looped = shutil.copytree(inference_bundles["mlp"], tmp_path / "looped")
    (looped / "metadata.json").unlink()
    (looped / "metadata.json").symlink_to("metadata.json")
    assert refused(looped) == (f"Error: Bundle '{looped}': 'metadata.json' is a symbolic link; a bundle holds "
                               "plain files only.")
    assert refused(looped) == f"Error: {python_error(lambda: aotc.load(looped, backend='aoti'))}"


def test_signed_bundles_with_keys_configured(inference_bundles, tmp_path):
    """With a key configured: a bundle it signed runs; the same bundle with another
    package swapped in and every hash recomputed is refused before the package loads."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from aotc.bundle.signing import sign

    key = ec.generate_private_key(ec.SECP256R1())
    (tmp_path / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption()))
    public = tmp_path / "pub.pem"
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    signed = shutil.copytree(inference_bundles["mlp"], tmp_path / "signed")
    sign(signed, tmp_path / "key.pem")
    save_file({"x": fresh_sample("mlp").args[0].contiguous()}, tmp_path / "in.safetensors")
    args = (signed, "--inputs", tmp_path / "in.safetensors", "--output", tmp_path / "o.safetensors", "--json")
    result = aotc_run(*args, keys=str(public))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["signed_by"] == str(public)

    other = inference_bundles["cnn"] / "compiled" / "cpu" / "inference.pt2"
    shutil.copyfile(other, signed / "compiled" / "cpu" / "inference.pt2")
    rehash(signed)
    result = aotc_run(*args, keys=str(public))
    expected = python_error(lambda: aotc.load(signed, backend="aoti", public_keys=[public]))
    assert (result.returncode, json.loads(result.stdout)["type"]) == (1, "SignatureError")
    assert result.stderr.strip() == f"Error: {expected}"
    # with no key, the bundle's own hashes vouch for the swapped package, which then fails on
    # the mlp's inputs (the cnn's was compiled for other ones), in either runtime alike
    result = aotc_run(*args)
    model = aotc.load(signed, backend="aoti", public_keys=[])
    # aotc's line is the last: torch 2.15's AOTInductor runtime prints its error to stderr first
    assert result.stderr.strip().splitlines()[-1] == f"Error: {python_error(lambda: model(fresh_sample('mlp').args[0]))}"


def test_graphs_cpp_cannot_run_are_refused_as_inspect_says(int8_bundle):
    """A bundle with tensor subclasses (torchao's int8 weights): aotc-run refuses it for the
    reason `aotc inspect` gives (aotc/bundle/cpp_support.py mirrors cpp/src/support.cpp)."""
    graphs = cpp_graphs(Bundle.open(int8_bundle))
    result = aotc_run(int8_bundle, "--check")
    assert graphs["inference"]["refused"] == "tensor subclasses, which only trusted Python classes rebuild"
    assert result.returncode == 1
    assert result.stderr.strip() == (f"Error: Bundle '{int8_bundle}': its inference graph cannot run from C++: "
                                     f"{graphs['inference']['refused']}.")


@pytest.fixture(scope="module")
def autograd_bundles(sample_bundles, cpp_build, tmp_path_factory) -> dict[str, Path]:
    return compiled_copies(sample_bundles, "autograd", ["mlp", "tiny_transformer"], tmp_path_factory.mktemp("cpp-autograd"))


@pytest.mark.parametrize("name", ["mlp", "tiny_transformer"])
def test_forward_backward_equal_python(autograd_bundles, name, tmp_path):
    """A forward+backward bundle: forward (train mode: BatchNorm's batch statistics,
    dropout under one seed) and backward with given output gradients give Python's
    outputs and parameter gradients, bitwise."""
    path = autograd_bundles[name]
    spec = fresh_sample(name)
    (input_name,) = names_of(path)
    save_file({input_name: spec.args[0].contiguous()}, tmp_path / "in.safetensors")
    loaded = aotc.load(path, backend="aoti", mode="train")
    torch.manual_seed(3)
    out = loaded(*clone_inputs(spec.args))
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    out.backward(grad)
    save_file({"output[0]": grad}, tmp_path / "grad.safetensors")
    result = aotc_run(path, "--inputs", tmp_path / "in.safetensors", "--seed", 3, "--backward",
                      tmp_path / "grad.safetensors", "--output", tmp_path / "out.safetensors")
    assert result.returncode == 0, result.stderr
    cpp = load_file(tmp_path / "out.safetensors")
    assert torch.equal(cpp["output[0]"], out.detach())
    for fqn, p in loaded.named_parameters():
        assert torch.equal(cpp[f"grad:{fqn}"], p.grad), fqn
    assert cpp_graphs(Bundle.open(path))["backward"]["runs"]


def test_aotc_run_usage_errors(cpp_build):
    result = aotc_run()
    assert result.returncode == 2 and "Error: missing argument BUNDLE" in result.stderr
    result = aotc_run("x", "--train-steps", "ten")
    assert result.returncode == 2 and "option --train-steps takes a positive integer, not 'ten'" in result.stderr
    assert aotc_run("--help").returncode == 0


# --- the examples ------------------------------------------------------------------------


def test_examples_build_serve_and_train(inference_bundles, joint_bundles, tmp_path):
    """examples/cpp built against build/cpp's CMake package, as docs/running.md shows; serve
    answers as Python does, train's steps (with its learning-rate decay) equal Python's."""
    build = tmp_path / "examples"
    subprocess.run(["cmake", "-S", ROOT / "examples" / "cpp", "-B", build, "-G", "Ninja", f"-Daotc_DIR={BUILD}",
                    *cmake_args()], check=True, capture_output=True)
    subprocess.run(["ninja", "-C", build], check=True, capture_output=True)

    path = inference_bundles["inplace"]
    spec = fresh_sample("inplace")
    save_file(dict(zip(names_of(path), spec.args)), tmp_path / "request.safetensors")
    served = subprocess.run([build / "serve", path, tmp_path / "request.safetensors", tmp_path / "response.safetensors"],
                            capture_output=True, text=True)
    assert served.returncode == 0, served.stderr
    response = load_file(tmp_path / "response.safetensors")
    with torch.no_grad():
        want = aotc.load(path, backend="aoti")(*clone_inputs(spec.args))
    assert [torch.equal(response[f"output[{i}]"], w) for i, w in enumerate(want)] == [True] * 3

    path = joint_bundles[("mlp", "sgd")]
    data = batches("mlp", fresh_sample("mlp").args[0])
    save_file({"x": data}, tmp_path / "batches.safetensors")
    trained = subprocess.run([build / "train", path, tmp_path / "batches.safetensors", str(STEPS),
                              tmp_path / "trained.safetensors"], capture_output=True, text=True)
    assert trained.returncode == 0, trained.stderr
    loaded = aotc.load(path, backend="aoti", mode="train")
    lr = loaded.optimizer.param_groups[0]["lr"]
    for step in range(STEPS):
        loaded.optimizer.param_groups[0]["lr"] = lr * (1.0 - 0.5 * step / STEPS)
        torch.manual_seed(step)
        loaded.train_step(data[step].clone())
    assert f"step {STEPS}: loss" in trained.stdout
    weights = load_file(tmp_path / "trained.safetensors")
    assert all(torch.equal(v, loaded.state_dict()[k]) for k, v in weights.items())


def test_inspect_says_which_graphs_run_from_cpp(inference_bundles, sample_bundles):
    from conftest import invoke

    result = invoke("inspect", inference_bundles["mlp"])
    assert "C++ runtime" in result.stderr and "inference: yes, compiled for cpu" in result.stderr
    facts = json.loads(invoke("inspect", sample_bundles[("mlp", "autograd")][0], "--json").stdout)["cpp"]
    assert facts["forward"]["refused"] == "" and facts["forward"]["runs"] == (facts["forward"]["devices"] == ["cpu"])



# --- random corruptions ------------------------------------------------------------------

CPP_FUZZ_TRIALS = int(os.environ.get("AOTC_CPP_FUZZ_TRIALS", "50"))


def test_random_corruptions_end_in_named_errors(inference_bundles, tmp_path):
    """tests/fuzz.py's corruptions (half of them re-hashed, to reach the deeper parsers) of
    a weights-as-inputs bundle (mlp) and a folded one (cnn), through aotc-run: each run
    ends in results or a named error (exit 0 or 1), never aotc's internal error (2), a
    crash or a hang."""
    import random

    from fuzz import corrupt

    rng = random.Random(int(os.environ.get("AOTC_CPP_FUZZ_SEED", "20261126")))
    for name in ("mlp", "cnn"):
        save_file({n: a.contiguous() for n, a in zip(names_of(inference_bundles[name]), fresh_sample(name).args)},
                  tmp_path / f"{name}.in")
    bad = []
    for trial in range(CPP_FUZZ_TRIALS):
        name = ("mlp", "cnn")[trial % 2]
        bundle = shutil.copytree(inference_bundles[name], tmp_path / f"t{trial}")
        corruption = corrupt(bundle, tmp_path / "outside", rng)
        result = aotc_run(bundle, "--inputs", tmp_path / f"{name}.in", "--output", tmp_path / "out.safetensors")
        if result.returncode not in (0, 1) or (result.returncode == 1 and not result.stderr.startswith("Error: ")):
            bad.append(f"trial {trial} ({name}, {corruption}): exit {result.returncode}: {result.stderr.strip()[-300:]}")
        shutil.rmtree(bundle)
    assert not bad, "\n".join(bad[:5])
