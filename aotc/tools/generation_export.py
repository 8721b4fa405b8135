"""Exporting a generation bundle (see aotc.tools.generation for what it holds and how it runs).

`export_generation` wraps a causal LM in `StaticCacheLM`, captures its "prefill" graph
(a prompt of any length) and its "decode" graph (one token) over the same cache
buffers, and writes one bundle with both, checked like any export. It sits above
aotc.tools.generation, which verify and load use without exporting.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.export import Dim

from aotc.api import export_checks
from aotc.bundle.files import check_target
from aotc.bundle.schema import GenerationInfo, ModelInfo
from aotc.capture import CaptureOptions, capture_call
from aotc.capture.inputs import bind_call
from aotc.errors import AotcError, CaptureError
from aotc.export_writer import Contents, write_bundle
from aotc.tools.generation import StaticCacheLM


def _eos_ids(model: torch.nn.Module) -> tuple[list[int], int | None]:
    config = getattr(model, "generation_config", None) or model.config
    eos = getattr(config, "eos_token_id", None)
    eos = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    vocab = getattr(model.config.get_text_config(), "vocab_size", None)
    if vocab is not None:
        eos = [e for e in eos if 0 <= e < vocab]  # an id the model cannot produce never ends a sequence
    return eos, getattr(config, "pad_token_id", None)


def export_generation(model: torch.nn.Module, out: str | Path, *, batch_size: int = 1, max_cache_len: int = 128,
                      force: bool = False, name: str | None = None, source: str | None = None,
                      task: str | None = "text-generation", assets: dict[str, Path] | None = None,
                      on_phase=None):
    """Write a generation bundle for the causal LM `model` (graphs "prefill" and "decode")."""

    out = Path(out)
    check_target(out, force)
    if max_cache_len < 2:
        raise AotcError(f"max_cache_len is {max_cache_len}; a generation bundle needs room for at least 2 tokens.")
    was_training = model.training
    try:
        return _export_generation(model.eval(), out, batch_size, max_cache_len, force, name, source, task, assets,
                                  on_phase)
    finally:
        model.train(was_training)


def _export_generation(model, out: Path, batch_size, max_cache_len, force, name, source, task, assets, on_phase):

    wrapper = StaticCacheLM(model, batch_size, max_cache_len).eval()
    vocab = model.config.get_text_config().vocab_size
    prompt_len = min(8, max_cache_len - 1)
    prompt = {
        "input_ids": torch.randint(0, vocab, (batch_size, prompt_len), generator=torch.Generator().manual_seed(0)),
        "cache_position": torch.arange(prompt_len),
    }
    length = Dim("prompt", min=1, max=max_cache_len)
    if on_phase:
        on_phase("prefill")
    prompt_call = bind_call(wrapper, ((), prompt),
                            dynamic_shapes={"input_ids": {1: length}, "cache_position": {0: length}})
    prefill = capture_call(wrapper, prompt_call, CaptureOptions(graph_name="prefill"))
    if on_phase:
        on_phase("decode")
    step = {"input_ids": prompt["input_ids"][:, :1].clone(), "cache_position": torch.tensor([prompt_len])}
    decode = capture_call(wrapper, bind_call(wrapper, ((), step)), CaptureOptions(graph_name="decode"))
    if decode.state.keys() != prefill.state.keys():
        raise CaptureError("the prefill and decode graphs of this model take different weights; please report it")
    prefill.graphs |= decode.graphs
    prefill.programs |= decode.programs
    eos, pad = _eos_ids(model)
    info = ModelInfo(
        name=name or type(model).__name__.lower(),
        source=source,
        class_name=type(model).__name__,
        training=False,
        num_parameters=sum(p.numel() for p in model.parameters()),
        task=task,
    )
    generation = GenerationInfo(batch_size=batch_size, max_cache_len=max_cache_len, eos_token_ids=eos,
                                pad_token_id=pad)
    return write_bundle(
        prefill, wrapper, prompt_call, out, Contents("inference", info, assets=assets, generation=generation),
        force=force, on_phase=on_phase,
        check=export_checks(prefill, wrapper, prompt_call, "inference", on_phase=on_phase),
    )
