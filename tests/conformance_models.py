"""Architecture table for the conformance matrix: export -> load on each backend, then run
*user code written for the eager model* unchanged against the loaded module and compare values
and gradients with eager.

Each `ConformanceCase` is what a user has: a tiny model built from a default config (only the
sizes made small, nothing downloaded), keyword inputs shaped as their preprocessing gives them
(padded rows included), dynamic shapes written against forward, and two snippets of user code:
`user_loss` (a training step's loss, written against the eager output object with the access
style users write: `out.logits`, `out["logits"]`, `out[0]`, `out.to_tuple()[0]`, pooling, ...)
and `user_read` (what serving code reads). `tokenizer_folder` + `TEXTS` give a BERT-style
tokenizer folder whose ids fit every text model's vocabulary (96).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.export import Dim

VOCAB = 96
PAD = 0
SMALL_TEXT = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, max_position_embeddings=64)
SAMPLES = Path(__file__).resolve().parents[1] / "sample_models"

TEXT_SIZES = [(1, 5), (3, 12)]    # batch 1, another batch, shorter and longer sequences
IMAGE_SIZES = [(1, 0), (3, 0)]    # vision: seq is unused


@dataclass(frozen=True)
class ConformanceCase:
    name: str
    family: str  # causal-lm / encoder / seq2seq / vision / audio / multimodal / sample
    build: Callable[[], torch.nn.Module]
    inputs: Callable[[int, int], dict[str, Tensor]]  # (batch, seq) -> forward kwargs
    dynamic: Callable[[], dict[str, Any] | None]
    user_loss: Callable[[Any, dict[str, Tensor]], Tensor]
    user_read: Callable[[Any], list[Tensor]]
    example: tuple[int, int] = (2, 7)
    sizes: list[tuple[int, int]] = field(default_factory=lambda: list(TEXT_SIZES))


def _seeded(fn):
    def build():
        torch.manual_seed(0)
        return fn().eval()
    return build


# ---- inputs ---------------------------------------------------------------------------------

def _gen(b: int, s: int) -> torch.Generator:
    return torch.Generator().manual_seed(b * 1000 + s)


def _pad(ids: Tensor) -> tuple[Tensor, Tensor]:
    """Right-pad the second row on its last 2 positions, as a tokenizer does for a shorter text."""
    mask = torch.ones_like(ids)
    if ids.shape[0] >= 2 and ids.shape[1] >= 3:
        mask[1, -2:] = 0
    return ids.masked_fill(mask == 0, PAD), mask


def _text(types: bool = False, clip: bool = False):
    def make(b: int, s: int) -> dict[str, Tensor]:
        ids = torch.randint(3, VOCAB - 2, (b, s), generator=_gen(b, s))
        if clip:  # CLIP tokenizer: <bos> ... <eos> then padding; the text tower pools at <eos>
            ids[:, 0] = VOCAB - 2
            ids[:, -1] = VOCAB - 1
            if b >= 2 and s >= 4:
                ids[1, -3] = VOCAB - 1
        ids, mask = _pad(ids)
        out = {"input_ids": ids}
        if types:  # sentence pairs: segment B on the second half of the real tokens
            out["token_type_ids"] = ((torch.arange(s) >= s // 2) & (mask == 1)).long()
        out["attention_mask"] = mask
        return out
    return make


def _seq2seq(b: int, s: int) -> dict[str, Tensor]:
    out = _text()(b, s)
    out["decoder_input_ids"] = torch.randint(3, VOCAB, (b, max(2, s - 2)), generator=_gen(b, -s))
    return out


def _pixels(b: int, s: int, name: str = "pixel_values") -> dict[str, Tensor]:
    return {name: torch.randn(b, 3, 32, 32, generator=_gen(b, s))}


def _images(b: int, s: int) -> dict[str, Tensor]:
    """diffusers' VAE names its image input `sample`."""
    return _pixels(b, s, "sample")


