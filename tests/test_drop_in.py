"""Drop-in: code written for the eager model runs unchanged on the loaded module.

Outputs keep the eager object's access paths (a transformers ModelOutput, a namedtuple),
inputs are taken as the caller's preprocessing gives them (keywords in any order), and a
graph is random only when its ops draw numbers with the arguments they are given.
"""

from __future__ import annotations

import collections
import json

import pytest
import torch
import torch.nn.functional as F

import aotc
from aotc.errors import BundleError, InputError
from aotc.contract.outputs import ModelOutput, plain_outputs

transformers = pytest.importorskip("transformers", reason="the hf extra (make test installs it)")


def _eager_output():
    from transformers.modeling_outputs import CausalLMOutputWithPast

    logits, hidden = torch.randn(2, 3), torch.randn(2, 4)
    return CausalLMOutputWithPast(logits=logits, hidden_states=(hidden,))


def _uses(out) -> list:
    """What callers do with a ModelOutput, each as a value to compare."""
    return [
        out.logits, out["logits"], out[0], out[1], out[1:], out[-1], out.to_tuple(), list(out.keys()), list(out),
        [k for k, _ in out.items()], len(out), out.loss, out.attentions, "loss" in out, "logits" in out,
        out.get("logits"), out.get("loss"), tuple(out.values()),
    ]


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def test_model_output_reads_as_the_eager_one():
    eager = _eager_output()
    ours = plain_outputs(eager)
    assert isinstance(ours, ModelOutput) and ours.type_name == "CausalLMOutputWithPast"
    for i, (a, b) in enumerate(zip(_uses(ours), _uses(eager), strict=True)):
        assert _same(a, b), f"use {i}: {a!r} != eager's {b!r}"
    with pytest.raises(AttributeError, match="CausalLMOutputWithPast' object has no attribute 'logitz'"):
        ours.logitz


def test_model_output_writes_as_the_eager_one():
    eager = _eager_output()
    ours = plain_outputs(eager)
    loss = torch.tensor(1.5)
    for out in (eager, ours):
        out.loss = loss  # a field that was None becomes a key, after the others
        out["logits"] = out["logits"] * 2
    assert list(ours.keys()) == list(eager.keys())
    assert torch.equal(ours.loss, eager.loss) and torch.equal(ours.logits, eager.logits)
    for name in ("pop", "update", "setdefault"):
        with pytest.raises(Exception):
            getattr(eager, name)("logits")
        with pytest.raises(TypeError):
            getattr(ours, name)("logits")


def test_model_output_survives_copy_and_pytree():
    import copy

    from aotc._torch_compat import pytree

    ours = plain_outputs(_eager_output())
    clone = copy.deepcopy(ours)
    assert clone.type_name == ours.type_name and list(clone) == list(ours) and clone.loss is None
    leaves, spec = pytree.tree_flatten(ours)
    back = pytree.tree_unflatten(leaves, pytree.treespec_loads(pytree.treespec_dumps(spec)))
    assert back.type_name == "CausalLMOutputWithPast" and list(back) == ["logits", "hidden_states"]
    assert back.attentions is None and torch.equal(back[0], ours.logits)


Pair = collections.namedtuple("Pair", ["scores", "total"])


class PairModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        y = self.lin(x)
        return Pair(y, y.sum())


@pytest.mark.parametrize("graphs", [("inference",), ("forward", "backward")])
def test_namedtuple_output_keeps_its_fields(tmp_path, graphs):
    torch.manual_seed(0)
    model = PairModel()
    aotc.export(model, (torch.randn(2, 3),), tmp_path / "b", graphs=graphs)
    loaded = aotc.load(tmp_path / "b", mode="train" if "forward" in graphs else "eval")
    x = torch.randn(2, 3)
    got, want = loaded(x), model(x)
    assert type(got).__name__ != "tuple" and got._fields == want._fields == ("scores", "total")
    assert repr(got).startswith("Pair(scores=")
    torch.testing.assert_close(got.scores, want.scores)
    scores, total = got  # unpacking as a tuple
    torch.testing.assert_close(total, want.total)
    assert got._asdict().keys() == want._asdict().keys()
    if "forward" in graphs:  # a loss that reads the fields by name gives eager's gradients
        got.total.backward()
        want.total.backward()
        torch.testing.assert_close(loaded.lin.weight.grad, model.lin.weight.grad)


class Tokens(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)
        self.types = torch.nn.Embedding(2, 4)

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        h = self.embed(input_ids) + self.types(token_type_ids)
        return (h * attention_mask[..., None]).sum(1)


@pytest.fixture(scope="module")
def tokens_bundle(tmp_path_factory):
    torch.manual_seed(0)
    model = Tokens()
    ids = torch.tensor([[1, 2, 3], [4, 5, 0]])
    kwargs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}
    path = tmp_path_factory.mktemp("tokens") / "b"
    aotc.export(model, ((), kwargs), path)
    return model, kwargs, path


def test_keywords_in_any_order(tokens_bundle):
    model, kwargs, path = tokens_bundle
    reordered = {k: kwargs[k] for k in ("token_type_ids", "attention_mask", "input_ids")}
    with torch.no_grad():
        torch.testing.assert_close(aotc.load(path)(**reordered), model(**kwargs))


