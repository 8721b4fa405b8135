"""Inputs and outputs as torch.export has them: constants, None, ints that stay symbolic,
inputs only a loss reads, and output containers that keep their types.

Every call is checked against eager PyTorch; every refusal's words are asserted.
"""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import nn
from torch.export import Dim

import aotc
from aotc.errors import AotcError, BundleError, InputError
from conftest import SAMPLES, invoke, rehash


class Flags(nn.Module):
    """forward's non-tensor arguments, as real models have them."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(4, 4)

    def forward(self, x, flag: bool, scale: float = 1.0, mode: str = "a", mask=None, *, n: int = 2):
        y = self.lin(x) * scale
        if flag:
            y = y + 1
        if mode == "b":
            y = y * 2
        if mask is not None:
            y = y * mask
        return y[:n] + n


def _flags_call(n=2):
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))
    return (x, True, 2.0, "b", None), {"n": n}


@pytest.fixture(scope="module")
def flags_bundle(tmp_path_factory):
    args, kwargs = _flags_call()
    return aotc.export(Flags(), (args, kwargs), tmp_path_factory.mktemp("flags") / "b",
                       dynamic_shapes={"n": Dim.DYNAMIC(min=1, max=5)}).path


def test_constants_and_a_symbolic_int_replay_eager(flags_bundle):
    bundle = aotc.Bundle.open(flags_bundle)
    assert [(c.name, c.type, c.value) for c in bundle.signature.constant_inputs] == [
        ("flag", "bool", True), ("scale", "float", 2.0), ("mode", "str", "b"), ("mask", "None", None)]
    assert [(u.name, u.kind) for u in bundle.signature.user_inputs] == [("x", "tensor"), ("n", "int")]
    loaded, eager = aotc.load(flags_bundle), Flags()
    for n in (1, 2, 5):  # 1 stays symbolic, as torch.export keeps int inputs
        args, kwargs = _flags_call(n)
        with torch.no_grad():
            torch.testing.assert_close(loaded(*args, **kwargs), eager(*args, **kwargs), rtol=0, atol=0)


@pytest.mark.parametrize("change, words", [
    (lambda a, k: ((a[0], False, *a[2:]), k),
     "input 'flag' is False; the bundle was exported with flag=True, and torch.export specialized its graphs on "
     "that value. Pass True, or export again with the value you need (one bundle per value; an int can be "
     "declared dynamic in dynamic_shapes instead)."),
    (lambda a, k: ((*a[:3], "c", None), k), "input 'mode' is 'c'; the bundle was exported with mode='b'"),
    (lambda a, k: ((*a[:4], torch.ones(5, 4)), k),
     "input 'mask' is a tensor of shape (5, 4); the bundle was exported with mask=None"),
    (lambda a, k: ((a[0], 1, *a[2:]), k), "input 'flag' is 1; the bundle was exported with flag=True"),
    # a model may treat an int apart from the float it equals (torch.tensor(2) is int64)
    (lambda a, k: ((a[0], True, 2, *a[3:]), k), "input 'scale' is 2; the bundle was exported with scale=2.0"),
    (lambda a, k: (a, {"n": 6}), "input 'n' is 6, outside the exported range [1, 5]. Re-export with a wider range."),
    (lambda a, k: (a, {"n": 2.0}), "input 'n' is a float; the bundle takes an int there"),
    (lambda a, k: (a, {"n": torch.tensor(2)}), "input 'n' is a Tensor; the bundle takes an int there"),
    (lambda a, k: (a[:4], k), "As (args, kwargs), the bundle takes ((x, True, 2.0, 'b', None), {'n': n (int)}); "
                              "this call passes ((tensor, True, 2.0, 'b'), {'n': 2})."),
])
def test_a_call_unlike_the_export_is_refused_by_name(flags_bundle, change, words):
    loaded = aotc.load(flags_bundle)
    args, kwargs = change(*_flags_call())
    with pytest.raises(InputError) as e:
        loaded(*args, **kwargs)
    assert words in str(e.value)


def test_inspect_and_run_take_constants_and_ints(flags_bundle, tmp_path):
    result = invoke("inspect", flags_bundle, "--json", "--no-verify")
    assert result.exit_code == 0, result.stderr
    info = json.loads(result.stdout)
    assert [c["name"] for c in info["constant_inputs"]] == ["flag", "scale", "mode", "mask"]
    assert "Constant inputs" in invoke("inspect", flags_bundle, "--no-verify").stderr
    x = _flags_call()[0][0]
    save_file({"x": x, "n": torch.tensor(3)}, str(tmp_path / "in.safetensors"))
    result = invoke("run", flags_bundle, "--inputs", tmp_path / "in.safetensors", "--output", tmp_path / "out.safetensors")
    assert result.exit_code == 0, result.stderr
    from safetensors.torch import load_file

    with torch.no_grad():
        want = Flags()(x, True, 2.0, "b", None, n=3)
    torch.testing.assert_close(load_file(str(tmp_path / "out.safetensors"))["output"], want)
    assert invoke("run", flags_bundle).exit_code == 0  # random inputs: constants from the bundle
    save_file({"x": x, "n": torch.ones(2)}, str(tmp_path / "bad.safetensors"))
    result = invoke("run", flags_bundle, "--inputs", tmp_path / "bad.safetensors")
    assert result.exit_code == 1 and "it is an int input: give it as a 0-d integer tensor" in result.stderr


def test_an_edited_constant_is_refused(flags_bundle, tmp_path):
    import shutil

    edited = tmp_path / "b"
    shutil.copytree(flags_bundle, edited)
    sig = json.loads((edited / "signature.json").read_text())
    sig["constant_inputs"][0]["value"] = False  # the spec still holds True
    (edited / "signature.json").write_text(json.dumps(sig))
    rehash(edited)
    with pytest.raises(BundleError, match="constant_inputs: they are not the constants in_spec holds"):
        aotc.Bundle.open(edited)


@dataclasses.dataclass
class Batch:
    images: torch.Tensor
    scale: float


torch.export.register_dataclass(Batch)


class TakesBatch(nn.Module):
    def forward(self, batch: Batch, labels=None):
        out = batch.images * batch.scale
        return torch.topk(out, 2), {"none": labels, "count": (out > 0).sum().item()}


def test_containers_in_and_out_keep_their_types(tmp_path):
    images = torch.randn(3, 5, generator=torch.Generator().manual_seed(1))
    bundle = aotc.export(TakesBatch(), ((Batch(images, 2.0),), {}), tmp_path / "b").path
    loaded = aotc.load(bundle)
    top, extra = loaded(Batch(images, 2.0))
    want_top, want_extra = TakesBatch()(Batch(images, 2.0))
    assert isinstance(top, torch.return_types.topk)  # torch's own class
    torch.testing.assert_close(top.values, want_top.values)
    assert torch.equal(top.indices, want_top.indices)
    assert extra == {"none": None, "count": want_extra["count"]} and isinstance(extra["count"], int)
    with pytest.raises(InputError, match="input 'batch.scale' is 3.0; the bundle was exported with batch.scale=2.0"):
        loaded(Batch(images, 3.0))


@dataclasses.dataclass
class Heads:
    logits: torch.Tensor
    hidden: torch.Tensor


torch.export.register_dataclass(Heads)


def test_a_dataclass_output_is_a_dataclass_of_that_name(tmp_path):
    model = nn.Linear(4, 3)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = model

        def forward(self, x):
            return Heads(self.lin(x), x * 2)

    x = torch.randn(2, 4)
    out = aotc.load(aotc.export(Model(), (x,), tmp_path / "b").path)(x)
    assert dataclasses.is_dataclass(out) and type(out).__name__ == "Heads" and not isinstance(out, Heads)
    assert [f.name for f in dataclasses.fields(out)] == ["logits", "hidden"]
    torch.testing.assert_close(out.logits, model(x))
    assert dataclasses.replace(out, hidden=None).hidden is None


def test_loss_inputs_train_a_plain_sequential_in_one_graph(tmp_path):
    """`F.cross_entropy(model(x), y)` with no wrapper: the joint step with its optimizer,
    train_step(x, y), over batches of other sizes, equals eager's steps."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    eager = copy.deepcopy(model)
    x, y = torch.randn(6, 4), torch.tensor([0, 1, 2, 2, 1, 0])
    batch = Dim("batch", min=2, max=32)
    bundle = aotc.export(model, (x,), tmp_path / "b", graphs=("joint",), loss=F.cross_entropy, loss_inputs=(y,),
                         optimizer=torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                         dynamic_shapes={"input": {0: batch}, "target": {0: batch}})
    assert [u.name for u in bundle.signature.user_inputs] == ["input", "target"]
    step = aotc.load(bundle.path, mode="train")
    opt = torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(2)
    for n in (6, 9, 3):
        xs, ys = torch.randn(n, 4, generator=g), torch.randint(0, 3, (n,), generator=g)
        loss = step.train_step(xs, ys)
        want = F.cross_entropy(eager(xs), ys)
        want.backward()
        opt.step()
        opt.zero_grad()
        torch.testing.assert_close(loss, want.detach())
    for (name, p), q in zip(step.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p, q, msg=name)


