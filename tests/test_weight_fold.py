"""The default CPU compile: inference graphs compiled frozen (BatchNorm folded into the
convolutions, weights prepacked for oneDNN), the package without its weights, which
aotc folds in at load and again whenever they change (exporters/weight_fold.py).

Every result is compared with eager PyTorch, before and after new weights: a folded
package that kept its old constants would be a silent wrong result."""

from __future__ import annotations

import json
import zipfile

import pytest
import torch
from torch import nn

import aotc
from aotc.errors import BundleError
from conftest import SAMPLES, fresh_sample, invoke
from aotc.exporters import weight_fold
from aotc.exporters.aoti_frozen import folding_would_slow
from aotc.exporters.weight_fold import FoldProgram

pytestmark = pytest.mark.slow  # AOTInductor compiles (about 15 s each here)


def other_weights(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """`model` with every parameter and BatchNorm statistic drawn again."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            if t.is_floating_point():
                t.copy_(torch.rand(t.shape, generator=g) + 0.5 if "running_var" in name
                        else torch.randn(t.shape, generator=g) * 0.3)
    return model


@pytest.fixture(scope="module")
def folded_cnn(tmp_path_factory):
    path = tmp_path_factory.mktemp("fold") / "cnn"
    result = invoke("compile", SAMPLES / "cnn.py", "-o", path, "--json")
    assert result.exit_code == 0, result.stderr
    return path, json.loads(result.stdout)


def test_default_compile_folds_the_weights_and_matches_eager(folded_cnn):
    path, summary = folded_cnn
    build = summary["compiled"]["compiled/cpu/inference.pt2"]["build"]
    eager = fresh_sample("cnn").module.eval()
    layers = sum(isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)) for m in eager.modules())  # each prepacked
    assert build["weights"] == "folded" and int(build["prepacked"]) == layers > 0
    # the package holds code only: the weights are stored once, in weights.safetensors
    assert summary["compiled"]["compiled/cpu/inference.pt2"]["size_bytes"] < 4 << 20
    loaded = aotc.load(path, backend="aoti")
    with torch.no_grad():
        x = torch.randn(4, 3, 16, 16)
        torch.testing.assert_close(loaded(x), eager(x), rtol=1e-4, atol=1e-5)
    said = " ".join(invoke("inspect", path).stderr.split())
    assert "frozen code, the weights folded in at load and again when they change" in said
    assert aotc.verify(path).ok


def test_new_weights_are_folded_in(folded_cnn, monkeypatch):
    path, _ = folded_cnn
    runs = []
    runner = FoldProgram.runner

    def counted(self, where):
        run = runner(self, where)
        return lambda inputs: runs.append(1) or run(inputs)

    monkeypatch.setattr(FoldProgram, "runner", counted)
    loaded = aotc.load(path, backend="aoti")
    eager = fresh_sample("cnn").module.eval()
    x = torch.randn(4, 3, 16, 16)
    with torch.no_grad():
        for _ in range(3):
            loaded(x)
        assert len(runs) == 1  # folded once, at the first call, not on every call

        new = other_weights(fresh_sample("cnn").module.eval(), seed=1)
        loaded.load_state_dict(new.state_dict())
        torch.testing.assert_close(loaded(x), new(x), rtol=1e-4, atol=1e-5)
        assert (loaded(x) - eager(x)).abs().max() > 0.1  # the new weights do change the result

        for model in (loaded, new):  # changed in place: BatchNorm's statistics, a convolution's weight
            model.bn1.running_var.mul_(3)
            model.conv2.weight.add_(0.5)
        torch.testing.assert_close(loaded(x), new(x), rtol=1e-4, atol=1e-5)

        bias = torch.randn(10)
        loaded.fc.bias = torch.nn.Parameter(bias.clone())
        new.fc.bias = torch.nn.Parameter(bias.clone())
        torch.testing.assert_close(loaded(x), new(x), rtol=1e-4, atol=1e-5)
    assert len(runs) == 4


def test_the_compile_cache_serves_other_weights(folded_cnn, tmp_path):
    # the compiled code does not depend on the weights' values: a model of the same
    # structure with other weights reuses the compile, and gets its own results
    path, _ = folded_cnn
    sample = fresh_sample("cnn")
    model = other_weights(sample.module.eval(), seed=2)
    aotc.export(model, sample.args, tmp_path / "other")
    events = []
    aotc.compile(tmp_path / "other", on_graph=lambda kind, device, event: events.append(event))
    assert events == ["start", "cached"]
    loaded = aotc.load(tmp_path / "other", backend="aoti")
    with torch.no_grad():
        x = torch.randn(4, 3, 16, 16)
        torch.testing.assert_close(loaded(x), model(x), rtol=1e-4, atol=1e-5)


def test_a_graph_that_updates_buffers_keeps_its_weights_as_inputs(tmp_path):
    # an inference graph captured in train mode updates BatchNorm's running statistics:
    # folded, the update would be lost
    assert invoke("export", SAMPLES / "mlp.py", "--train", "-o", tmp_path / "b").exit_code == 0
    bundle = aotc.compile(tmp_path / "b")
    build = bundle.manifest.file("compiled/cpu/inference.pt2").build
    assert build["weights"] == "inputs" and "updates buffers (bn.running_mean" in build["not_folded"]
    sample = fresh_sample("mlp")
    eager, loaded = sample.module.train(), aotc.load(tmp_path / "b", backend="aoti", mode="train")
    torch.testing.assert_close(loaded(*sample.args), eager(*sample.args), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(loaded.bn.running_mean, eager.bn.running_mean)


def test_a_graph_of_small_linear_layers_keeps_its_weights_as_inputs(tmp_path):
    # oneDNN's prepacked linear costs ~9 µs a call more than aten's addmm: more than
    # prepacking saves on layers this small (the mlp sample: 31 µs a call folded, 10 µs not)
    assert invoke("export", SAMPLES / "mlp.py", "-o", tmp_path / "b").exit_code == 0
    bundle = aotc.compile(tmp_path / "b")
    build = bundle.manifest.file("compiled/cpu/inference.pt2").build
    assert build["weights"] == "inputs"
    assert "its largest linear layer takes 4,096 multiply-adds at the example sizes" in build["not_folded"]
    sample = fresh_sample("mlp")
    with torch.no_grad():
        torch.testing.assert_close(aotc.load(tmp_path / "b", backend="aoti")(*sample.args),
                                   sample.module.eval()(*sample.args), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("make,example", [
    (lambda: nn.Linear(2048, 2048), (8, 2048)),  # 33.6M multiply-adds: prepacking pays
    (lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.LazyLinear(2)), (1, 3, 8, 8)),  # a convolution
], ids=["large-linear", "conv"])
def test_large_layers_and_convolutions_are_folded(tmp_path, make, example):
    model = make().eval()
    x = torch.randn(*example)
    model(x)  # materializes a lazy layer
    bundle = aotc.export(model, (x,), tmp_path / "b")
    assert folding_would_slow(bundle, "inference") is None


def test_a_fold_program_names_torch_ops_only():
    def runner(nodes, constants=None):
        return FoldProgram(nodes, constants or {"c": {"node": 0}}).runner("test")

    x = torch.randn(3)
    ok = runner([{"op": "aten::mul.Tensor", "args": [{"input": 0}, 2.0], "kwargs": {}}])
    torch.testing.assert_close(ok([x])["c"], x * 2)
    with pytest.raises(BundleError, match="outside the namespaces"):
        runner([{"op": "builtins::eval.default", "args": [], "kwargs": {}}])
    with pytest.raises(BundleError, match="no op 'aten::no_such_op.default'"):
        runner([{"op": "aten::no_such_op.default", "args": [], "kwargs": {}}])
    with pytest.raises(BundleError, match="comes before that node"):
        runner([{"op": "aten::neg.default", "args": [{"node": 0}], "kwargs": {}}])
    with pytest.raises(BundleError, match="not one a fold program has"):
        runner([{"op": "aten::neg.default", "args": [{"code": "import os"}], "kwargs": {}}])
    with pytest.raises(BundleError, match="not a version 1 weight fold program"):
        FoldProgram.from_json({"version": 9, "nodes": [], "constants": {}}, "test")
    assert weight_fold.NAMESPACES == ("aten", "prims", "mkldnn", "mkl", "quantized", "onednn")


class _LogConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return self.conv(x).log()  # NaN where the convolution is negative


def test_outputs_that_hold_nan_are_folded_and_match_eager(tmp_path):
    """The fold's check scales its tolerance by the outputs' finite values: a NaN among them
    made the tolerance NaN, and the compile raised torch's 'atol must be greater than or equal
    to zero, but got -nan' (timm's Gemma 4 vision tower in the sweep)."""
    torch.manual_seed(0)
    model, x = _LogConv().eval(), torch.randn(1, 3, 8, 8)
    with torch.no_grad():
        assert model(x).isnan().any()
    aotc.export(model, (x,), tmp_path / "b")
    bundle = aotc.compile(tmp_path / "b")
    assert bundle.manifest.file("compiled/cpu/inference.pt2").build["weights"] == "folded"
    with torch.no_grad():
        torch.testing.assert_close(aotc.load(tmp_path / "b", backend="aoti")(x), model(x), equal_nan=True)


class _Block(nn.Module):
    """A transformer FFN's shape: linear, GELU, linear, residual add; 8.4M multiply-adds a layer."""

    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(1024, 1024), nn.Linear(1024, 1024)

    def forward(self, x):
        return self.down(nn.functional.gelu(self.up(x))) + x


