"""Tiny Hugging Face models with default configs (only the sizes made small), built
locally: nothing is downloaded. Each case is what a user has: the model class, its
config, keyword inputs, and dynamic batch (and sequence) dims written against forward.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.export import Dim

SMALL_TEXT = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, max_position_embeddings=64)


@dataclass
class HFCase:
    name: str
    build: Callable[[], torch.nn.Module]
    inputs: Callable[[int, int], dict[str, torch.Tensor]]  # (batch, seq) -> kwargs
    dynamic: Callable[[], dict[str, Any]]
    batch_seq: tuple[int, int] = (2, 7)
    sizes: list[tuple[int, int]] = field(default_factory=lambda: [(1, 5), (3, 9), (1, 1)])


def _seeded(fn):
    def build():
        torch.manual_seed(0)
        return fn().eval()
    return build


def _ids(vocab: int):
    def make(b: int, s: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(b * 100 + s)
        return {"input_ids": torch.randint(3, vocab, (b, s), generator=g),
                "attention_mask": torch.ones(b, s, dtype=torch.long)}
    return make


def _text_dims(*names: str):
    def make():
        b, s = Dim("batch", min=1, max=16), Dim("seq", min=1, max=48)
        return {n: {0: b, 1: s} for n in names}
    return make


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(vocab_size=96, n_embd=32, n_layer=2, n_head=4, n_positions=64))


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(LlamaConfig(**SMALL_TEXT, num_key_value_heads=2))


def qwen2():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    return Qwen2ForCausalLM(Qwen2Config(**SMALL_TEXT, num_key_value_heads=2))


def bert():
    from transformers import BertConfig, BertForSequenceClassification

    return BertForSequenceClassification(BertConfig(**SMALL_TEXT, num_labels=3))


def _seq2seq_inputs(vocab: int):
    def make(b: int, s: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(b * 100 + s)
        return {"input_ids": torch.randint(3, vocab, (b, s), generator=g),
                "attention_mask": torch.ones(b, s, dtype=torch.long),
                "decoder_input_ids": torch.randint(3, vocab, (b, max(1, s - 2)), generator=g)}
    return make


def _seq2seq_dims():
    b, s, t = Dim("batch", min=1, max=16), Dim("seq", min=1, max=48), Dim("target", min=1, max=48)
    return {"input_ids": {0: b, 1: s}, "attention_mask": {0: b, 1: s}, "decoder_input_ids": {0: b, 1: t}}


def t5():
    from transformers import T5Config, T5ForConditionalGeneration

    return T5ForConditionalGeneration(T5Config(vocab_size=96, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                               num_decoder_layers=2, num_heads=4))


def bart():
    from transformers import BartConfig, BartForConditionalGeneration

    return BartForConditionalGeneration(BartConfig(
        vocab_size=96, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64))


def vit():
    from transformers import ViTConfig, ViTForImageClassification

    return ViTForImageClassification(ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                               intermediate_size=64, image_size=32, patch_size=8, num_labels=5))


def _pixels(b: int, s: int) -> dict[str, torch.Tensor]:
    return {"pixel_values": torch.randn(b, 3, 32, 32, generator=torch.Generator().manual_seed(b))}


def whisper_encoder():
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    return WhisperEncoder(WhisperConfig(vocab_size=96, num_mel_bins=16, d_model=32, encoder_layers=2,
                                        encoder_attention_heads=4, decoder_layers=2, decoder_attention_heads=4,
                                        encoder_ffn_dim=64, decoder_ffn_dim=64, max_source_positions=16))


def _features(b: int, s: int) -> dict[str, torch.Tensor]:
    return {"input_features": torch.randn(b, 16, 32, generator=torch.Generator().manual_seed(b))}


def _batch_dim(name: str):
    return lambda: {name: {0: Dim("batch", min=1, max=16)}}


_IMAGE_SIZES = [(1, 0), (3, 0)]

CASES: dict[str, HFCase] = {
    c.name: c
    for c in [
        HFCase("gpt2", _seeded(gpt2), _ids(96), _text_dims("input_ids", "attention_mask")),
        HFCase("llama", _seeded(llama), _ids(96), _text_dims("input_ids", "attention_mask")),
        HFCase("qwen2", _seeded(qwen2), _ids(96), _text_dims("input_ids", "attention_mask")),
        HFCase("bert", _seeded(bert), _ids(96), _text_dims("input_ids", "attention_mask")),
        HFCase("t5", _seeded(t5), _seq2seq_inputs(96), _seq2seq_dims),
        HFCase("bart", _seeded(bart), _seq2seq_inputs(96), _seq2seq_dims),
        HFCase("vit", _seeded(vit), _pixels, _batch_dim("pixel_values"), (2, 0), _IMAGE_SIZES),
        HFCase("whisper_encoder", _seeded(whisper_encoder), _features, _batch_dim("input_features"), (2, 0),
               _IMAGE_SIZES),
    ]
}
