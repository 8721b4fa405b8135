"""aotc compile: AOTInductor artifacts, weights stored once, cache, fingerprints, devices."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

import aotc
from aotc.errors import BundleError, InputError
from conftest import fresh_sample, invoke, rehash

pytestmark = pytest.mark.slow


def _manifest(path):
    return json.loads((path / "manifest.json").read_text())


def test_compiled_artifacts_are_listed(sample_bundles, compiled):
    path = sample_bundles[("mlp", "autograd")][0]
    files = {f["path"]: f for f in _manifest(path)["files"]}
    for kind in ("forward", "backward"):
        entry = files[f"compiled/cpu/{kind}.pt2"]
        assert entry["kind"] == "compiled" and entry["device"] == "cpu" and entry["graph"] == kind
        assert entry["build"]["torch"] == torch.__version__ and entry["build"]["device"] == "cpu"
        assert "cpu_isa" in entry["build"] and "compiler" in entry["build"]
    aotc.Bundle.open(path)  # sizes and hashes check out


def test_auto_backend_picks_compiled(sample_bundles, compiled):
    assert aotc.load(sample_bundles[("mlp", "inference")][0]).backend == "aoti"
    assert aotc.load(sample_bundles[("cnn", "inference")][0]).backend == "fx"  # not compiled


def test_aoti_without_artifacts_says_how_to_compile(sample_bundles):
    path = sample_bundles[("cnn", "inference")][0]
    with pytest.raises(BundleError) as e:
        aotc.load(path, backend="aoti")
    assert str(e.value) == (
        f"Bundle '{path}' has no compiled inference graph for cpu; it has no compiled artifacts. "
        f"Run: aotc compile {path} --device cpu"
    )


def test_dynamic_batch_without_recompiling(sample_bundles, compiled):
    m = aotc.load(sample_bundles[("mlp", "inference")][0], backend="aoti")
    eager = fresh_sample("mlp").module.eval()
    for batch in (2, 8, 64):
        x = torch.randn(batch, 16)
        torch.testing.assert_close(m(x), eager(x).detach(), rtol=1e-4, atol=1e-5)
    with pytest.raises(InputError, match="outside the exported range"):
        m(torch.randn(65, 16))


def test_weights_are_stored_once(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU())
    assert sum(p.numel() for p in model.parameters()) >= 1_000_000
    bundle = aotc.compile(aotc.export(model, (torch.randn(4, 1024),), tmp_path / "big").path)
    # sizes on disk, not as the manifest records them
    sizes = {f.kind: (bundle.path / f.path).stat().st_size for f in bundle.manifest.files}
    kinds = [f.kind for f in bundle.manifest.files]
    assert kinds.count("compiled") == kinds.count("weights") == 1
    total = sum(f.stat().st_size for f in bundle.path.rglob("*") if f.is_file())
    assert total < 1.2 * (sizes["weights"] + sizes["compiled"])
    assert sizes["compiled"] < sizes["weights"]  # 4 MiB of float32 weights are not in the package
    x = torch.randn(4, 1024)
    torch.testing.assert_close(aotc.load(bundle.path, backend="aoti")(x), model(x).detach(), rtol=1e-4, atol=1e-4)
    info = json.loads(invoke("inspect", tmp_path / "big", "--json").stdout)
    assert info["size"]["weights"] == sizes["weights"] and info["size"]["compiled"] == sizes["compiled"]


class _RoundsThroughBfloat16(torch.nn.Module):
    """Kandinsky 5's rotary embedding rounds a float32 value to bfloat16 and back."""

    def forward(self, x):
        return (x * 1.7).to(torch.bfloat16).to(torch.float32) * 3 + x


def test_a_rounding_eager_does_is_done_by_the_package(tmp_path):
    """Inductor keeps a fused kernel's intermediates in float32 unless told to emulate eager's
    casts (exporters/aoti_cache.COMPILE_OPTIONS): without it this package is 0.02 off eager."""
    x = torch.randn(64)
    path = aotc.compile(aotc.export(_RoundsThroughBfloat16(), (x,), tmp_path / "r").path).path
    torch.testing.assert_close(aotc.load(path, backend="aoti")(x), _RoundsThroughBfloat16()(x), rtol=0, atol=0)


# Inkling-2's attention over its block states (transformers' own class), its inputs laid out
# as the model's convolutions leave them (sequence innermost): torch's inductor tiles that
# kernel on two axes and stores the tail block of the reduction at full vector width.
_TAIL_STORE = """
import sys, torch, aotc
from transformers.models.inkling2.configuration_inkling2 import Inkling2TextConfig
from transformers.models.inkling2.modeling_inkling2 import Inkling2BlockAttentionResidual

torch.manual_seed(0)
model = Inkling2BlockAttentionResidual(Inkling2TextConfig(hidden_size=32)).eval()
torch.nn.init.normal_(model.query)
args = (torch.randn(2, 1, 32, 8).permute(0, 3, 1, 2), torch.randn(2, 32, 8).transpose(1, 2))
aotc.export(model, args, sys.argv[1])
aotc.compile(sys.argv[1], use_cache=False, fold=False)
got, want = aotc.load(sys.argv[1], backend="aoti")(*args), model(*args)
print(max((g - w).abs().max().item() for g, w in zip(got, want)))
"""


def test_a_kernel_inductor_would_write_past_its_output_is_compiled_within_it(tmp_path):
    """pytorch issue 196681 (open): without aotc's tail_safe_tiling the package writes past
    its output's end, "double free or corruption" (exit -6), so it runs in a process of its
    own."""
    pytest.importorskip("transformers.models.inkling2", reason="transformers with Inkling-2 (the hf extra)")
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", _TAIL_STORE, str(tmp_path / "b")], capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert float(run.stdout.split()[-1]) < 1e-5