def _whisper_inputs(b: int, s: int) -> dict[str, Tensor]:
    g = _gen(b, s)
    return {"input_features": torch.randn(b, 16, 32, generator=g),  # mel bins x 2*max_source_positions
            "decoder_input_ids": torch.randint(3, VOCAB, (b, s), generator=g)}


def _audio(b: int, s: int) -> dict[str, Tensor]:
    return {"input_values": torch.randn(b, 20 * s + 30, generator=_gen(b, s))}  # -> s frames


def _clip_inputs(b: int, s: int) -> dict[str, Tensor]:
    return {**_text(clip=True)(b, s), **_pixels(b, s)}


# ---- dynamic shapes -------------------------------------------------------------------------

def _batch():
    return Dim("batch", min=1, max=16)


def _text_dims(*names: str, seq_min: int = 2):
    def make():
        b, s = _batch(), Dim("seq", min=seq_min, max=48)
        return {n: {0: b, 1: s} for n in names}
    return make


def _seq2seq_dims():
    b, s, t = _batch(), Dim("seq", min=2, max=48), Dim("target", min=2, max=48)
    return {"input_ids": {0: b, 1: s}, "attention_mask": {0: b, 1: s}, "decoder_input_ids": {0: b, 1: t}}


def _batch_only(name: str):
    return lambda: {name: {0: _batch()}}


def _whisper_dims():
    # input_features' time dim is fixed: Whisper checks it equals 2 * max_source_positions.
    b = _batch()
    return {"input_features": {0: b}, "decoder_input_ids": {0: b, 1: Dim("target", min=2, max=48)}}


def _audio_dims():
    return {"input_values": {0: _batch(), 1: Dim("samples", min=100, max=1000)}}


def _clip_dims():
    # One batch for texts and images: the user pairs them (logits_per_image is square).
    b, s = _batch(), Dim("seq", min=4, max=48)
    return {"input_ids": {0: b, 1: s}, "attention_mask": {0: b, 1: s}, "pixel_values": {0: b}}


# ---- user code: losses and reads, written against the eager output object -------------------

def _next_token_ce(logits: Tensor, inputs: dict[str, Tensor]) -> Tensor:
    labels = inputs["input_ids"].masked_fill(inputs["attention_mask"] == 0, -100)
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)


def _masked_mean(hidden: Tensor, mask: Tensor) -> Tensor:
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)


def _embedding_loss(emb: Tensor) -> Tensor:
    """Sentence-embedding user: normalize, then pull towards a fixed teacher embedding (per row,
    so batch 1 still has gradients)."""
    emb = F.normalize(emb, dim=-1)
    teacher = F.normalize(torch.linspace(-1.0, 1.0, emb.shape[-1]), dim=0)
    return (1 - emb @ teacher).mean()


def _labels(n: int, classes: int) -> Tensor:
    return torch.arange(n) % classes


def _seq2seq_ce(logits: Tensor, inputs: dict[str, Tensor]) -> Tensor:
    tgt = inputs["decoder_input_ids"]
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), tgt[:, 1:].flatten())


def _lm_read(logits: Tensor) -> list[Tensor]:
    return [logits.argmax(-1), logits[:, -1].softmax(-1)]


def _ctc(out, inputs) -> Tensor:
    log_probs = out.logits.log_softmax(-1).transpose(0, 1)  # (frames, batch, vocab)
    frames, b = log_probs.shape[:2]
    targets = torch.arange(1, b * 3 + 1).reshape(b, 3) % (VOCAB - 1) + 1
    return F.ctc_loss(log_probs, targets, torch.full((b,), frames), torch.full((b,), 3), zero_infinity=True)


def _clip_loss(out, inputs) -> Tensor:
    labels = torch.arange(out.logits_per_image.shape[0])
    contrastive = (F.cross_entropy(out.logits_per_image, labels) + F.cross_entropy(out.logits_per_text, labels)) / 2
    return contrastive + (1 - (out.image_embeds * out.text_embeds).sum(-1)).mean()