def test_loss_inputs_are_refused_where_no_loss_takes_them(tmp_path):
    x, y = torch.randn(3, 4), torch.tensor([0, 1, 2])
    with pytest.raises(AotcError, match="loss_inputs= feeds the loss of a joint graph"):
        aotc.export(nn.Linear(4, 3), (x,), tmp_path / "b", graphs=("forward", "backward"), loss_inputs=(y,))
    with pytest.raises(AotcError, match="pass loss=, called as loss"):
        aotc.export(nn.Linear(4, 3), (x,), tmp_path / "b", graphs=("joint",), loss_inputs=(y,))


def test_model_file_loss_inputs_through_the_cli(tmp_path):
    model = SAMPLES / "sequential_targets.py"
    result = invoke("export", model, "--joint", "--optimizer", "adamw", "-o", tmp_path / "b")
    assert result.exit_code == 0, result.stderr
    result = invoke("verify", tmp_path / "b", "--model", model, "--samples", "2", "--json")
    assert result.exit_code == 0, result.stdout
    assert json.loads(result.stdout)["ok"]


def test_a_check_refusing_the_bundle_being_written_is_an_internal_error(tmp_path, monkeypatch):
    """aotc's own self-checks failing on the bundle it is writing are aotc's bugs: exit 2,
    "please report", never "the bundle is damaged or was edited"."""
    import aotc.tools.verify as verify

    def broken(bundle):
        raise BundleError(f"{bundle.path}/reference.safetensors: planted")

    monkeypatch.setattr(verify, "_golden", broken)
    result = invoke("export", SAMPLES / "mlp.py", "-o", tmp_path / "b")
    assert result.exit_code == 2, result.stderr
    assert "Internal error: InternalError: aotc's check of the bundle it is writing failed" in result.stderr
    assert "This is a bug in aotc; please report it." in result.stderr
    assert not (tmp_path / "b").exists()


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["aoti", "onnx"])
def test_constants_and_a_symbolic_int_on_compiled_backends(flags_bundle, tmp_path, backend):
    import shutil

    bundle = tmp_path / "b"
    shutil.copytree(flags_bundle, bundle)
    if backend == "aoti":
        aotc.compile(bundle)
    else:
        from aotc.exporters.onnx import add_to_bundle

        add_to_bundle(bundle)
    loaded, eager = aotc.load(bundle, backend=backend), Flags()
    for n in (1, 3, 5):
        args, kwargs = _flags_call(n)
        with torch.no_grad():
            torch.testing.assert_close(loaded(*args, **kwargs), eager(*args, **kwargs), rtol=1e-4, atol=1e-5)
    with pytest.raises(InputError, match="input 'flag' is False"):
        loaded(_flags_call()[0][0], False, 2.0, "b", None, n=2)