def test_compile_cache(tmp_path):
    spec = fresh_sample("classifier")
    first = aotc.export(spec.module, spec.args, tmp_path / "a").path
    second = aotc.export(spec.module, spec.args, tmp_path / "b").path
    events = []

    def record(kind, device, event):
        events.append(event)

    aotc.compile(first, cache_dir=tmp_path / "cache", on_graph=record)
    options = aotc.CompileOptions(cache_dir=tmp_path / "cache", on_graph=record)  # the same, as a dataclass
    aotc.compile(second, options=options)
    assert events == ["start", "compiled", "start", "cached"]
    a, b = (p / "compiled/cpu/inference.pt2" for p in (first, second))
    assert a.read_bytes() == b.read_bytes()
    events.clear()
    aotc.compile(second, options=options, use_cache=False)  # a keyword overrides the dataclass's field
    assert events == ["start", "compiled"]
    with pytest.raises(TypeError, match="unexpected keyword argument 'fereze'.*freeze"):
        aotc.compile(second, fereze=True)

    # a cache entry whose metadata does not read back (a package another process was still
    # writing when inductor's cache handed it out) is compiled again, never copied
    import zipfile

    entry = next((tmp_path / "cache").glob("*.pt2"))
    with zipfile.ZipFile(a) as good, zipfile.ZipFile(entry, "w") as bad:
        for item in good.infolist():
            bad.writestr(item, b"" if item.filename.endswith(".json") else good.read(item))
    events.clear()
    aotc.compile(second, cache_dir=tmp_path / "cache", on_graph=record)
    assert events == ["start", "compiled"]
    x = spec.args[0]
    torch.testing.assert_close(aotc.load(second, backend="aoti")(x), spec.module(x))


def test_load_does_not_probe_the_cpu(sample_bundles, compiled, monkeypatch):
    from aotc import _torch_compat

    def probe():
        raise AssertionError("loading must not probe CPU features by compiling")

    monkeypatch.setattr(_torch_compat, "inductor_cpu_isa", probe)
    m = aotc.load(sample_bundles[("mlp", "inference")][0], backend="aoti")
    assert m(torch.randn(8, 16)).shape == (8, 4)


def _tamper_build(src, dst, **changes):
    shutil.copytree(src, dst)

    def edit(manifest):
        for f in manifest["files"]:
            if f["kind"] == "compiled":
                f["build"].update(changes)

    rehash(dst, edit)
    return dst


def test_artifact_for_another_cpu_is_refused(sample_bundles, compiled, tmp_path):
    from aotc.bundle.fingerprint import cpu_flags

    present = sorted(cpu_flags())[0]  # a flag this CPU has (avx512f is not on every machine)
    src = sample_bundles[("mlp", "inference")][0]
    dst = _tamper_build(src, tmp_path / "b", cpu_flags=f"{present},amx_fp8_imaginary", cpu_isa="amx")
    with pytest.raises(BundleError) as e:
        aotc.load(dst, backend="aoti")
    assert str(e.value) == (
        f"'compiled/cpu/inference.pt2' in bundle '{dst}' was built for CPU instruction set amx, but "
        "this CPU lacks amx_fp8_imaginary. Compile the bundle on this machine, or use backend='fx'."
    )
    assert aotc.load(dst, backend="fx").backend == "fx"


def test_artifact_for_another_torch_is_refused(sample_bundles, compiled, tmp_path):
    dst = _tamper_build(sample_bundles[("mlp", "inference")][0], tmp_path / "b", torch="2.99.0")
    with pytest.raises(BundleError, match=r"was built for torch 2.99.0, this is torch 2.13.0"):
        aotc.load(dst, backend="aoti")


def test_cli_compile_bundle_in_place(sample_bundles, compiled):
    path = sample_bundles[("mlp", "joint")][0]
    result = invoke("compile", path, "--json")  # already compiled: served from the cache
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert list(summary["compiled"]) == ["compiled/cpu/joint.pt2"]
    assert summary["compiled"]["compiled/cpu/joint.pt2"]["build"]["device"] == "cpu"
    assert "cached joint (cpu)" in result.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error shown when no CUDA device exists")
def test_cli_compile_cuda_without_gpu(sample_bundles):
    result = invoke("compile", sample_bundles[("mlp", "inference")][0], "--device", "cuda")
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        "Error: device 'cuda' was asked for, but no CUDA device was found (torch.cuda.is_available() is False)."
    )


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_compile_and_run(tmp_path):
    spec = fresh_sample("mlp")
    bundle = aotc.export(spec.module.eval(), spec.args, tmp_path / "m", dynamic_shapes=spec.dynamic_shapes)
    aotc.compile(bundle.path, devices=("cpu", "cuda"))
    m = aotc.load(bundle.path, device="cuda")
    assert m.backend == "aoti"
    x = spec.args[0].cuda()
    torch.testing.assert_close(m(x).cpu(), spec.module.eval()(spec.args[0]).detach(), rtol=1e-3, atol=1e-3)


def test_dynamic_view_output_is_refused_before_compiling(tmp_path):
    """A view of an input with dynamic sizes: its strides are symbolic, so a compiled graph
    (which returns a fresh tensor) could not rebuild it as eager's view: refused, not compiled."""
    from torch.export import Dim

    from aotc.errors import AotcError

    def f(x):
        return x.t(), x * 2

    bundle = aotc.export(f, (torch.randn(4, 3),), tmp_path / "b", dynamic_shapes={"x": {0: Dim("n", max=16)}})
    with pytest.raises(AotcError, match=r"output 0 of the inference graph .* is a view \(x\) with dynamic sizes"):
        aotc.compile(bundle.path)
    assert not (bundle.path / "compiled").exists()
