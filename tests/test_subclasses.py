"""Tensor subclasses: traceable wrapper subclasses as parameters, inputs and outputs
(PairTensor, written in tests/subclass_models.py), torchao's int8 weight-only
quantization (sample_models/int8_mlp.py), and the trust list that guards class imports.

Every result is compared with the eager model: outputs, state_dict, gradients.
"""

from __future__ import annotations

import json

import pytest
import torch

import aotc
from aotc.errors import BundleError, CaptureError, InputError, UntrustedSubclassError
from conftest import SAMPLES, invoke, rehash
from subclass_models import (
    MutatesPairs,
    NestedScale,
    OpaquePair,
    PairLinear,
    PairTensor,
    TransposesPair,
    pair,
    pair_inputs,
)

TRUST = ["subclass_models:PairTensor"]


def assert_same(got, want, exact=True):
    """Same class all the way down, and equal plain tensors inside."""
    assert type(got) is type(want)
    if isinstance(want, PairTensor):
        assert got.label == want.label
        assert_same(got.a, want.a, exact)
        assert_same(got.b, want.b, exact)
    elif exact:
        assert torch.equal(got, want)
    else:
        torch.testing.assert_close(got, want)


@pytest.fixture(scope="module")
def pair_bundles(tmp_path_factory):
    root = tmp_path_factory.mktemp("pairs")
    x, y = pair_inputs()
    out = {}
    for name, model, inputs in (("linear", PairLinear(), (x, y)), ("nested", NestedScale(), (torch.randn(5, 3),))):
        out[(name, "eval")] = aotc.export(model, inputs, root / f"{name}-eval").path
        y_grad = pair(2, 3, seed=4, requires_grad=True)  # y takes a gradient in training
        train_inputs = (x, y_grad) if name == "linear" else inputs
        out[(name, "train")] = aotc.export(model, train_inputs, root / f"{name}-train", graphs=("forward", "backward")).path
    return out


def test_subclass_parameters_inputs_and_outputs_replay_as_eager(pair_bundles):
    model = PairLinear()
    x, y = pair_inputs()
    loaded = aotc.load(pair_bundles[("linear", "eval")], trusted_subclasses=TRUST)
    with torch.no_grad():
        got, want = loaded(x, y), model(x, y)
    assert_same(got[0], want[0])
    assert_same(got[1], want[1])
    # the weights come back as the subclass the eager model held, under the same names
    assert list(loaded.state_dict()) == list(model.state_dict())
    for name, t in model.state_dict().items():
        assert_same(loaded.state_dict()[name], t)
    assert isinstance(loaded.weight, torch.nn.Parameter)


def test_subclass_gradients_match_eager(pair_bundles):
    model = PairLinear()
    loaded = aotc.load(pair_bundles[("linear", "train")], mode="train", trusted_subclasses=TRUST)
    x, _ = pair_inputs()
    grad = pair(2, 3, seed=1)  # labelled like the output, as torch.ones_like(output) would be
    results = []
    for m in (model, loaded):
        y = pair(2, 3, seed=4, requires_grad=True)
        out, _ = m(x, y)
        out.backward(grad)
        results.append((out, y.grad, m.weight.grad, m.bias.grad))
    for got, want in zip(results[1], results[0]):
        assert_same(got.detach(), want.detach(), exact=False)
    assert isinstance(loaded.weight.grad, PairTensor)


def test_nested_subclass_parameter(pair_bundles):
    model = NestedScale()
    x = torch.randn(5, 3)
    eval_module = aotc.load(pair_bundles[("nested", "eval")], trusted_subclasses=TRUST)
    assert type(eval_module.scale.a) is PairTensor  # a pair of pairs, as in eager
    with torch.no_grad():
        assert_same(eval_module(x), model(x))
    train_module = aotc.load(pair_bundles[("nested", "train")], mode="train", trusted_subclasses=TRUST)
    grad = None
    for m in (model, train_module):
        out = m(x)
        grad = torch.randn_like(out.detach()) if grad is None else grad  # a pair of pairs, labelled as out
        out.backward(grad)
    assert_same(train_module.scale.grad, model.scale.grad, exact=False)
    report = aotc.verify(pair_bundles[("nested", "train")], trusted_subclasses=TRUST)
    assert report.ok and report.checks


