"""Shape profiles (issue 50): a bundle compiled with packages for size ranges of its dynamic
dims beside the generic one; each call runs the package made for its sizes."""

from __future__ import annotations

import json
import re
import shutil
import zipfile

import pytest
import torch

import aotc
from aotc.errors import BundleError, InputError
from conftest import fresh_sample, invoke, rehash
from test_cpp_runtime import aotc_run, cpp_build  # noqa: F401 (a fixture)

PROFILES = ("x:0=2", "x:0=3..16")
pytestmark = pytest.mark.filterwarnings("ignore::aotc.errors.UnsignedNativeCodeWarning")  # mlp's batch is dynamic from 2 (its symbol's first input: x)


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    """mlp exported with a dynamic batch, compiled generic + a static and a ranged profile."""
    root = tmp_path_factory.mktemp("profiles")
    assert invoke("export", "sample_models/mlp.py", "-o", root / "b").exit_code == 0
    result = invoke("compile", root / "b", *[a for p in PROFILES for a in ("--profile", p)], "--json")
    assert result.exit_code == 0, result.stderr
    return root / "b", json.loads(result.stdout)


def _eager():
    return fresh_sample("mlp").module.eval()


def test_each_profile_is_a_package_of_its_own(profiled):
    path, summary = profiled
    compiled = summary["compiled"]
    symbol = aotc.Bundle.open(path).metadata.user_inputs[0].dynamic_dims["0"].symbol
    assert set(compiled) == {"compiled/cpu/inference.pt2", "compiled/cpu/inference_p0.pt2",
                             "compiled/cpu/inference_p1.pt2"}
    assert compiled["compiled/cpu/inference_p0.pt2"]["build"]["profile"] == f"{symbol}=2..2"
    assert compiled["compiled/cpu/inference_p1.pt2"]["build"]["profile"] == f"{symbol}=3..16"
    assert "profile" not in compiled["compiled/cpu/inference.pt2"]["build"]

    def symbols_in_code(rel: str) -> int:  # the generic package reads its batch size at run time
        with zipfile.ZipFile(path / rel) as archive:
            code = next(archive.read(n).decode() for n in archive.namelist() if n.endswith("wrapper.cpp"))
        return len(re.findall(r"\bs\d+\b", code))

    assert symbols_in_code("compiled/cpu/inference_p0.pt2") == 0  # one size: static kernels
    assert symbols_in_code("compiled/cpu/inference_p1.pt2") > 0
    assert symbols_in_code("compiled/cpu/inference.pt2") > 0


@pytest.mark.parametrize("batch", [2, 3, 9, 16, 17, 40])
def test_every_size_matches_eager(profiled, batch):
    x = torch.randn(batch, 16)
    torch.testing.assert_close(aotc.load(profiled[0], backend="aoti")(x), _eager()(x))


def test_a_call_runs_the_first_profile_its_sizes_lie_in():
    from exporters.aoti_profiles import ProfiledGraph

    class Package:
        frozen, layouts = False, None

        def __init__(self, name):
            self.name = name
            self.fast_call = lambda args: name

        def __call__(self, *args):
            return self.name

    # (graph input position, dim, lo, hi): the batch of input 1
    graph = ProfiledGraph([([(1, 0, 2, 2)], Package("p0")), ([(1, 0, 3, 16)], Package("p1"))], Package("generic"), "")
    for batch, want in ((2, "p0"), (3, "p1"), (16, "p1"), (17, "generic")):
        args = [torch.zeros(4), torch.zeros(batch, 16)]
        assert graph(*args) == want and graph.fast_call(args) == want
    strict = ProfiledGraph([([(1, 0, 2, 2)], Package("p0"))], None, "no profile takes it")
    with pytest.raises(InputError, match="no profile takes it"):
        strict(torch.zeros(4), torch.zeros(3, 16))