# ---- builders: tiny configs, defaults otherwise --------------------------------------------

def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    return GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64))


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    return LlamaForCausalLM(LlamaConfig(**SMALL_TEXT, num_key_value_heads=2))


def qwen2():
    from transformers import Qwen2Config, Qwen2ForCausalLM
    return Qwen2ForCausalLM(Qwen2Config(**SMALL_TEXT, num_key_value_heads=2))


def mistral():
    from transformers import MistralConfig, MistralForCausalLM
    return MistralForCausalLM(MistralConfig(**SMALL_TEXT, num_key_value_heads=2, sliding_window=4))


def mixtral():
    from transformers import MixtralConfig, MixtralForCausalLM
    return MixtralForCausalLM(MixtralConfig(**SMALL_TEXT, num_key_value_heads=2, num_local_experts=4,
                                            num_experts_per_tok=2))


def bert_model():
    from transformers import BertConfig, BertModel
    return BertModel(BertConfig(**SMALL_TEXT))


def bert_classifier():
    from transformers import BertConfig, BertForSequenceClassification
    return BertForSequenceClassification(BertConfig(**SMALL_TEXT, num_labels=3))


def roberta():
    from transformers import RobertaConfig, RobertaModel
    # RoBERTa positions start at pad_token_id + 1, hence the 2 extra positions.
    return RobertaModel(RobertaConfig(**{**SMALL_TEXT, "max_position_embeddings": 66}, pad_token_id=PAD))


def distilbert():
    from transformers import DistilBertConfig, DistilBertModel
    return DistilBertModel(DistilBertConfig(vocab_size=VOCAB, dim=32, hidden_dim=64, n_layers=2, n_heads=4,
                                            max_position_embeddings=64))


def t5():
    from transformers import T5Config, T5ForConditionalGeneration
    return T5ForConditionalGeneration(T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                               num_decoder_layers=2, num_heads=4))


def bart():
    from transformers import BartConfig, BartForConditionalGeneration
    return BartForConditionalGeneration(BartConfig(
        vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64))


def whisper():
    from transformers import WhisperConfig, WhisperForConditionalGeneration
    return WhisperForConditionalGeneration(WhisperConfig(
        vocab_size=VOCAB, num_mel_bins=16, d_model=32, encoder_layers=2, encoder_attention_heads=4,
        decoder_layers=2, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
        max_source_positions=16, max_target_positions=64,
        # the default special ids (50256+) lie outside the tiny vocabulary; nn.Embedding rejects the pad id
        pad_token_id=VOCAB - 1, bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1, decoder_start_token_id=VOCAB - 2))


def vit():
    from transformers import ViTConfig, ViTForImageClassification
    return ViTForImageClassification(ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                               intermediate_size=64, image_size=32, patch_size=8, num_labels=5))


def resnet():
    from transformers import ResNetConfig, ResNetForImageClassification
    return ResNetForImageClassification(ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                                                     layer_type="basic", num_labels=5))


def convnext():
    from transformers import ConvNextConfig, ConvNextForImageClassification
    return ConvNextForImageClassification(ConvNextConfig(hidden_sizes=[8, 16], depths=[1, 1], num_stages=2,
                                                         num_labels=5))


def wav2vec2():
    from transformers import Wav2Vec2Config, Wav2Vec2ForCTC
    return Wav2Vec2ForCTC(Wav2Vec2Config(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        conv_dim=(16, 16), conv_stride=(5, 4), conv_kernel=(10, 8), num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4))


def clip():
    from transformers import CLIPConfig, CLIPModel
    return CLIPModel(CLIPConfig(
        text_config=dict(**SMALL_TEXT, pad_token_id=PAD, bos_token_id=VOCAB - 2, eos_token_id=VOCAB - 1),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           image_size=32, patch_size=8),
        projection_dim=16))