def test_mutations_of_subclass_inputs_and_buffers_reach_the_caller(tmp_path):
    model = MutatesPairs()
    x, y = torch.randn(3), pair(3, seed=12)
    aotc.export(model, (x, y.clone()), tmp_path / "b")
    loaded = aotc.load(tmp_path / "b", trusted_subclasses=TRUST)
    y_eager, y_loaded = y.clone(), y.clone()
    assert_same(loaded(x, y_loaded), model(x, y_eager))
    assert_same(y_loaded, y_eager)  # the caller's own PairTensor changed, as in eager
    assert_same(loaded.count, model.count)


def test_an_in_place_layout_change_of_a_subclass_input_is_refused(tmp_path):
    """On every torch: 2.13's AOTAutograd refuses it, 2.14's traces only the inner tensors."""
    with pytest.raises(CaptureError) as e:
        aotc.export(TransposesPair(), (torch.randn(3, 2), pair(2, 3, seed=7)), tmp_path / "b")
    assert str(e.value) == (
        "forward changes the sizes or strides of tensor subclass input y in place (as t_(), unsqueeze_() or "
        "as_strided_() do); aotc cannot replay that on the caller's subclass object. Return the changed tensor "
        "instead (x = x.t()) and use the output."
    )
    assert not (tmp_path / "b").exists()


def test_untrusted_class_is_refused_before_any_import(pair_bundles, monkeypatch):
    import aotc.contract.subclasses

    imported = []
    real_import = aotc.contract.subclasses.importlib.import_module
    monkeypatch.setattr(aotc.contract.subclasses.importlib, "import_module", lambda name: imported.append(name) or real_import(name))
    with pytest.raises(UntrustedSubclassError) as e:
        aotc.load(pair_bundles[("linear", "eval")])
    assert "'subclass_models:PairTensor'" in str(e.value) and "--trust subclass_models:PairTensor" in str(e.value)
    assert "subclass_models" not in imported
    aotc.load(pair_bundles[("linear", "eval")], trusted_subclasses=[PairTensor])  # the class itself works too
    assert "subclass_models" in imported

    refused = invoke("run", pair_bundles[("linear", "eval")])
    assert refused.exit_code == 1 and "--trust subclass_models:PairTensor" in refused.stderr
    ran = invoke("run", pair_bundles[("linear", "eval")], "--trust", TRUST[0], "--json")
    assert ran.exit_code == 0, ran.stderr
    assert [o["name"] for o in json.loads(ran.stdout)["outputs"]] == ["output[0]:a", "output[0]:b", "output[1]"]


def test_input_with_other_context_or_class_is_refused(pair_bundles):
    loaded = aotc.load(pair_bundles[("linear", "eval")], trusted_subclasses=TRUST)
    x, y = pair_inputs()
    with pytest.raises(InputError, match="flatten context"):
        loaded(x, PairTensor(y.a, y.b, ("other", 2)))
    with pytest.raises(InputError, match="'input y' is a Tensor; the bundle was exported with a PairTensor"):
        loaded(x, y.a)


def test_context_that_is_not_plain_data_is_refused(tmp_path):
    with pytest.raises(CaptureError, match="context holds Marker at \\['marker'\\]"):
        aotc.export(torch.nn.Linear(3, 3), (pair(2, 3, cls=OpaquePair),), tmp_path / "b")
    assert not (tmp_path / "b").exists()


def test_joint_graph_refuses_a_subclass_loss(tmp_path):
    x, y = pair_inputs()
    with pytest.raises(CaptureError, match="a joint graph needs a plain scalar loss"):
        aotc.export(PairLinear(), (x, y), tmp_path / "b", graphs=("joint",), loss=lambda out, x, y: out[0].sum())