def test_without_the_generic_package_a_size_outside_every_profile_is_refused(profiled, tmp_path):
    path = tmp_path / "b"
    shutil.copytree(profiled[0], path)
    bundle = aotc.compile(path, profiles=PROFILES, generic=False)
    assert bundle.manifest.file("compiled/cpu/inference.pt2") is None
    loaded = aotc.load(path, backend="aoti")
    x = torch.randn(5, 16)
    torch.testing.assert_close(loaded(x), _eager()(x))
    with pytest.raises(InputError, match=r"lie in no shape profile .*=2\.\.2, .*=3\.\.16\), which was compiled "
                                         r"without the package for every size \(--no-generic\)"):
        loaded(torch.randn(17, 16))
    # compiled again without profiles: the profiles' packages go, the generic one is back
    again = aotc.compile(path)
    assert sorted(f.path for f in again.manifest.files if f.kind == "compiled") == ["compiled/cpu/inference.pt2"]


@pytest.mark.parametrize("profiles, words", [
    (("y:0=2",), "has no dynamic dim 'y:0'; it has x:0"),
    (("x:0=1",), "1..1 is outside the sizes bundle .* accepts for x:0 \\(2\\.\\.64\\)"),
    (("x:0=8..4",), "8..4 is an empty range for x:0"),
    (("x:0=2..8", "x:0=8..16"), "profiles 'x:0=2..8' and 'x:0=8..16' of bundle .* overlap"),
    (("x:0",), "'x:0' is not DIM=SIZE or DIM=LO..HI"),
    (("x:0=2,x:0=3",), "names x:0 .* twice"),
])
def test_a_bad_profile_is_refused_by_name_before_compiling(profiled, profiles, words):
    path, _ = profiled
    with pytest.raises(InputError, match=words):
        aotc.compile(path, profiles=profiles)


def test_no_generic_without_a_profile_is_refused(profiled):
    with pytest.raises(InputError, match="no profile was given"):
        aotc.compile(profiled[0], generic=False)


def test_a_swapped_profile_package_is_refused(profiled, tmp_path):
    """Each package is hashed in the manifest and signed like every other file: one swapped
    for another (the ranged profile's code in the static profile's place) does not load,
    and where a hostile editor records the new hashes, the signature refuses it."""
    pytest.importorskip("model_signing", reason="the sign extra (make test installs it)")
    from aotc.errors import SignatureError
    from test_signing import _key_pair

    path = tmp_path / "b"
    shutil.copytree(profiled[0], path)
    private, public = _key_pair(tmp_path, "a")
    assert invoke("sign", path, "--key", private).exit_code == 0
    aotc.load(path, backend="aoti", public_keys=[public])
    shutil.copyfile(path / "compiled/cpu/inference_p1.pt2", path / "compiled/cpu/inference_p0.pt2")
    with pytest.raises(BundleError, match="inference_p0.pt2"):
        aotc.load(path, backend="aoti")
    rehash(path)
    with pytest.raises(SignatureError, match="files changed since signing: compiled/cpu/inference_p0.pt2"):
        aotc.load(path, backend="aoti", public_keys=[public])


def test_a_joint_bundle_steps_with_each_profile_as_on_fx(sample_bundles, tmp_path):
    path = tmp_path / "joint"
    shutil.copytree(sample_bundles[("mlp", "joint")][0], path)
    aotc.compile(path, profiles=PROFILES)
    compiled, fx = aotc.load(path, backend="aoti", mode="train"), aotc.load(path, backend="fx", mode="train")
    for step, batch in enumerate((2, 5, 16, 17)):
        x = torch.randn(batch, 16)
        torch.manual_seed(step)
        got = compiled.train_step(x.clone())
        torch.manual_seed(step)
        torch.testing.assert_close(got, fx.train_step(x.clone()))
        for name, value in fx.state_dict().items():
            torch.testing.assert_close(compiled.state_dict()[name], value, msg=lambda m: f"step {step}, {name}: {m}")


