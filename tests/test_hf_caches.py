"""transformers' cache layers come back from a bundle with their own class's attributes.

Each model below returns a cache whose layers are not plain key/value layers: sliding
window, linear attention (Mamba's conv and recurrent states), a hybrid stack of both,
DeepSeek-V4's compressor states, and MiniMax's cache with tensors of its own. The loaded
bundle's cache is compared with eager's, attribute by attribute, through the paths user
code reads (`out.past_key_values.layers[0].conv_states[0]`).
"""

from __future__ import annotations

import json

import pytest
import torch

import aotc
from aotc._torch_compat import pytree
from aotc.contract.caches import CacheLayer, KVCache

transformers = pytest.importorskip("transformers", reason="the hf extra (make test installs it)")

SMALL = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=8, max_position_embeddings=128, pad_token_id=0)

# model_type -> the eager layer classes its cache holds (checked, so a transformers
# release that changes them is noticed rather than tested by accident)
MODELS = {
    "gemma2": (dict(sliding_window=4), ["DynamicSlidingWindowLayer", "DynamicLayer"]),
    "falcon_mamba": ({}, ["LinearAttentionLayer", "LinearAttentionLayer"]),
    "olmo_hybrid": ({}, ["LinearAttentionLayer", "DynamicLayer"]),
    "deepseek_v4": ({}, ["DeepseekV4HCACache", "DeepseekV4HCACache"]),
    "minimax": ({}, ["DynamicLayer"]),
}


def _model(model_type: str, **extra):
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(model_type, **SMALL, **MODELS[model_type][0], **extra)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def _inputs(seq: int = 8) -> dict:
    return dict(input_ids=torch.randint(0, 128, (2, seq), generator=torch.Generator().manual_seed(1)),
                attention_mask=torch.ones(2, seq, dtype=torch.long))


def _attributes(obj) -> dict:
    """What user code can read on an eager layer or cache: its public attributes."""
    skipped = {"device", "dtype", "layers", "layer_class_to_replicate"}
    return {k: v for k, v in vars(obj).items() if not k.startswith("_") and k not in skipped}


def _same(got, want, path: str) -> None:
    got_leaves, got_spec = pytree.tree_flatten(got)
    want_leaves, want_spec = pytree.tree_flatten(want)
    assert got_spec == want_spec, f"{path}: {got_spec} != eager's {want_spec}"
    for g, w in zip(got_leaves, want_leaves):
        if isinstance(w, torch.Tensor):
            torch.testing.assert_close(g, w, msg=lambda m: f"{path}: {m}")
        else:
            assert g == w, f"{path}: {g!r} != eager's {w!r}"


def _outcome(call):
    try:
        return call()
    except Exception as e:  # eager's own refusal is the expected answer
        return type(e).__name__


@pytest.mark.parametrize("model_type", sorted(MODELS))
def test_cache_layers_keep_their_class_attributes(model_type, tmp_path):
    model = _model(model_type)
    inputs = _inputs()
    bundle = aotc.export(model, ((), inputs), tmp_path / "b")
    with torch.no_grad():
        want = model(**inputs).past_key_values
        got = aotc.load(bundle.path)(**inputs).past_key_values
    assert [type(layer).__name__ for layer in want.layers] == MODELS[model_type][1]
    assert isinstance(got, KVCache) and got.type_name == type(want).__name__ and len(got) == len(want)
    for i, (g, w) in enumerate(zip(got.layers, want.layers)):
        assert isinstance(g, CacheLayer) and g.type_name == type(w).__name__
        for name, value in _attributes(w).items():
            _same(getattr(g, name), value, f"layers[{i}].{name}")
    for name, value in _attributes(want).items():
        _same(getattr(got, name), value, f"cache.{name}")
    assert _outcome(got.get_seq_length) == _outcome(want.get_seq_length)


def test_a_setting_that_follows_the_input_size_is_refused_not_frozen(tmp_path):
    """A sliding window layer counts the tokens it has seen (`cumulative_length`): with a
    dynamic sequence length that is not a constant of the bundle, so reading it raises
    instead of answering the example's 8 for a call of 12 tokens."""
    model = _model("gemma2")
    seq = torch.export.Dim("seq", min=2, max=64)
    bundle = aotc.export(model, ((), _inputs()), tmp_path / "b",
                         dynamic_shapes={"input_ids": {1: seq}, "attention_mask": {1: seq}})
    with torch.no_grad():
        want = model(**_inputs(12)).past_key_values
        got = aotc.load(bundle.path)(**_inputs(12)).past_key_values
    torch.testing.assert_close(got.layers[0].keys, want.layers[0].keys)
    assert got.layers[0].sliding_window == want.layers[0].sliding_window == 4
    with pytest.raises(AttributeError, match="cumulative_length' depended on the input's size"):
        got.layers[0].cumulative_length
    with pytest.raises(AttributeError, match="depended on the input's size"):
        got.get_seq_length()
    assert want.get_seq_length() == 12