def test_edited_subclass_metadata_is_refused(pair_bundles, tmp_path):
    import shutil

    path = shutil.copytree(pair_bundles[("linear", "eval")], tmp_path / "b")
    meta = json.loads((path / "metadata.json").read_text())
    meta["subclasses"]["state"]["weight"]["inner"] = {"a": None}  # says one inner tensor; the graphs take two
    (path / "metadata.json").write_text(json.dumps(meta))
    rehash(path)
    with pytest.raises(BundleError, match="subclasses"):
        aotc.Bundle.open(path)


# ----------------------------------------------------------------- torchao int8


def _int8_model():
    from aotc.sources.model_file import load_model

    return load_model(str(SAMPLES / "int8_mlp.py"))


@pytest.mark.parametrize("backend", ["fx", "aoti", "onnx"])
def test_int8_model_matches_eager_quantized(int8_bundle, backend, request):
    from torchao.quantization import Int8Tensor

    if backend == "aoti":
        request.getfixturevalue("compiled")
    spec = _int8_model()
    loaded = aotc.load(int8_bundle, backend=backend)
    for batch in (1, 8, 33):  # dynamic batch, from 1
        x = torch.randn(batch, 256)
        with torch.no_grad():
            got, want = loaded(x), spec.module(x)
        if backend == "fx":
            assert torch.equal(got, want)
        else:  # onnx, and aoti's frozen code (its float linear runs on a prepacked weight): the same within rounding
            torch.testing.assert_close(got, want)
    weight = loaded.state_dict()["0.weight"]
    assert type(weight) is Int8Tensor and weight.qdata.dtype == torch.int8
    assert torch.equal(weight.qdata, spec.module.state_dict()["0.weight"].qdata)


def test_int8_bundle_is_a_quarter_of_the_float_one(int8_bundle, tmp_path):
    result = invoke("export", SAMPLES / "int8_mlp.py", "--entry", "build_float_model", "-o", tmp_path / "float")
    assert result.exit_code == 0, result.stderr
    int8 = (int8_bundle / "weights.safetensors").stat().st_size
    float32 = (tmp_path / "float" / "weights.safetensors").stat().st_size
    assert int8 < 0.27 * float32, (int8, float32)


def test_int8_inspect_lists_the_quantized_weights(int8_bundle):
    result = invoke("inspect", int8_bundle, "--json")
    assert result.exit_code == 0, result.stderr
    rows = {r["name"]: r for r in json.loads(result.stdout)["subclasses"]}
    assert set(rows) == {"0.weight", "2.weight", "4.weight"}
    row = rows["2.weight"]
    assert row["where"] == "parameter" and row["class"].endswith(":Int8Tensor") and row["shape"] == [512, 512]
    assert {i["name"]: (i["dtype"], i["shape"]) for i in row["inner"]} == {
        "2.weight:qdata": ("I8", [512, 512]), "2.weight:scale": ("F32", [512, 1]), "2.weight:zero_point": ("I8", [512, 1]),
    }


@pytest.mark.parametrize("mode", ["autograd", "joint"])
def test_int8_training_matches_eager(mode, tmp_path):
    """The int8 weights stay frozen (as torchao leaves them); the biases train."""
    spec = _int8_model()
    graphs = ("forward", "backward") if mode == "autograd" else ("joint",)
    aotc.export(spec.module, spec.args, tmp_path / "b", graphs=graphs, loss=spec.loss)
    loaded = aotc.load(tmp_path / "b", mode="train")
    model = _int8_model().module.train()
    x = torch.randn(8, 256)
    spec.loss(model(x), x).backward()
    if mode == "joint":
        loaded.train_step(x)
    else:
        spec.loss(loaded(x), x).backward()
    grads = {n: p.grad for n, p in loaded.named_parameters() if p.grad is not None}
    assert set(grads) == {"0.bias", "2.bias", "4.bias"}
    for name, grad in grads.items():
        torch.testing.assert_close(grad, model.get_parameter(name).grad)