@pytest.mark.parametrize("batch", [2, 5])
def test_cpp_train_steps_with_each_profile_are_pythons(sample_bundles, cpp_build, tmp_path, batch):
    from safetensors.torch import load_file, save_file

    path = tmp_path / "joint"
    shutil.copytree(sample_bundles[("mlp", "joint")][0], path)
    aotc.compile(path, profiles=PROFILES)
    data = torch.randn(2, batch, 16)
    save_file({"x": data}, tmp_path / "data.safetensors")
    result = aotc_run(path, "--train-steps", 2, "--data", tmp_path / "data.safetensors", "--seed", 0,
                      "--output", tmp_path / "trained.safetensors")
    assert result.returncode == 0, result.stderr
    python = aotc.load(path, backend="aoti", mode="train")
    for step in range(2):
        torch.manual_seed(step)
        python.train_step(data[step].clone())
    for name, value in load_file(tmp_path / "trained.safetensors").items():
        assert torch.equal(value, python.state_dict()[name]), name


def test_a_forward_and_backward_bundle_is_refused_by_name_for_now(sample_bundles):
    path, _ = sample_bundles[("mlp", "autograd")]
    with pytest.raises(InputError, match="forward, backward graphs, which cannot be compiled for shape profiles yet"):
        aotc.compile(path, profiles=("x:0=2",))


def test_inspect_and_verify_show_every_profile(profiled):
    path, _ = profiled
    shown = invoke("inspect", path)
    assert shown.exit_code == 0, shown.stderr
    text = " ".join((shown.stdout + shown.stderr).split())
    assert "compiled/cpu/inference_p0.pt2: shape profile x:0=2 (s" in text
    assert "compiled/cpu/inference_p1.pt2: shape profile x:0=3..16 (s" in text
    result = invoke("verify", path, "--json")
    assert result.exit_code == 0, result.stderr
    checked = {c["artifact"] for c in json.loads(result.stdout)["checks"]}
    symbol = aotc.Bundle.open(path).metadata.user_inputs[0].dynamic_dims["0"].symbol
    # each profile at its ends and its middle (one size: once)
    assert {a for a in checked if "_p" in a} == {f"aoti/cpu inference_p0.pt2 at {symbol}=2"} | {
        f"aoti/cpu inference_p1.pt2 at {symbol}={n}" for n in (3, 9, 16)}


def _cpp_outputs(path, x, tmp_path):
    from safetensors.torch import load_file, save_file

    save_file({"x": x}, tmp_path / "in.safetensors")
    result = aotc_run(path, "--inputs", tmp_path / "in.safetensors", "--output", tmp_path / "out.safetensors")
    if result.returncode:
        return result.stderr
    (out,) = [v for k, v in load_file(tmp_path / "out.safetensors").items() if not k.startswith("after:")]
    return out


@pytest.mark.parametrize("batch", [2, 9, 17])
def test_the_cpp_runtime_picks_the_profile_python_picks(profiled, cpp_build, tmp_path, batch):
    """Bitwise Python's outputs at sizes in each profile and outside both (the generic package)."""
    x = torch.randn(batch, 16)
    out = _cpp_outputs(profiled[0], x, tmp_path)
    assert not isinstance(out, str), out
    assert torch.equal(out, aotc.load(profiled[0], backend="aoti")(x))


def test_the_cpp_runtime_refuses_sizes_outside_every_profile_without_the_generic_package(profiled, cpp_build,
                                                                                        tmp_path):
    alone = tmp_path / "alone"
    shutil.copytree(profiled[0], alone)
    aotc.compile(alone, profiles=PROFILES, generic=False)
    x = torch.randn(5, 16)
    out = _cpp_outputs(alone, x, tmp_path)
    assert not isinstance(out, str), out
    assert torch.equal(out, aotc.load(alone, backend="aoti")(x))
    refused = _cpp_outputs(alone, torch.randn(17, 16), tmp_path)
    assert isinstance(refused, str) and "lie in no shape profile of the inference graph" in refused
