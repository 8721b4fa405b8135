"""Hugging Face models as people have them: default configs (use_cache=True), keyword
inputs, outputs in the model's own structure, dynamic batch and sequence from 1.

Every model is built from a tiny config (tests/hf_models.py), exported once per session
and compared with the eager model it came from. The conformance matrix
(tests/test_conformance.py) runs each architecture through every backend.
"""

from __future__ import annotations

import copy
import json

import pytest
import torch

import aotc
from aotc._torch_compat import pytree
from aotc.errors import InputError
from aotc.contract.outputs import plain_outputs

transformers = pytest.importorskip("transformers", reason="the hf extra (make test installs it)")

from hf_models import CASES  # noqa: E402

# Each architecture's inference and forward+backward bundles, on fx, onnx and aoti, are
# checked against eager by the conformance matrix (tests/test_conformance.py); this file
# checks what is particular to transformers models. gpt2's forward+backward here weights
# every output, its cache included, so a gradient routed to the wrong output shows.
GRADIENT_CASES = ["gpt2"]


@pytest.fixture(scope="session")
def hf_bundles(tmp_path_factory):
    made: dict[tuple[str, str], tuple] = {}

    def get(name: str, mode: str = "inference"):
        if (name, mode) not in made:
            case = CASES[name]
            model = case.build()
            graphs = ("inference",) if mode == "inference" else ("forward", "backward")
            path = tmp_path_factory.mktemp(f"hf-{name}-{mode}") / "b"
            aotc.export(model, ((), case.inputs(*case.batch_seq)), path, graphs=graphs,
                        dynamic_shapes=case.dynamic())
            made[name, mode] = (case, model, path)
        return made[name, mode]

    return get


def _close(got, want, what: str, rtol=1e-4, atol=1e-5):
    got_flat, got_spec = pytree.tree_flatten(got)
    want_flat, want_spec = pytree.tree_flatten(want)
    assert got_spec == want_spec, f"{what}: structure {got_spec} != eager's {want_spec}"
    for i, (g, w) in enumerate(zip(got_flat, want_flat)):
        assert g.shape == w.shape and g.dtype == w.dtype, f"{what} leaf {i}: {g.shape} {g.dtype} vs {w.shape} {w.dtype}"
        torch.testing.assert_close(g, w, rtol=rtol, atol=atol, msg=lambda m: f"{what} leaf {i}: {m}")


@pytest.mark.slow
def _outcome(access):
    try:
        return "value", access()
    except Exception as e:  # the kind of failure is the answer
        return "raises", type(e).__name__


def test_the_cache_field_answers_to_the_names_eager_answers_to():
    """transformers 5.24 renamed the outputs' `past_key_values` (and `cache_params`) to
    `cache` and still answers to the old names; aotc's rebuilt output answers to the same
    names, the same way, under whichever transformers made the bundle."""
    import dataclasses

    from transformers.modeling_outputs import CausalLMOutputWithPast

    from aotc.contract.outputs import ModelOutput

    names = [f.name for f in dataclasses.fields(CausalLMOutputWithPast)]
    field = "cache" if "cache" in names else "past_key_values"
    logits, cache = torch.ones(1), torch.zeros(1)  # the cache object itself does not matter here
    eager = CausalLMOutputWithPast(logits=logits, **{field: cache})
    mine = ModelOutput("CausalLMOutputWithPast", names, [("logits", logits), (field, cache)])
    for name in ("past_key_values", "cache", "cache_params", "logits"):
        for access in (lambda o: getattr(o, name), lambda o: o[name], lambda o: name in o, lambda o: o.get(name)):
            assert _outcome(lambda: access(mine)) == _outcome(lambda: access(eager)), name
    assert list(mine.keys()) == list(eager.keys()) and mine[1] is eager[1]


def test_cache_layout_is_keys_and_values_per_layer(hf_bundles):
    case, model, path = hf_bundles("gpt2")
    inputs = case.inputs(1, 4)
    with torch.no_grad():
        cache = model(**inputs).past_key_values
        got = aotc.load(path)(**inputs)["past_key_values"]
    assert len(got) == len(cache.layers) == model.config.n_layer
    for (keys, values), layer in zip(got, cache.layers):
        torch.testing.assert_close(keys, layer.keys)
        torch.testing.assert_close(values, layer.values)


