"""Models torch cannot capture whole: the graph-break report, regional bundles (regions
found automatically or by pattern, identical regions sharing one graph), and
`aotc.apply`, compared with the eager model for inference, training and generation."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys

import pytest
import torch

import aotc
from aotc.errors import BundleError, RegionError
from conftest import SAMPLES, invoke
from aotc.sources.model_file import load_model


def _line(path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def _breaks():
    return load_model(str(SAMPLES / "breaks.py"))


def test_break_report_names_every_place(tmp_path):
    source = SAMPLES / "breaks.py"
    branch, helper = _line(source, "if h.sum() > 0:  #"), _line(source, "json.dumps(")
    result = invoke("export", source, "-o", tmp_path / "b")
    assert result.exit_code == 1 and not (tmp_path / "b").exists()
    assert f"breaks.py:{branch} in forward" in result.stderr and "data-dependent branch" in result.stderr
    assert f"breaks.py:{helper} in summarize" in result.stderr and "tensor value in Python" in result.stderr
    assert "torch.cond" in result.stderr and "--regions auto" in result.stderr
    report = json.loads(invoke("export", source, "-o", tmp_path / "b", "--json").stdout)
    assert report["ok"] is False
    assert [(b["line"], b["kind"]) for b in report["breaks"]] == [
        (branch, "data-dependent branch"), (helper, "tensor value in Python"),
    ]
    assert report["breaks"][1]["stack"][0].endswith(f"breaks.py:{_line(source, 'summarize(h)')} in forward")


def test_a_break_report_leaves_the_process_as_it_was(tmp_path):
    """Dynamo's first use in a process turns torch.distributions' argument checks off for
    good; the report runs Dynamo after a failed capture, and the user's process keeps its
    checks (the sweep saw GroupViT's training-mode export pass or fail by what its process
    had run before). A fresh process: Dynamo's switch happens once per process."""
    code = (f"import sys, torch; sys.path.insert(0, {str(SAMPLES)!r})\n"
            "import aotc\n"
            "from aotc.errors import GraphBreakError\n"
            "from aotc.sources.model_file import load_model\n"
            "spec = load_model(sys.argv[1])\n"
            "assert torch.distributions.Distribution._validate_args\n"
            "try:\n"
            "    aotc.export(spec.module, (spec.args, spec.kwargs), sys.argv[2])\n"
            "except GraphBreakError:\n"
            "    print('reported', torch.distributions.Distribution._validate_args)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(SAMPLES / "breaks.py"), str(tmp_path / "b")],
                          capture_output=True, text=True, timeout=300)
    assert proc.stdout.strip() == "reported True", proc.stderr[-2000:]


def test_auto_regions_run_as_eager_with_the_glue_in_python(tmp_path):
    spec = _breaks()
    rb = aotc.export_regions(spec.module.eval(), spec.args, tmp_path / "b")
    groups = {r.fqn: r.group for r in rb.manifest.regions}
    assert groups == {"first": "g0", "second": "g0", "head": "g1"}  # the two blocks share one graph
    assert [b.kind for b in rb.manifest.breaks] == ["data-dependent branch", "tensor value in Python"]
    model = aotc.apply(tmp_path / "b", _breaks().module.eval())
    assert isinstance(model.first, aotc.runtime.LoadedModule)
    eager = _breaks().module.eval()
    for x in (spec.args[0], -spec.args[0]):  # both sides of the Python branch
        with torch.no_grad():
            assert torch.equal(model(x), eager(x))
        assert model.last_summary == eager.last_summary  # the untraceable helper ran, in Python
    # the weights are stored once: the group bundle holds the first block's, the rest the second's
    from safetensors.torch import load_file

    assert sorted(load_file(tmp_path / "b" / "weights.safetensors")) == [
        "second.fc.bias", "second.fc.weight", "second.norm.bias", "second.norm.weight",
    ]


class _CalledTwice(torch.nn.Module):
    """One block called on the whole sequence and on its first tokens (HunyuanVideo 1.5's
    refiner is called so): its region must take both lengths."""

    def __init__(self):
        super().__init__()
        self.block = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU())
        self.inner = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.block(x).sum(1) + self.block(x[:, :3]).sum(1) + self.inner(x[:, :2]).sum(1)


def test_a_region_called_at_several_sizes_takes_each(tmp_path):
    """A region whose later calls in the recording run have other shapes is exported with those
    dims dynamic, and replays every call; aotc.apply then runs as eager (it refused the second
    call's shape before)."""
    x, eager = torch.randn(2, 5, 4), _CalledTwice().eval()
    rb = aotc.export_regions(copy.deepcopy(eager), (x,), tmp_path / "b")
    assert sorted(r.fqn for r in rb.manifest.regions) == ["block", "inner"]
    model = aotc.apply(tmp_path / "b", copy.deepcopy(eager))
    with torch.no_grad():
        torch.testing.assert_close(model(x), eager(x), rtol=1e-5, atol=1e-6)


class _Positions(torch.nn.Module):
    """Called with a torch.Size, as LED's learned positional embedding is."""

    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(16, 4)

    def forward(self, shape: torch.Size):
        return self.embedding(torch.arange(shape[1]))