def _spec(node: dict) -> pytree.TreeSpec:
    return pytree.treespec_loads(json.dumps([1, node]))


LEAF = {"type": None, "context": None, "children_spec": []}


def test_a_cache_spec_written_before_layers_kept_their_class_still_loads():
    """Bundles from before: `aotc.KVCache` and `aotc.CacheLayer` nodes without context."""
    layer = {"type": "aotc.CacheLayer", "context": None, "children_spec": [LEAF, LEAF]}
    spec = _spec({"type": "aotc.KVCache", "context": None, "children_spec": [layer]})
    keys, values = torch.zeros(1, 2, 3, 4), torch.ones(1, 2, 3, 4)
    cache = pytree.tree_unflatten([keys, values], spec)
    assert cache.type_name == "DynamicCache" and cache.layers[0].type_name == "DynamicLayer"
    assert cache[0][0] is keys and cache.layers[0].values is values and cache.get_seq_length() == 3 and len(cache) == 1


def test_a_cache_context_naming_a_private_attribute_is_refused():
    """A bundle's JSON is untrusted: a layer context may name public attributes only."""
    layer = {"type": "aotc.CacheLayer", "context": ["DynamicLayer", ["__class__"], [], []], "children_spec": [LEAF]}
    with pytest.raises(ValueError, match="public identifier"):
        _spec(layer)


def test_dtype_and_device_settings_come_back():
    """AXK2's indexer layers hold `indexer_dtype` (a torch.dtype) and `indexer_device`: the
    dtype comes back as it was, the device as the one its tensors are on (the sweep's zoo
    builds the model from a tiny config)."""
    import tempfile

    from benchmarks.sweep.zoos import find

    model, inputs = find("transformers/axk2/causal-lm").build()
    with tempfile.TemporaryDirectory() as tmp:
        bundle = aotc.export(model, ((), inputs), f"{tmp}/b")
        with torch.no_grad():
            want = model(**inputs).past_key_values
            got = aotc.load(bundle.path)(**inputs).past_key_values
    settings = {k: v for k, v in _attributes(want.layers[0]).items() if isinstance(v, (torch.dtype, torch.device))}
    assert set(settings) == {"indexer_dtype", "indexer_device"}
    for i, (g, w) in enumerate(zip(got.layers, want.layers)):
        for name, value in _attributes(w).items():
            _same(getattr(g, name), value, f"layers[{i}].{name}")


def test_get_seq_length_skips_the_layers_eager_skips():
    """NemotronH's cache: a linear attention layer, DummyLayers (keys=None, no CacheLayerMixin:
    eager skips them) and one key/value layer. Asked for layer 0, eager counts the first
    CacheLayerMixin; taking the first layer with `keys` gave 0 where eager has 8."""
    from transformers.cache_utils import DummyLayer, DynamicCache, DynamicLayer, LinearAttentionLayer

    from aotc.contract.cache_capture import from_library

    want = DynamicCache()
    kv = DynamicLayer()
    kv.update(torch.zeros(1, 2, 8, 4), torch.zeros(1, 2, 8, 4))
    want.layers = [LinearAttentionLayer(), DummyLayer(), kv, DummyLayer()]
    got = from_library(want)
    assert want.get_seq_length() == 8
    assert got.get_seq_length() == 8
    leaves, spec = pytree.tree_flatten(got)  # and as a bundle returns it, through its treespec
    assert pytree.tree_unflatten(leaves, spec).get_seq_length() == 8


def test_a_layer_with_its_own_get_seq_length_keeps_what_it_gave():
    """UnlimitedOcr's layers count their prefix beside the window's tokens, in a get_seq_length
    of their own; following transformers' rule instead gave 0 where eager has 8."""
    from transformers.cache_utils import DynamicCache, DynamicSlidingWindowLayer

    from aotc.contract.cache_capture import from_library

    class PrefixLayer(DynamicSlidingWindowLayer):  # a model file's own layer class
        def __init__(self):
            super().__init__(sliding_window=4)
            self.prefix_length = 8

        def get_seq_length(self) -> int:
            return self.prefix_length + super().get_seq_length()

    want = DynamicCache()
    want.layers = [PrefixLayer()]
    got = from_library(want)
    assert want.get_seq_length() == got.get_seq_length() == 8
    leaves, spec = pytree.tree_flatten(got)  # and as a bundle returns it, through its treespec
    assert pytree.tree_unflatten(leaves, spec).get_seq_length() == 8