@pytest.mark.slow
def test_encoder_decoder_cache_is_self_and_cross_attention(hf_bundles):
    case, model, path = hf_bundles("t5")
    inputs = case.inputs(2, 6)
    with torch.no_grad():
        cache = model(**inputs).past_key_values
        got = aotc.load(path)(**inputs).past_key_values
    # the eager cache's own access paths
    assert len(got) == len(cache) and got.get_seq_length() == cache.get_seq_length()
    torch.testing.assert_close(got.cross_attention_cache.layers[1].keys, cache.cross_attention_cache.layers[1].keys)
    torch.testing.assert_close(got.self_attention_cache.layers[0].values, cache.self_attention_cache.layers[0].values)


@pytest.mark.slow
def test_dims_declared_from_one_accept_one(hf_bundles):
    """Dim(min=1) is recorded as [1, max] (torch's trace assumes 2 and up; export checked 1)."""
    case, model, path = hf_bundles("llama")
    meta = json.loads((path / "metadata.json").read_text())
    ranges = {(d["min"], d["max"]) for u in meta["user_inputs"] for d in u["dynamic_dims"].values()}
    assert ranges == {(1, 16), (1, 48)}
    with pytest.raises(InputError, match="outside the exported range"):
        aotc.load(path)(**case.inputs(17, 3))


@pytest.mark.slow
def test_lifted_constants_are_stored_passed_and_listed(hf_bundles):
    """GPT-2's cache code makes tensors inside forward; torch.export lifts them to inputs."""
    from safetensors import safe_open

    from aotc.bundle.summary import describe

    case, model, path = hf_bundles("gpt2")
    bundle = aotc.Bundle.open(path)
    slots = [s for s in bundle.signature.graphs["inference"].inputs if s.role == "constant"]
    assert slots, "the GPT-2 graph has no lifted constants any more; pick another model for this test"
    listed = describe(bundle)["constants"]
    with safe_open(str(path / "weights.safetensors"), "pt") as f:
        assert {s.target for s in slots} <= set(f.keys())
        # the constants are the stored tensors that are not the eager model's own state
        assert {c["name"] for c in listed} == set(f.keys()) - set(model.state_dict())
        stored = {c["name"]: f.get_tensor(c["name"]) for c in listed}
    st_dtype = {torch.float32: "F32", torch.int64: "I64", torch.int32: "I32", torch.bool: "BOOL"}
    for c in listed:
        t = stored[c["name"]]
        assert (c["graph"], c["dtype"], c["shape"]) == ("inference", st_dtype[t.dtype], list(t.shape)), c
    # and the loaded module does not show them as state the eager model lacks
    loaded = aotc.load(path)
    assert set(loaded.state_dict()) == set(model.state_dict())


@pytest.mark.slow
@pytest.mark.parametrize("name", GRADIENT_CASES)
def test_forward_backward_gradients_match_eager(hf_bundles, name):
    case, model, path = hf_bundles(name, "autograd")
    loaded = aotc.load(path, mode="train")
    for b, s in [case.batch_seq, case.sizes[0]]:
        inputs = case.inputs(b, s)
        eager = copy.deepcopy(model).train()
        torch.manual_seed(0)
        want = pytree.tree_leaves(plain_outputs(eager(**inputs)))
        torch.manual_seed(0)
        got = pytree.tree_leaves(loaded(**inputs))
        # weight each output differently, so a gradient routed to the wrong output shows
        grads = [torch.randn(w.shape, generator=torch.Generator().manual_seed(i)) for i, w in enumerate(want)]
        torch.autograd.backward([w for w in want if w.requires_grad], [g for g, w in zip(grads, want) if w.requires_grad])
        torch.autograd.backward([o for o in got if o.requires_grad], [g for g, o in zip(grads, got) if o.requires_grad])
        _close(got, want, f"{name} outputs batch {b}")
        params = dict(loaded.named_parameters())
        assert params.keys() == dict(eager.named_parameters()).keys()
        assert any(p.grad is not None for p in eager.parameters()), f"{name}: eager computed no gradient"
        for fqn, p in eager.named_parameters():
            if p.grad is None:
                assert params[fqn].grad is None or not params[fqn].grad.any(), fqn
                continue
            torch.testing.assert_close(params[fqn].grad, p.grad, rtol=1e-3, atol=1e-4, msg=lambda m: f"{name} grad {fqn}: {m}")
        loaded.zero_grad(set_to_none=True)


