"""The two not-tiny sample models (sample_models/gpt_small.py, 3.3 M parameters with a tied
LM head; sample_models/resnet18.py, 11.2 M parameters) survive export and load back.

Each is exported by `aotc.export` (fx graphs only, nothing compiled) and loaded with
`aotc.load(backend="fx")`: the inference bundle's outputs must equal eager's, and for
gpt_small the forward+backward bundle's parameter gradients after one `.backward()` of
the LM loss must equal eager's `.grad` (the tied `wte.weight` gets the sum of its
embedding and LM-head gradients on both sides). Tolerance rtol=1e-4, atol=1e-5, as in
test_parity.py: the fx graphs run eager's aten kernels, so only op order can differ
(in practice the results are bit-identical). ResNet-18's forward+backward export takes
twice as long as its inference export, so only its inference graph is tested here;
`aotc verify` covers the rest.
"""

from __future__ import annotations

import copy

import pytest
import torch

import aotc
from conftest import clone_inputs, fresh_sample

TOL = dict(rtol=1e-4, atol=1e-5)

pytestmark = pytest.mark.slow  # about 30 s in all on 2 CPU cores, nearly all of it capture


@pytest.mark.parametrize("name", ["gpt_small", "resnet18"])
def test_inference_bundle_matches_eager(tmp_path, name):
    spec = fresh_sample(name)
    model = spec.module.eval()
    bundle = aotc.export(copy.deepcopy(model), clone_inputs(spec.args), tmp_path / name, graphs=("inference",))
    assert bundle.manifest.graph_kinds == ["inference"]

    loaded = aotc.load(tmp_path / name, backend="fx")
    with torch.no_grad():
        expected = model(*clone_inputs(spec.args))
        actual = loaded(*clone_inputs(spec.args))
    torch.testing.assert_close(actual, expected, **TOL)


def test_gpt_small_forward_backward_gradients_match_eager(tmp_path):
    spec = fresh_sample("gpt_small")
    eager = spec.module.train()
    assert eager.lm_head.weight is eager.wte.weight  # the tie is what this test is about
    aotc.export(copy.deepcopy(eager), clone_inputs(spec.args), tmp_path / "gpt", graphs=("forward", "backward"))

    loaded = aotc.load(tmp_path / "gpt", backend="fx", mode="train")
    tokens = clone_inputs(spec.args)
    loss = spec.loss(loaded(*tokens), *tokens)
    loss.backward()

    tokens = clone_inputs(spec.args)
    eager_loss = spec.loss(eager(*tokens), *tokens)
    eager_loss.backward()

    torch.testing.assert_close(loss.detach(), eager_loss.detach(), **TOL)
    grads = {n: p.grad for n, p in loaded.named_parameters()}
    expected = dict(eager.named_parameters())  # one entry for the tied tensor: wte.weight
    assert grads.keys() == expected.keys()
    for name, p in expected.items():
        assert grads[name] is not None, f"no gradient for {name}"
        torch.testing.assert_close(grads[name], p.grad, **TOL, msg=lambda m: f"grad of {name}: {m}")