def unet():
    from diffusers import UNet2DConditionModel
    return UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(32, 64),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32, attention_head_dim=8, norm_num_groups=8)


def autoencoder():
    from diffusers import AutoencoderKL
    return AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
                         up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(16, 32), latent_channels=4,
                         norm_num_groups=8, layers_per_block=1, sample_size=32)


class VaeEncode(torch.nn.Module):
    """`vae.encode(images)` as a module: what a latent-diffusion pipeline calls first."""

    def __init__(self):
        super().__init__()
        self.vae = autoencoder()

    def forward(self, sample):
        return self.vae.encode(sample)


def bert_lora():
    """peft's LoRA on a BERT classifier: only the adapters train."""
    from peft import LoraConfig, get_peft_model
    return get_peft_model(bert_classifier(), LoraConfig(r=4, lora_alpha=8, target_modules=["query", "value"]))


def swin():
    from transformers import SwinConfig, SwinModel
    # depths of 2: every second block shifts its windows, with the attention mask timm keeps as a buffer
    return SwinModel(SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[2, 2], num_heads=[2, 4],
                                window_size=4))


def _unet_inputs(b: int, s: int) -> dict[str, Tensor]:
    g = _gen(b, s)
    return {"sample": torch.randn(b, 4, 8, 8, generator=g), "timestep": torch.tensor(999 - 7 * b),
            "encoder_hidden_states": torch.randn(b, 6, 32, generator=g)}