def test_dynamic_shapes_name_the_models_own_arguments(tmp_path):
    """dynamic_shapes is written against forward, as torch.export documents it, also with
    keyword inputs and a forward that takes **kwargs."""

    class KwargsModel(torch.nn.Module):
        def forward(self, x, *, scale, **extra):
            return x * scale + extra["shift"]

    inputs = {"x": torch.randn(3, 4), "scale": torch.randn(3, 1), "shift": torch.randn(4)}
    b = torch.export.Dim("b", min=1, max=8)
    bundle = aotc.export(KwargsModel(), ((), inputs), tmp_path / "b",
                         dynamic_shapes={"x": {0: b}, "scale": {0: b}, "extra": {"shift": None}})
    loaded = aotc.load(bundle.path)
    for n in (1, 5):
        call = {"x": torch.randn(n, 4), "scale": torch.randn(n, 1), "shift": torch.randn(4)}
        torch.testing.assert_close(loaded(**call), KwargsModel()(**call))


def test_size_one_that_does_not_replay_is_refused_not_wrong(tmp_path):
    """A dim declared from 1 whose graph only holds from 2 is narrowed, said, and refused at 1."""

    class Special(torch.nn.Module):
        def forward(self, x):
            if x.shape[0] == 1:  # torch's trace assumes sizes >= 2 and never sees this branch
                return x * 3
            return x * 2

    bundle = aotc.export(Special(), (torch.randn(4, 2),), tmp_path / "b",
                         dynamic_shapes={"x": {0: torch.export.Dim("n", min=1, max=8)}})
    dim = bundle.metadata.user_inputs[0].dynamic_dims["0"]
    assert (dim.min, dim.declared_min, dim.max) == (2, 1, 8)
    loaded = aotc.load(bundle.path)
    with pytest.raises(InputError, match=r"outside the exported range \[2, 8\]"):
        loaded(torch.randn(1, 2))
    x = torch.randn(3, 2)
    torch.testing.assert_close(loaded(x), x * 2)


def test_side_effects_threaded_by_effect_tokens_are_refused(tmp_path):
    """torch.export can give a graph effect-token inputs; a pure bundle cannot replay them."""
    from aotc.errors import CaptureError

    class Prints(torch.nn.Module):
        def forward(self, x):
            torch.ops.aten._print("called")
            return x * 2

    with pytest.raises(CaptureError, match="operator with side effects"):
        aotc.export(Prints(), (torch.randn(2),), tmp_path / "b")
    assert not (tmp_path / "b").exists()


def test_a_model_holding_state_from_its_last_call_exports(tmp_path):
    """RecurrentGemma caches its recurrent and convolution states as attributes, computed with
    history when the user ran it under grad mode first: export's copies of the model (its
    checks, the references) take them detached instead of crashing in copy.deepcopy."""
    from transformers import RecurrentGemmaConfig, RecurrentGemmaForCausalLM

    torch.manual_seed(0)
    config = RecurrentGemmaConfig(num_hidden_layers=2, vocab_size=128, hidden_size=32, intermediate_size=64,
                                  num_attention_heads=2, num_key_value_heads=1, head_dim=16, lru_width=32,
                                  attention_window_size=16, conv1d_width=4, block_types=["recurrent", "attention"])
    model = RecurrentGemmaForCausalLM(config).eval()
    tokens = torch.randint(0, 128, (1, 8))
    model(tokens)  # as a user tries the model before exporting it
    assert not model.model.layers[0].temporal_block.rg_lru.recurrent_states.is_leaf
    loaded = aotc.load(aotc.export(model, (tokens,), tmp_path / "b").path, backend="fx")
    with torch.no_grad():
        torch.testing.assert_close(loaded(tokens).logits, model(tokens).logits)