class _SizeArgument(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.positions = _Positions()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.proj(x) + self.positions(x.shape)


def test_a_region_called_with_a_torch_size_replays_its_call(tmp_path):
    """A region called with a torch.Size (LED's learned positional embedding in the sweep) is
    exported from a Size, not the plain tuple torch's pytree rebuilds it as: its bundle refused
    the model's own call in aotc.apply before."""
    x, eager = torch.randn(2, 5, 4), _SizeArgument().eval()
    rb = aotc.export_regions(copy.deepcopy(eager), (x,), tmp_path / "b")
    assert sorted(r.fqn for r in rb.manifest.regions) == ["positions", "proj"]
    model = aotc.apply(tmp_path / "b", copy.deepcopy(eager))
    with torch.no_grad():
        torch.testing.assert_close(model(x), eager(x), rtol=1e-5, atol=1e-6)


def test_training_through_regions_matches_eager(tmp_path):
    spec = _breaks()
    aotc.export_regions(spec.module.train(), spec.args, tmp_path / "b", graphs=("forward", "backward"))
    models = [_breaks().module.train(), aotc.apply(tmp_path / "b", _breaks().module.train())]
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in models]
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        x = torch.randn(8, 16, generator=g)
        for m, opt in zip(models, optimizers):
            opt.zero_grad()
            spec.loss(m(x), x).backward()
            opt.step()
    eager, regional = (dict(m.named_parameters()) for m in models)
    assert sorted(eager) == sorted(regional)
    for name in eager:
        torch.testing.assert_close(regional[name], eager[name], rtol=1e-5, atol=1e-6)


def test_block_stack_compiles_one_block(gpt_regions, compiled):
    spec = load_model(str(SAMPLES / "gpt_blocks.py"))
    rb = aotc.RegionalBundle.open(gpt_regions)
    assert [r.fqn for r in rb.manifest.regions] == [f"blocks.{i}" for i in range(6)]
    assert len(rb.manifest.groups) == 1
    artifacts = [f for f in gpt_regions.rglob("*.pt2") if "compiled" in f.parts]
    assert [f.relative_to(gpt_regions).as_posix() for f in artifacts] == ["groups/g0/compiled/cpu/inference.pt2"]
    import importlib.util

    module_spec = importlib.util.spec_from_file_location("gpt_blocks_sample", SAMPLES / "gpt_blocks.py")
    sample = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(sample)
    model = aotc.apply(gpt_regions, sample.build_model(), backend="aoti")
    assert model.blocks[3].backend == "aoti"
    ids = spec.args[0]
    # the Python generation loop grows the sequence: the blocks' dynamic dims follow it
    assert torch.equal(sample.generate(model, ids, 6), sample.generate(spec.module, ids, 6))
    with torch.no_grad():
        torch.testing.assert_close(model(ids[:, :5]), spec.module(ids[:, :5]), rtol=1e-4, atol=1e-5)


def test_apply_checks_the_model_first(gpt_regions):
    import importlib.util

    module_spec = importlib.util.spec_from_file_location("gpt_blocks_sample", SAMPLES / "gpt_blocks.py")
    sample = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(sample)
    with pytest.raises(RegionError, match="parameters of 'blocks.0' differ"):
        aotc.apply(gpt_regions, sample.GPT(width=32))
    shallow = sample.GPT(depth=4)
    with pytest.raises(RegionError, match="has no submodule 'blocks.4'"):
        aotc.apply(gpt_regions, shallow)
    assert all(type(b) is sample.Block for b in shallow.blocks)  # nothing was swapped before the refusal


def test_regional_bundle_integrity(gpt_regions, tmp_path):
    copy = shutil.copytree(gpt_regions, tmp_path / "g")
    (copy / "notes.txt").write_text("hi")
    with pytest.raises(BundleError, match="'notes.txt' is not listed"):
        aotc.RegionalBundle.open(copy)
    (copy / "notes.txt").unlink()
    raw = json.loads((copy / "regions.json").read_text())
    raw["regions"][0]["group"] = "g9"
    (copy / "regions.json").write_text(json.dumps(raw))
    with pytest.raises(BundleError, match="does not match its checksum"):
        aotc.RegionalBundle.open(copy)


def test_verify_and_run_take_regional_bundles(gpt_regions):
    model = str(SAMPLES / "gpt_blocks.py")
    result = invoke("verify", gpt_regions, "--model", model, "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    artifacts = {c["artifact"] for c in report["checks"]}
    assert "g0/fx" in artifacts and "model with regions (fx)" in artifacts and report["ok"]
    refused = invoke("run", gpt_regions)
    assert refused.exit_code == 2 and "--model FILE" in refused.stderr
    ran = invoke("run", gpt_regions, "--model", model, "--json")
    assert ran.exit_code == 0, ran.stderr
    assert json.loads(ran.stdout)["outputs"][0]["shape"] == [2, 16, 128]


def test_bench_takes_regional_bundles(gpt_regions):
    result = invoke("bench", gpt_regions, "--model", SAMPLES / "gpt_blocks.py", "--backend", "fx",
                    "--baselines", "eager", "--iters", "2", "--warmup", "1", "--json")
    assert result.exit_code == 0, result.stderr
    variants = [r["variant"] for r in json.loads(result.stdout)["results"]]
    assert variants == ["aotc regions fx", "eager"]