def test_unknown_and_missing_keywords_are_named(tokens_bundle):
    model, kwargs, path = tokens_bundle
    loaded = aotc.load(path)
    with pytest.raises(InputError) as e:
        loaded(**kwargs, labels=kwargs["input_ids"])
    assert str(e.value) == (
        "keyword input(s) 'labels' are not inputs of this bundle; it takes keywords input_ids, attention_mask, "
        "token_type_ids. Leave them out, or re-export with them among the example inputs."
    )
    with pytest.raises(InputError, match=r"keyword input\(s\) 'token_type_ids' are missing"):
        loaded(input_ids=kwargs["input_ids"], attention_mask=kwargs["attention_mask"])


def test_hostile_output_structure_is_refused(tokens_bundle, tmp_path):
    """signature.json's out_spec names only aotc's own containers, and their contexts are checked."""
    import shutil

    from conftest import rehash

    _, _, path = tokens_bundle
    bundle = tmp_path / "b"
    shutil.copytree(path, bundle)
    sig = json.loads((bundle / "signature.json").read_text())
    sig["out_spec"] = json.dumps([1, {"type": "aotc.NamedTuple", "context": json.dumps(["Pair", ["__import__('os')"]]),
                                      "children_spec": [{"type": None, "context": None, "children_spec": []}]}])
    (bundle / "signature.json").write_text(json.dumps(sig))
    rehash(bundle)
    with pytest.raises(BundleError, match="out_spec"):
        aotc.load(bundle)


# ----------------------------------------------------------------------- randomness


class Attention(torch.nn.Module):
    def __init__(self, dropout: float):
        super().__init__()
        self.qkv = torch.nn.Linear(8, 24)
        self.dropout = dropout

    def forward(self, x):
        q, k, v = self.qkv(x).view(x.shape[0], x.shape[1], 3, 2, 4).permute(2, 0, 3, 1, 4)
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        return F.dropout(y, p=0.0, training=True) + F.dropout(y, p=0.3, training=self.training)


def test_eval_attention_is_not_random_and_exports_to_onnx(tmp_path):
    pytest.importorskip("onnxruntime", reason="the onnx extra (make test installs it)")
    from aotc.exporters.onnx import add_to_bundle
    from aotc.contract.randomness import random_ops

    torch.manual_seed(0)
    model = Attention(0.5).eval()
    x = torch.randn(2, 5, 8)
    aotc.export(model, (x,), tmp_path / "b")
    program = torch.export.load(tmp_path / "b" / "graphs" / "inference.pt2")
    seeded = [n for n in program.graph.nodes if getattr(n.target, "tags", None) and torch.Tag.nondeterministic_seeded in n.target.tags]
    assert seeded, "the graph has no op tagged nondeterministic_seeded any more: this test checks nothing"
    assert random_ops(program.graph) == []
    add_to_bundle(tmp_path / "b")
    with torch.no_grad():
        torch.testing.assert_close(aotc.load(tmp_path / "b", backend="onnx")(x), model(x), rtol=1e-4, atol=1e-5)


class Similarity(torch.nn.Module):
    """CLIP's two logits: one output is the transpose of the other, a view of it in eager."""

    def forward(self, text, image):
        per_text = text @ image.t()
        return per_text.t(), per_text


def test_onnx_output_laid_out_as_the_graph_lays_it_out(tmp_path):
    """onnxruntime returns every output contiguous; the transposed one is rebuilt as a view
    of the other from its strides, so they must be the graph's, at every dynamic size."""
    pytest.importorskip("onnxruntime", reason="the onnx extra (make test installs it)")
    from aotc.exporters.onnx import add_to_bundle

    batch = torch.export.Dim("batch", min=1, max=16)
    text, image = torch.randn(3, 4), torch.randn(3, 4)
    aotc.export(Similarity(), (text, image), tmp_path / "b", dynamic_shapes=({0: batch}, {0: batch}))
    add_to_bundle(tmp_path / "b")
    loaded = aotc.load(tmp_path / "b", backend="onnx")
    for n in (2, 5):
        text, image = torch.randn(n, 4), torch.randn(n, 4)
        (got_image, got_text), (want_image, want_text) = loaded(text, image), Similarity()(text, image)
        torch.testing.assert_close(got_image, want_image, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(got_text, want_text, rtol=1e-4, atol=1e-5)
        assert got_image.stride() == want_image.stride() and got_image.data_ptr() == got_text.data_ptr()


def test_transformer_encoder_exports_to_onnx(tmp_path):
    """nn.TransformerEncoder's attention runs sequence-first: the exported kernel's output
    is laid out as its query, which the graph's next view relies on."""
    pytest.importorskip("onnxruntime", reason="the onnx extra (make test installs it)")
    from aotc.exporters.onnx import add_to_bundle

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 4, 32, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    b, s = torch.export.Dim("b", min=1, max=8), torch.export.Dim("s", min=1, max=32)
    aotc.export(model, (torch.randn(2, 5, 16),), tmp_path / "b", dynamic_shapes={"src": {0: b, 1: s}})
    add_to_bundle(tmp_path / "b")
    loaded = aotc.load(tmp_path / "b", backend="onnx")
    for n, length in [(2, 5), (3, 7), (1, 1)]:
        x = torch.randn(n, length, 16)
        with torch.no_grad():
            torch.testing.assert_close(loaded(x), model(x), rtol=1e-4, atol=1e-5)


def test_training_dropout_is_random(tmp_path):
    from aotc.contract.randomness import random_ops

    model = Attention(0.5).train()
    program = torch.export.export(model, (torch.randn(2, 5, 8),), strict=False).run_decompositions()
    drawn = random_ops(program.graph)
    assert drawn and all("dropout" in name or "bernoulli" in name or "rand" in name for name in drawn), drawn