def _sample(name: str):
    """A project sample model file (sample_models/NAME.py): its build_model()."""
    def build():
        spec = importlib.util.spec_from_file_location(f"conformance_sample_{name}", SAMPLES / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod.build_model()
    return build


# ---- the table ------------------------------------------------------------------------------

_TEXT_DIMS = _text_dims("input_ids", "attention_mask")
_BERT_DIMS = _text_dims("input_ids", "token_type_ids", "attention_mask")

CASES: dict[str, ConformanceCase] = {c.name: c for c in [
    # causal-lm: next-token cross-entropy against the shifted input_ids (pad positions ignored)
    ConformanceCase("gpt2", "causal-lm", _seeded(gpt2), _text(), _TEXT_DIMS,
                    lambda out, x: _next_token_ce(out.logits, x), lambda out: _lm_read(out.logits)),
    ConformanceCase("llama", "causal-lm", _seeded(llama), _text(), _TEXT_DIMS,
                    lambda out, x: _next_token_ce(out["logits"], x), lambda out: _lm_read(out["logits"])),
    ConformanceCase("qwen2", "causal-lm", _seeded(qwen2), _text(), _TEXT_DIMS,
                    lambda out, x: _next_token_ce(out[0], x), lambda out: _lm_read(out[0])),
    # sliding_window=4 cuts attention at seq 7 and 12. seq >= 4: torch guards seq >= 3 and seq != 3
    # on the sliding-window mask, so a range from 2 is a constraint violation.
    ConformanceCase("mistral_sliding", "causal-lm", _seeded(mistral), _text(),
                    _text_dims("input_ids", "attention_mask", seq_min=4),
                    lambda out, x: _next_token_ce(out.to_tuple()[0], x), lambda out: _lm_read(out.logits)),
    ConformanceCase("mixtral_moe", "causal-lm", _seeded(mixtral), _text(), _TEXT_DIMS,
                    lambda out, x: _next_token_ce(out.logits, x), lambda out: _lm_read(out.logits)),
    # encoder: BERT tokenizer inputs (input_ids, token_type_ids, attention_mask)
    ConformanceCase("bert_sentence_embedding", "encoder", _seeded(bert_model), _text(types=True), _BERT_DIMS,
                    lambda out, x: _embedding_loss(_masked_mean(out.last_hidden_state, x["attention_mask"])),
                    lambda out: [out.last_hidden_state, out.pooler_output]),
    ConformanceCase("bert_classifier", "encoder", _seeded(bert_classifier), _text(types=True), _BERT_DIMS,
                    lambda out, x: F.cross_entropy(out.logits, _labels(len(out.logits), 3)),
                    lambda out: [out.logits.softmax(-1), out.logits.argmax(-1)]),
    ConformanceCase("roberta", "encoder", _seeded(roberta), _text(), _TEXT_DIMS,
                    lambda out, x: _embedding_loss(out.pooler_output), lambda out: [out.pooler_output]),
    ConformanceCase("distilbert", "encoder", _seeded(distilbert), _text(), _TEXT_DIMS,  # no token_type_ids
                    lambda out, x: _embedding_loss(out[0][:, 0]), lambda out: [out[0][:, 0], out.last_hidden_state]),
    # seq2seq: teacher-forced decoder_input_ids; serving reads the encoder states too
    ConformanceCase("t5", "seq2seq", _seeded(t5), _seq2seq, _seq2seq_dims,
                    lambda out, x: _seq2seq_ce(out.logits, x),
                    lambda out: [out.logits.argmax(-1), out.encoder_last_hidden_state]),
    ConformanceCase("bart", "seq2seq", _seeded(bart), _seq2seq, _seq2seq_dims,
                    lambda out, x: _seq2seq_ce(out["logits"], x),
                    lambda out: [out["logits"].argmax(-1), out.encoder_last_hidden_state]),
    ConformanceCase("whisper", "audio", _seeded(whisper), _whisper_inputs, _whisper_dims,
                    lambda out, x: _seq2seq_ce(out.to_tuple()[0], x),
                    lambda out: [out.logits.argmax(-1), out.encoder_last_hidden_state]),
    # vision: 32x32 images, dynamic batch only (patch/position grids are fixed by the config)
    ConformanceCase("vit", "vision", _seeded(vit), _pixels, _batch_only("pixel_values"),
                    lambda out, x: F.cross_entropy(out.logits, _labels(len(out.logits), 5)),
                    lambda out: [out.logits.softmax(-1)], (2, 0), list(IMAGE_SIZES)),
    ConformanceCase("resnet", "vision", _seeded(resnet), _pixels, _batch_only("pixel_values"),
                    lambda out, x: F.cross_entropy(out.to_tuple()[0], _labels(len(out.to_tuple()[0]), 5)),
                    lambda out: [out.logits.argmax(-1)], (2, 0), list(IMAGE_SIZES)),
    ConformanceCase("convnext", "vision", _seeded(convnext), _pixels, _batch_only("pixel_values"),
                    lambda out, x: F.cross_entropy(out[0], _labels(len(out[0]), 5)),
                    lambda out: [out["logits"].softmax(-1)], (2, 0), list(IMAGE_SIZES)),
    # audio: raw 16 kHz-style samples; 20 * seq + 30 samples give seq frames
    ConformanceCase("wav2vec2_ctc", "audio", _seeded(wav2vec2), _audio, _audio_dims, _ctc,
                    lambda out: [out.logits.argmax(-1)], (2, 40), [(1, 20), (3, 45)]),
    # multimodal: texts and images paired in one batch
    ConformanceCase("clip", "multimodal", _seeded(clip), _clip_inputs, _clip_dims, _clip_loss,
                    lambda out: [out.logits_per_image.softmax(-1), out.image_embeds, out.text_embeds]),
    # diffusers: what a latent-diffusion pipeline reads (out.sample, out[0], latent_dist)
    ConformanceCase("unet2d_condition", "diffusion", _seeded(unet), _unet_inputs,
                    lambda: {"sample": {0: _batch()}, "encoder_hidden_states": {0: _batch()}},
                    lambda out, x: F.mse_loss(out.sample, x["sample"]), lambda out: [out.sample, out[0]],
                    (2, 0), list(IMAGE_SIZES)),
    ConformanceCase("autoencoder_kl", "diffusion", _seeded(autoencoder), _images, _batch_only("sample"),
                    lambda out, x: F.mse_loss(out.sample, x["sample"]), lambda out: [out.sample, out.to_tuple()[0]],
                    (2, 0), list(IMAGE_SIZES)),
    ConformanceCase("autoencoder_kl_encode", "diffusion", _seeded(VaeEncode), _images, _batch_only("sample"),
                    lambda out, x: out.latent_dist.kl().mean() + out.latent_dist.mode().pow(2).mean(),
                    lambda out: [out.latent_dist.mean, out.latent_dist.std, out["latent_dist"].mode(),
                                 out.latent_dist.sample(torch.Generator().manual_seed(0))],
                    (2, 0), list(IMAGE_SIZES)),
    # peft: LoRA adapters on a transformers classifier, the base weights frozen
    # PeftModel.forward(*args, **kwargs): dynamic_shapes name its **kwargs, as torch.export has it
    ConformanceCase("bert_lora", "adapters", _seeded(bert_lora), _text(types=True), lambda: {"kwargs": _BERT_DIMS()},
                    lambda out, x: F.cross_entropy(out.logits, _labels(len(out.logits), 2)),
                    lambda out: [out.logits.softmax(-1)]),
    # shifted windows with their attention mask (timm's Swin registers it as a buffer, None where unshifted)
    ConformanceCase("swin", "vision", _seeded(swin), _pixels, _batch_only("pixel_values"),
                    lambda out, x: _embedding_loss(out.pooler_output),
                    lambda out: [out.pooler_output, out.last_hidden_state], (2, 0), list(IMAGE_SIZES)),
    # sample: the project's own model files; plain tensor outputs
    ConformanceCase("sample_tiny_transformer", "sample", _seeded(_sample("tiny_transformer")),
                    lambda b, s: {"tokens": torch.randint(0, 50, (b, s), generator=_gen(b, s))},
                    # pos_emb holds 8 positions: the sequence can't grow past 8.
                    lambda: {"tokens": {0: _batch(), 1: Dim("seq", min=2, max=8)}},
                    lambda out, x: F.cross_entropy(out[:, :-1].flatten(0, 1), x["tokens"][:, 1:].flatten()),
                    lambda out: [out.argmax(-1)], (2, 7), [(1, 5), (3, 8)]),
    ConformanceCase("sample_mlp", "sample", _seeded(_sample("mlp")),
                    lambda b, s: {"x": torch.randn(b, 16, generator=_gen(b, s))}, _batch_only("x"),
                    lambda out, x: F.cross_entropy(out, _labels(len(out), 4)),
                    lambda out: [out.softmax(-1)], (2, 0), list(IMAGE_SIZES)),
]}


# ---- tokenizer ------------------------------------------------------------------------------

TEXTS = ["the cat sat", "a dog runs on the mat today", "the quick brown fox jumps over the lazy dog by the river"]
_WORDS = ("the cat sat a dog runs on mat today quick brown fox jumps over lazy by river and is was "
          "red blue big small ##s ##ed ##ing").split()


def tokenizer_folder(path) -> Path:
    """Save a small BERT-style WordPiece tokenizer (ids < 96) into `path`; returns the folder.
    `AutoTokenizer.from_pretrained(path)(TEXTS, padding=True, return_tensors="pt")` gives
    input_ids, token_type_ids and attention_mask, padded with [PAD] = 0."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {w: i for i, w in enumerate(specials + _WORDS)}
    assert len(vocab) <= VOCAB
    raw = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    raw.normalizer = normalizers.BertNormalizer(lowercase=True)
    raw.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    raw.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    tok = PreTrainedTokenizerFast(
        tokenizer_object=raw, model_input_names=["input_ids", "token_type_ids", "attention_mask"],
        pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")
    tok.save_pretrained(str(path))
    return Path(path)
