"""The eager model of a bundle exported from a Hugging Face folder, rebuilt from the bundle
alone: what `aotc verify` compares random samples against and `aotc bench` times as its
baselines, when no --model is given.

The architecture is transformers' own class built from the bundle's hf/config.json
(aotc.sources.hf_folder); the weights are the bundle's weights.safetensors, which the
bundle's hashes cover. Nothing the bundle names is imported or run.
"""

from __future__ import annotations

import torch

from aotc.bundle.archives import load_safetensors
from aotc.bundle.files import WEIGHTS, Bundle
from aotc.errors import ModelFileError
from aotc.sources.hf_folder import BUNDLE_CONFIG, build_from_bundle_config
from aotc.tools.generation import StaticCacheLM


def eager_from_bundle(bundle: Bundle) -> torch.nn.Module:
    """The model the bundle's graphs were captured from, in eval mode: for a generation
    bundle, the model over its static KV cache (as the prefill and decode graphs take it)."""
    model = build_from_bundle_config(bundle)
    g = bundle.manifest.generation
    if g is not None:
        model = StaticCacheLM(model, g.batch_size, g.max_cache_len).eval()
    _load_weights(model, load_safetensors(bundle.path / WEIGHTS), bundle)
    return model


def _load_weights(model: torch.nn.Module, weights: dict[str, torch.Tensor], bundle: Bundle) -> None:
    """Every tensor of the bundle into `model`, and every tensor of `model` from the bundle
    (a tied weight, such as lm_head's, is stored once); anything else is refused."""
    try:
        missing, unexpected = model.load_state_dict(weights, strict=False)
    except RuntimeError as e:  # a tensor of another shape than the config builds
        raise ModelFileError(f"the weights of bundle '{bundle.path}' do not fit {type(model).__name__} built from its "
                             f"{BUNDLE_CONFIG}: {str(e).strip().splitlines()[-1].strip()} Give the model file with "
                             "--model.") from e
    buffers = dict(model.named_buffers())  # the bundle keeps non-persistent buffers too (position_ids)
    with torch.no_grad():
        for name in [n for n in unexpected if n in buffers and buffers[n].shape == weights[n].shape]:
            buffers[name].copy_(weights[name])
            unexpected.remove(name)
    state = model.state_dict()
    loaded = {state[name].data_ptr() for name in weights if name in state}
    untied = [name for name in missing if state[name].data_ptr() not in loaded]
    if unexpected or untied:
        found = [f"{what} {', '.join(names[:3])}" for what, names in (("unexpected", unexpected), ("missing", untied))
                 if names]
        raise ModelFileError(
            f"the weights of bundle '{bundle.path}' do not fit {type(model).__name__} built from its "
            f"{BUNDLE_CONFIG} ({'; '.join(found)}). Give the model file with --model."
        )