def test_where_linear_post_ops_are_slower_they_stay_generated_kernels(tmp_path, monkeypatch):
    """Where oneDNN's post-ops on a linear are slower than a separate kernel (an x86 CPU
    without AVX-512: the residual add's post-op took 1.4x to 5x the time there), the folded
    package calls the plain prepacked linear and leaves the GELU and the add to generated
    kernels; inductor's own patterns are back in force after the compile."""
    from torch._inductor.fx_passes import post_grad

    from aotc._torch_compat import inductor as inductor_compat
    from aotc.exporters import aoti_frozen

    monkeypatch.setattr(aoti_frozen, "linear_post_ops_pay", lambda: False)
    torch.manual_seed(0)
    model, x = _Block().eval(), torch.randn(8, 1024)
    aotc.export(model, (x,), tmp_path / "b")
    bundle = aotc.compile(tmp_path / "b", use_cache=False)  # a cached package would skip inductor's passes
    entries = [e for p in post_grad.pass_patterns for es in p.patterns.values() for e in es]
    assert entries and all(e.extra_check is not inductor_compat._never for e in entries)
    build = bundle.manifest.file("compiled/cpu/inference.pt2").build
    assert build["weights"] == "folded" and build["prepacked"] == "2"
    with zipfile.ZipFile(tmp_path / "b" / "compiled" / "cpu" / "inference.pt2") as z:
        code = "".join(z.read(n).decode() for n in z.namelist() if n.endswith("wrapper.cpp"))
    assert code.count("aoti_torch_cpu__linear_pointwise(") == 2 and "_linear_pointwise_binary" not in code
    assert '"gelu"' not in code
    with torch.no_grad():
        torch.testing.assert_close(aotc.load(tmp_path / "b", backend="aoti")(x), model(x), rtol=1e-4, atol=1e-4)
