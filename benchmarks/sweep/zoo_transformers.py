"""Transformers cases for the coverage sweep: every architecture in transformers' auto mappings,
built from its own config class shrunk to a tiny model with random weights.

    .venv/bin/python -m benchmarks.sweep.zoo_transformers --check [--only SUBSTR] [--limit N]

builds each case, calls it twice and checks both calls agree (see `check`).

The shrinking is generic (`_shrink`: known size fields set small, per-layer lists cut to a few
layers that keep every distinct layer kind) with a per-model_type table (`OVERRIDES`) for what
the generic rules get wrong. Inputs are what a user passes (`_inputs`): text, pixels, video or
audio, chosen from the model's `main_input_name` and forward signature (`INPUT_KIND` where
that is not enough). Multimodal generative models (llava style) get text only: their image
path needs image tokens matched to processor output. What cannot be built is in `EXCLUDED`.

Runs longer than 10 minutes in full; `--skip N --limit M --out FILE` splits it.
"""

from __future__ import annotations

import functools
import inspect
import os
from dataclasses import dataclass
from typing import Any

import torch

from benchmarks.sweep.cases import Case, seeded

# head -> (the auto mapping that lists its architectures, the auto class users build it with)
HEADS = {
    "base": ("MODEL_MAPPING_NAMES", "AutoModel"),
    "causal-lm": ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "AutoModelForCausalLM"),
    "masked-lm": ("MODEL_FOR_MASKED_LM_MAPPING_NAMES", "AutoModelForMaskedLM"),
    "seq-cls": ("MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES", "AutoModelForSequenceClassification"),
    "image-cls": ("MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES", "AutoModelForImageClassification"),
    "speech": ("MODEL_FOR_CTC_MAPPING_NAMES", "AutoModelForCTC"),
}

BATCH, SEQ = 2, 8
AUDIO_SAMPLES = 1920  # 0.12 s at 16 kHz; a multiple of the common hop lengths (320, 480, 640, 960)
FRAMES = 64  # feature frames for speech encoders that take (batch, frames, features)
NUM_LABELS = 3

# Generic sizes, by config field name; applied (to the top config and every sub-config) only
# where the default is an int, so None ("derived from the others") stays derived. Many families
# name the same thing differently, hence the long tail.
SIZES: dict[str, int] = {
    # widths
    "hidden_size": 32, "d_model": 32, "n_embd": 32, "embed_dim": 32, "dim": 32,
    "projection_dim": 32, "projector_hidden_size": 32, "text_embed_dim": 32,
    "vision_embed_dim": 32, "embedding_size": 16, "encoder_hidden_size": 32,
    "decoder_hidden_size": 32, "out_hidden_size": 32, "output_hidden_size": 32,
    "emb_dim": 32, "encoder_hidden_dim": 32, "classifier_proj_size": 32,
    "codevector_dim": 32, "proj_codevector_dim": 32, "xvector_output_dim": 32,
    "pooler_output_size": 32, "num_queries": 8,
    # depths
    "num_hidden_layers": 2, "num_layers": 2, "n_layer": 2, "n_layers": 2, "encoder_layers": 2,
    "decoder_layers": 2, "num_decoder_layers": 2, "num_encoder_layers": 2, "depth": 2,
    "num_nextn_predict_layers": 0,
    # heads
    "num_attention_heads": 4, "n_head": 4, "n_heads": 4, "num_heads": 4,
    "encoder_attention_heads": 4, "decoder_attention_heads": 4,
    "decoder_num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "d_kv": 8, "kv_channels": 8,
    # MLPs
    "intermediate_size": 64, "ffn_dim": 64, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64,
    "d_ff": 64, "n_inner": 64, "decoder_intermediate_size": 64, "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32, "shared_intermediate_size": 32,
    # MoE: few experts, top-2, one shared, one dense layer first
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "moe_num_experts": 4,
    "num_experts_per_tok": 2, "moe_topk": 2, "n_group": 1, "topk_group": 1,
    "n_shared_experts": 1, "num_shared_experts": 1, "first_k_dense_replace": 1,
    # multi-head latent attention (deepseek style)
    "kv_lora_rank": 16, "q_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8,
    "v_head_dim": 8, "index_head_dim": 8, "index_n_heads": 2,
    # linear attention / SSM
    "linear_key_head_dim": 8, "linear_value_head_dim": 8, "linear_num_key_heads": 2,
    "linear_num_value_heads": 4, "mamba_d_state": 8, "ssm_state_size": 8, "state_size": 8,
    "mamba_n_heads": 4, "mamba_head_dim": 16, "mamba_n_groups": 1, "n_groups": 1,
    # positions and vocabularies
    "vocab_size": 128, "max_position_embeddings": 128, "n_positions": 128, "n_ctx": 128,
    "max_target_positions": 128,
    # vision
    "image_size": 32, "num_frames": 4,
    # time series
    "context_length": 32, "prediction_length": 8, "patch_length": 8, "patch_stride": 8,
    # audio front ends (wav2vec2 style)
    "num_conv_pos_embeddings": 16, "num_conv_pos_embedding_groups": 4,
    "num_codevectors_per_group": 8, "upsample_groups": 32,
    # names some families use for the same things
    "num_experts_per_token": 2, "num_expert_group": 1, "linear_head_dim": 8, "linear_num_heads": 4,
    "mamba_dt_rank": 4, "time_step_rank": 4, "embedding_dim": 32, "num_blocks": 2,
    "moe_num_shared_experts": 1, "ffn_hidden_size": 64, "share_expert_dim": 32,
    "shared_experts_intermediate_size": 32, "num_sliding_attention_heads": 4,
    "attention_window_size": 4, "intermediate_size_mlp": 64, "lru_width": 32,
    "hidden_dim": 32, "d_head": 8, "dim_head": 8, "d_inner": 64, "dim_ff": 64, "qk_head_dim": 16,
    "d_latents": 32, "num_latents": 8, "num_self_attends_per_block": 2, "hidden_size_global": 32,
    "expert_ffn_hidden_size": 32, "zero_expert_num": 2, "backbone_hidden_size": 32,
    # secondary vocabularies and embedding tables
    "src_vocab_size": 128, "tgt_vocab_size": 128, "text_vocab_size": 128, "entity_vocab_size": 128,
    "entity_emb_size": 16, "num_bpe_labels": 128, "num_wordpiece_labels": 128,
    "pronunciation_vocab_size": 64, "pronunciation_embed_dim": 32, "shape_vocab_size": 64,
    "shape_embed_dim": 32, "encoder_hash_byte_group_vocab": 128, "num_embeddings": 64,
    "image_token_embed_dim": 32, "base_channels": 32, "latent_channels": 32,  # GroupNorm(32)
    # audio codecs
    "num_filters": 8, "codebook_size": 64, "codebook_dim": 32, "num_quantizers": 2, "n_codebooks": 2,
    "vector_quantization_hidden_dimension": 32, "upsample_initial_channel": 32, "unit_embed_dim": 32,
    "unit_hifi_gan_vocab_size": 64, "speech_decoder_postnet_units": 32, "nemo_conv_channels": 32,
    "downsample_hidden_size": 16, "alignment_intermediate_size": 64,
    # more per-family names
    "unpadded_vocab_size": 128, "swa_num_attention_heads": 4, "swa_num_key_value_heads": 2,
    "swa_head_dim": 8, "sliding_window_size": 4, "n_layers_per_attn_res_block": 2, "moe_hidden_size": 32,
    "max_img_size": 64, "vocab_size_per_layer_input": 128, "hidden_size_per_layer_input": 8,
    "pred_hidden_size": 32, "pred_num_hidden_layers": 2, "pred_num_attention_heads": 4, "crop_size": 32,
    "frames_per_clip": 4,
}
# fields that are caps: made no larger than this (a smaller default stays)
CAPS: dict[str, int] = {"patch_size": 8, "sliding_window": 4, "window_size": 4, "rotary_dim": 4}
# set even where the default is None ("derived"): the derived value would be the default's
ALWAYS = {"head_dim", "vocab_size"}
# list-valued fields (per stage of a vision backbone, mostly): one block a stage, narrow widths
LIST_SIZES = {
    "depths": lambda v: [1] * len(v),
    "num_heads": lambda v: [2**i for i in range(len(v))],  # swin style: one head per 32 wide
    "num_attention_heads": lambda v: [2**i for i in range(len(v))],
    "image_size": lambda v: [32 * x // min(v) // 16 * 16 for x in v],  # (height, width): shortest side 32
    "hidden_sizes": lambda v: [16 * 2**i for i in range(len(v))],
    "conv_dim": lambda v: [32] * len(v),
    "decoder_in_channels": lambda v: [32] * len(v),
    "embed_dim": lambda v: [16 * 2**i for i in range(len(v))],  # cvt style per-stage widths
    "depth": lambda v: [1] * len(v),
    "block_sizes": lambda v: [1] * len(v),
    "neck_hidden_sizes": lambda v: [max(8, x // 32 * 8) for x in v],
    "tdnn_dim": lambda v: [32] * len(v),
}
LAYER_COUNT_FIELDS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers")


# models that fall back to a built-in mrope_section when the config has none; _rope resizes it
MROPE = {"rope_parameters": {"mrope_section": [16, 24, 24]}}

# a narrow HGNet-V2 (stage widths chain: each stage's input is the previous one's output)
HGNET = {"stem_channels": [3, 16, 16], "stage_in_channels": [16, 32, 64, 128], "stage_mid_channels": [16, 16, 32, 32],
         "stage_out_channels": [32, 64, 128, 256], "hidden_sizes": [32, 64, 128, 256],
         "stage_numb_of_layers": [2, 2, 2, 2]}

# Per model_type fixes that the generic rules cannot know. Nested dicts merge into sub-configs.
OVERRIDES: dict[str, dict[str, Any]] = {
    # hybrids: keep one attention layer beside the recurrent ones
    "bamba": {"attn_layer_indices": [1], "mamba_n_heads": 4, "mamba_d_head": 16},
    "jamba": {"attn_layer_period": 2, "attn_layer_offset": 1, "expert_layer_period": 2,
              "expert_layer_offset": 1},
    "granitemoehybrid": {"layer_types": ["linear_attention", "full_attention"], "mamba_n_heads": 4,
                         "mamba_d_head": 16},
    "lfm2_moe": {"layer_types": ["conv", "full_attention"], "num_dense_layers": 1},
    "mamba2": {"head_dim": 16},  # hidden * expand == num_heads * head_dim
    "zamba": {"attention_hidden_size": 64, "attention_head_dim": 16, "num_hidden_layers": 4,
              "layers_block_type": ["linear_attention", "hybrid"] * 2},  # shared block needs two users
    "recurrent_gemma": {"lru_width": 32, "block_types": ["recurrent", "attention"]},
    # MoE configs whose defaults leave the routing unset
    "deepseek_v2": {"num_experts_per_tok": 2, "n_group": 1, "topk_group": 1},
    "dots1": {"n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1},
    "ernie4_5_moe": {"moe_k": 2, "moe_num_shared_experts": 1, "moe_layer_start_index": 1,
                     "moe_layer_end_index": 1},
    "zaya": {"num_experts_per_tok": 1},
    "dbrx": {"attn_config": {"kv_n_heads": 2}, "ffn_config": {"ffn_hidden_size": 64, "moe_num_experts": 4,
                                                             "moe_top_k": 2}},
    "nemotron": {"num_key_value_heads": 2},
    "big_bird": {"attention_type": "original_full"},  # block sparse needs seq > 700; falls back anyway
    "squeezebert": {"embedding_size": 32},
    "xmod": {"default_language": "en_XX"},
    "dory": {"num_hidden_layers": 4, "layer_types": ["sliding_attention", "full_attention", "sliding_attention",
                                                     "full_attention"], "n_input_layers": 1, "n_output_layers": 1},
    "reformer": {"axial_pos_embds_dim": [16, 16], "axial_pos_shape": [8, 16], "attention_head_size": 8,
                 "local_attn_chunk_length": 4, "lsh_attn_chunk_length": 4, "feed_forward_size": 64,
                 "num_buckets": 2, "attn_layers": ["local", "lsh"], "hash_seed": 0},  # seeded LSH: deterministic
    "step3p7": {"text_config": {"sliding_window": 4}},
    "cohere_compass": {"text_config": {"rope_parameters": {"full_attention": {"rope_type": "default",
                                                                               "rope_theta": 10000.0}}}},
    "cohere_compass_text": {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 10000.0}}},
    "sapiens2": {"num_key_value_heads_per_layer": [4, 2], "num_key_value_attention_heads": 2,
                 "num_first_full_attention_layers": 1, "num_last_full_attention_layers": 1},
    "vibevoice_acoustic_tokenizer": {"downsampling_ratios": [2, 2], "depths": [1, 1, 1]},
    **{t: {"encoder_in_channels": [32, 64, 128]} for t in ("rt_detr", "rt_detr_v2")},
    # vision backbones with fixed stage geometry
    "bit": {"num_groups": 4},
    "mobilevitv2": {"image_size": 64},
    "swin2sr": {"num_heads": [4] * 6, "image_size": 16},
    "bridgetower": {"hidden_size": 64, "text_config": {"hidden_size": 64}, "vision_config": {"hidden_size": 64}},
    "shieldgemma2": {"yes_token_index": 10, "no_token_index": 11},
    # multimodal rope: sections sized for the 16 wide head that _rope gives
    "qwen2_vl": {"text_config": MROPE}, "qwen2_5_vl": {"text_config": MROPE},
    "qwen2_vl_text": MROPE, "qwen2_5_vl_text": MROPE,
    "paddleocr_vl": {"text_config": MROPE},
    **{t: {"text_config": MROPE} for t in ("glm4v", "glm46v", "glm4v_moe", "glm_image", "glm_ocr", "glmga")},
    **{t: MROPE for t in ("glm4v_text", "glm4v_moe_text", "glm_image_text", "glm_ocr_text")},
    "hunyuan_vl": {"text_config": MROPE}, "hunyuan_vl_text": MROPE,
    # swin: the last of four stages (1/32 of the image) must hold a whole window
    **{t: {"image_size": 64, "window_size": 2} for t in ("swin", "donut-swin", "maskformer-swin")},
    "lilt": {"hidden_size": 48},  # six box embeddings of hidden // 6 each
    "layoutlmv3": {"coordinate_size": 4, "shape_size": 8, "input_size": 32},  # 4 * 4 + 2 * 8 == hidden
    "levit": {"patch_size": 16, "image_size": 64, "hidden_sizes": [32, 64, 96], "num_attention_heads": [2, 4, 6],
              "key_dim": [8, 8, 8], "down_ops": [["Subsample", 8, 2, 4, 2, 2], ["Subsample", 8, 4, 4, 2, 2]]},
    "efficientnet": {"width_coefficient": 0.05, "hidden_dim": 64},  # top conv is round_filters(1280)
    **{t: {"depth_multiplier": 0.25} for t in ("mobilenet_v1", "mobilenet_v2")},
    "dac": {"encoder_hidden_size": 8}, "pe_audio_encoder": {"dac_config": {"encoder_hidden_size": 8}},
    "xcodec": {"codebook_dim": 64},
    "mask2former": {"feature_size": 32, "mask_feature_size": 32},
    "cvt": {"depth": [1, 2, 3]},  # stage i reads drop_path_rates[i] from a list depth[i] long
    "neomme": {"head_dim": 16},  # partial rotary must rotate a multiple of 4 dims
    "textnet": {"stem_out_channels": 16, "depths": [3, 4, 4, 4]},  # depths match the per-stage kernel lists
    # DETR family: torchvision-free ResNet instead of the default timm backbone
    **{t: {"backbone_config": {"model_type": "resnet", "out_indices": [1, 2, 3, 4], "layer_type": "basic"}}
       for t in ("detr", "conditional_detr", "dab-detr", "table-transformer")},
    "deformable_detr": {"backbone_config": {"model_type": "resnet", "out_indices": [2, 3, 4], "layer_type": "basic"}},
    "hgnet_v2": HGNET,
    **{t: {"backbone_config": HGNET, "encoder_in_channels": [64, 128, 256]}
       for t in ("d_fine", "deimv2", "pp_doclayout_v3", "pp_doclayout_v4")},
    "pp_doclayout_v3": {"backbone_config": HGNET, "encoder_in_channels": [64, 128, 256], "x4_feat_dim": 32},
    "lfm2": {"layer_types": ["conv", "full_attention"], "full_attn_idxs": [1]},
}
# model_types whose input sequence must be longer than SEQ
SEQ_LEN: dict[str, int] = {}
# model_types whose inputs `_kind` cannot tell from the signature; kinds: "text", "image",
# "text+image", "video", "audio" (batch, samples), "audio3d" (batch, 1, samples),
# "mels" (batch, mel bins, frames), "frames" (batch, frames, features)
INPUT_KIND: dict[str, str] = {
    **{t: "audio3d" for t in ("dac", "encodec", "mimi", "mimi_encoder", "xcodec", "pocket_tts_audio_tokenizer",
                              "pocket_tts_audio_tokenizer_encoder", "vibevoice_acoustic_tokenizer",
                              "pe_audio_encoder", "omniasr_audio", "omniasr_ctc", "wavtokenizer",
                              "wavtokenizer_encoder")},
    "speech_to_text": "frames", "wav2vec2-bert": "frames",
    **{t: "text+image" for t in ("vilt", "grounding-dino", "mm-grounding-dino", "blip-2", "sam3", "sam3_lite_text")},
    "xclip": "text+video", "videoprism": "text+video", "kosmos-2": "text+image",
    "siglip2": "text+patches", "siglip2_vision_model": "patches",
    **{t: "codebooks" for t in ("musicgen", "musicgen_melody")},
    **{t: "series" for t in ("patchtst", "patchtsmixer", "timesfm", "timesfm2_5")},
}

# Left out of cases(), with why; the coverage table shows them. Keys: "transformers/<model_type>"
# (every head) or "transformers/<model_type>/<head>".
TIMM = "needs timm (not installed)"
GRID = "vision tower alone: takes patchified pixels with their grid (grid_thw), as its VLM prepares them"
SESSION = "video tracker: forward takes an inference_session built by its processor"
RANDOM = "samples random numbers in forward: two eager calls differ"
EXCLUDED: dict[str, str] = {
    # packages not installed
    **{f"transformers/{t}": TIMM for t in (
        "edgetam", "edgetam_vision_model", "fast_vlm", "gemma3n", "gemma3n_vision", "omdet-turbo", "pe_audio_video",
        "pe_audio_video_encoder", "pe_video", "pe_video_encoder", "perception_lm", "timm_backbone", "timm_wrapper")},
    "transformers/dinat": "needs natten (not installed)",
    "transformers/layoutlmv2": "needs detectron2 (not installed)",
    "transformers/higgs_audio_v2_tokenizer": "needs torchaudio (not installed)",
    "transformers/inkling_mm_model": "needs scipy (not installed)",
    # inputs not synthesized simply
    **{f"transformers/{t}": GRID for t in (
        "cohere_compass_vision", "cosmos3_edge_vision", "exaone4_5_vision", "glm4v_moe_vision", "glm4v_vision",
        "glm5_next_vision", "glm_image_vision", "glm_ocr_vision", "hunyuan_vl_vision", "hy_v4_vl_vision",
        "inkling2_vision", "kimi_k25_vision", "lfm3_vl_vision", "muse_glimmer_vision", "muse_spark_vision",
        "qwen2_5_vl_vision", "qwen3_5_moe_vision", "qwen3_5_vision", "qwen3_vl_moe_vision", "qwen3_vl_vision",
        "qwen4_exp_vision", "video_llama_3_vision")},
    "transformers/minicpm_ocr_vision": "vision tower alone: needs the target_sizes its processor computes",
    "transformers/minicpmv4_7_vision": "vision tower alone: needs the target_sizes its processor computes",
    "transformers/gemma4_vision": "vision tower alone: needs pixel_position_ids from its processor",
    **{f"transformers/{t}": SESSION for t in ("edgetam_video", "sam2_video", "sam3_tracker_video", "sam3_video")},
    "transformers/bros": "needs bbox inputs (document layout)",
    "transformers/udop": "needs bbox inputs (document layout)",
    "transformers/lxmert": "needs visual_feats and visual_pos from an object detector",
    "transformers/lightglue": "needs image pairs and keypoint detector outputs",
    "transformers/seggpt": "needs prompt images and prompt masks",
    "transformers/pi0": "robotics policy: needs action embeddings and state",
    "transformers/decision_transformer": "RL: needs states, actions, returns-to-go and timesteps",
    "transformers/perceiver": "needs modality-specific preprocessed inputs",
    **{f"transformers/{t}": "time series: needs past time features, observed mask and future values"
       for t in ("autoformer", "informer", "time_series_transformer")},
    "transformers/timesfm": "time series: needs past_values_padding and freq",
    "transformers/mimi_decoder": "decoder alone: takes latents",
    "transformers/pocket_tts_audio_tokenizer_decoder": "decoder alone: takes latents",
    "transformers/vibevoice_acoustic_tokenizer_decoder": "takes hidden states, not audio",
    "transformers/vibevoice_acoustic_tokenizer_encoder": "takes hidden states, not audio",
    "transformers/muse_glimmer_assistant": "takes noise embeddings from its parent model",
    "transformers/nemotron3_5_transcribe_word_timestamp": "takes inputs_embeds from its parent model",
    "transformers/audioflamingo3_encoder": "needs input_features_mask",
    "transformers/fun_asr_nano_encoder": "needs input_features_mask",
    "transformers/qwen3_asr_encoder": "needs input_features_mask",
    "transformers/neucodec": "needs both the waveform and its features",
    "transformers/xcodec2": "needs both the waveform and its features",
    "transformers/pe_audio": "needs audio and text together",
    "transformers/clap": "needs fused 4-D mel features with is_longer",
    "transformers/clvp": "needs text tokens and mel features together",
    "transformers/speecht5": "base model has no pre-nets: takes hidden states",
    "transformers/audio-spectrogram-transformer": "input_values are (frames, mels) spectrograms of max_length",
    "transformers/kosmos-2": "needs image_embeds_position_mask matching the image tokens",
    "transformers/idefics": "needs per-sample image stacks and image_attention_mask",
    "transformers/instructblip": "needs qformer_input_ids and image tokens",
    "transformers/instructblipvideo": "needs qformer_input_ids and image tokens",
    "transformers/blip-2/base": "needs pixel_values with image tokens in the text",
    "transformers/blip_2_qformer": "takes query_embeds from its parent model",
    "transformers/kyutai_speech_to_text": "needs audio codes per codebook beside the text",
    "transformers/voxtral_realtime": "needs audio features and text together",
    "transformers/tvp": "needs video frames sized for its visual prompter",
    "transformers/xclip": "video-text model: tiny vision sizes break its cross-frame prompt",
    "transformers/bark": "BarkModel has no forward (generation only)",
    "transformers/glm_image_vqmodel": "VQ-VAE without a forward",
    "transformers/evolla": "no AutoModel class accepts EvollaConfig",
    "transformers/voxtral_realtime_text": "VoxtralRealtimeTextModel is not exported by transformers",
    "transformers/chameleon": "needs a vocabulary_map from a checkpoint",
    "transformers/emu3/base": "needs a vocabulary_map from a checkpoint",
    "transformers/llama4/base": "transformers bug: text-only forward reads outputs.image_outputs",
    # not deterministic
    **{f"transformers/{t}": RANDOM for t in (
        "vit_mae", "vilt", "vits", "univnet", "vibevoice_acoustic_tokenizer", "diffusion_gemma")},
    # the generic shrink breaks a constraint the per-model table does not fix yet
    "transformers/align": "tiny config: text and image embeddings differ in width (efficientnet tower)",
    "transformers/apertus1p5": "tiny config: wavtokenizer codebook_dim must equal its hidden_size",
    "transformers/blt": "tiny config: patcher/encoder/decoder sub-configs do not shrink together",
    "transformers/dbrx": "tiny config: attn_config loses rope_theta when rebuilt",
    "transformers/deepseek_ocr2": "tiny config: mlp_layer_types left unset",
    "transformers/depth_pro": "tiny config: intermediate_hook_ids point past the shrunk encoder",
    "transformers/dia": "tiny config: decoder input ids need one row per audio channel",
    "transformers/dots3_note": "tiny config: per-layer head counts must match",
    "transformers/dots3_note_text": "tiny config: per-layer head counts must match",
    "transformers/efficientloftr": "tiny config: hidden_size must equal the last out_features width",
    "transformers/ernie4_5_vl_moe": "tiny config: 3-D rope needs a wider head",
    "transformers/fun_asr_nano": "tiny config: adaptor width tied to text hidden_size // 4",
    "transformers/gemma3n_text": "tiny config: kv-sharing layer types do not survive the cut",
    "transformers/gemma3n_audio": "takes audio_mel and its mask",
    "transformers/gemma4_assistant": "tiny config: hidden_size_per_layer_input must be 0",
    "transformers/gemma4_unified_assistant": "tiny config: kv-sharing layer types do not survive the cut",
    "transformers/gemma4_audio": "tiny config: subsampling output width tied to the default",
    "transformers/glm5_next": "tiny config: DSA layers must have no rope dims",
    "transformers/glm5_next_text": "tiny config: DSA layers must have no rope dims",
    "transformers/gradium_phonon_tts": "tiny config: flow head condition_dim tied to backbone width",
    "transformers/granite4_vision": "tiny config: deepstack layer map left unset",
    "transformers/granite_speech5_ctc": "input features are stacked frames (4 x 80)",
    "transformers/granite_speech5_encoder": "input features are stacked frames (4 x 80)",
    "transformers/hy_v4_vl": "tiny config: validation of the shrunk sizes fails",
    "transformers/hy_v4_vl_text": "tiny config: validation of the shrunk sizes fails",
    "transformers/inkling2": "tiny config: vision text_hidden_size tied to the text width",
    "transformers/inkling2_loop": "tiny config: vision text_hidden_size tied to the text width",
    "transformers/lw_detr": "tiny config: backbone out_features point past the shrunk ViT",
    "transformers/rf_detr": "tiny config: backbone out_features point past the shrunk ViT",
    "transformers/mistral4": "tiny config: MLA rope dims disagree",
    "transformers/molmo2": "tiny config: adapter vision_feature_layer points past the shrunk ViT",
    "transformers/moonshine_streaming": "tiny config: no num_key_value_heads on the composite config",
    "transformers/moshi": "tiny config: depth decoder sizes tied to the main model",
    "transformers/nemo_speechlm": "tiny config: head audio_hidden_size tied to the encoder width",
    "transformers/nemotron3_5_transcribe_audio": "tiny config: head audio_hidden_size tied to the encoder width",
    "transformers/nemotron3_diarization": "tiny config: head audio_hidden_size tied to the encoder width",
    "transformers/oneformer": "tiny config: text/task encoder sizes do not shrink together",
    "transformers/pocket_tts": "tiny config: flow head condition_dim tied to backbone width",
    **{f"transformers/{t}": "tiny config: OCR backbone strides leave nothing of a small image" for t in (
        "pp_ocrv5_mobile_rec", "pp_ocrv5_server_rec", "pp_ocrv6_medium_det", "pp_ocrv6_small_det",
        "pp_ocrv6_small_rec", "pp_ocrv6_tiny_rec")},
    "transformers/qwen2_5_omni_thinker": "tiny config: rebuilt thinker config loses vision_start_token_id",
    "transformers/qwen3_omni_moe_thinker": "tiny config: rebuilt thinker config loses vision_start_token_id",
    "transformers/qwen4_exp": "tiny config: derived head sizes left unset",
    "transformers/qwen4_exp_text": "tiny config: derived head sizes left unset",
    **{f"transformers/{t}": "tiny config: mask decoder and neck widths tied to 256" for t in (
        "sam", "sam_hq", "sam2", "sam2_hiera_det_model", "sam2_vision_model", "sam3", "sam3_lite_text",
        "sam3_tracker")},
    "transformers/swinv2": "tiny config: per-stage pretrained window sizes do not follow the stages",
    "transformers/t5gemma2_encoder": "tiny config: encoder built on a text config without dropout_rate",
    "transformers/uvdoc": "tiny config: bridge widths tied to the default backbone",
    "transformers/xlstm": "tiny config: mLSTM state shapes tied to the default head size",
}


@dataclass(frozen=True)
class Spec:
    model_type: str
    head: str
    class_name: str


def cases() -> list[Case]:
    from transformers.models.auto import modeling_auto

    out = []
    for head, (mapping, _) in HEADS.items():
        for model_type, class_name in getattr(modeling_auto, mapping).items():
            if isinstance(class_name, (tuple, list)):  # funnel: (FunnelModel, FunnelBaseModel)
                class_name = class_name[0]
            name = f"transformers/{model_type}/{head}"
            if name in EXCLUDED or f"transformers/{model_type}" in EXCLUDED:
                continue
            spec = Spec(model_type, head, class_name)
            out.append(Case(name, "transformers", model_type, head, functools.partial(build, spec)))
    return sorted(out, key=lambda c: c.name)


def build(spec: Spec) -> tuple[torch.nn.Module, dict[str, Any]]:
    seeded(0)
    model = tiny_model(spec).eval()
    return model, _inputs(spec, model)


def tiny_model(spec: Spec):
    """The auto class picks the model class and, for a text head of a multimodal config, the
    text sub-config, as `from_pretrained` does for users."""
    import transformers

    auto = getattr(transformers, HEADS[spec.head][1])
    config = tiny_config(spec.model_type, spec.class_name, spec.head)
    cls = getattr(transformers, spec.class_name)
    if cls.config_class is not type(config) and cls.config_class is not None:
        # the class is built on a sub-config the auto class does not pick (musicgen: decoder)
        sub = next((v for v in vars(config).values() if type(v) is cls.config_class), None)
        if sub is not None:
            return cls(sub)
    return auto.from_config(config)


# ----------------------------------------------------------------------------------- configs

def tiny_config(model_type: str, class_name: str | None = None, head: str = "base"):
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    cls = CONFIG_MAPPING[model_type]
    default = cls()
    kwargs = _shrink(default, OVERRIDES.get(model_type, {}))
    kwargs["num_labels"] = NUM_LABELS
    if head == "causal-lm" and hasattr(default, "is_decoder"):
        kwargs["is_decoder"] = True  # encoder families' LM heads are built as decoders
    if class_name:  # as in a saved config; the auto class reads it where a type maps to two classes
        kwargs["architectures"] = [class_name]
    return cls(**kwargs)


def _shrink(config, overrides: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments that rebuild `config` tiny: sizes from SIZES, per-layer lists cut,
    special token ids moved into the small vocabulary, sub-configs shrunk the same way."""
    from transformers import PreTrainedConfig

    fields = config.to_dict()
    kw: dict[str, Any] = {}
    subs = {k: v for k in fields if isinstance(v := _attr(config, k), PreTrainedConfig)}
    for key in fields:
        # heterogeneous configs (gemma4) refuse reading per-layer fields globally: take to_dict's
        value = subs.get(key, fields[key])
        if isinstance(value, PreTrainedConfig):
            sub_overrides = overrides.get(key, {})
            if sub_overrides.get("model_type", value.model_type) != value.model_type:
                from transformers.models.auto.configuration_auto import CONFIG_MAPPING

                value = CONFIG_MAPPING[sub_overrides["model_type"]]()  # another kind of sub-model
            sub = _shrink(value, sub_overrides)
            # keep what the parent set on its sub-config (e.g. llava's vision tower defaults)
            kw[key] = {**_non_default(value), **sub, "model_type": value.model_type}
        elif value is None and key in ALWAYS:
            kw[key] = SIZES[key]
        elif isinstance(value, bool) or value is None:
            continue
        elif isinstance(value, int) and key in SIZES:
            kw[key] = SIZES[key]
        elif isinstance(value, int) and key in CAPS:
            kw[key] = min(value, CAPS[key])
        elif isinstance(value, (list, tuple)) and key in LIST_SIZES and value:
            kw[key] = LIST_SIZES[key](value)
    if "num_key_value_heads" in kw and fields.get("num_key_value_heads") == fields.get("num_attention_heads"):
        kw["num_key_value_heads"] = kw.get("num_attention_heads", 4)  # keep multi-head models MHA
    _cut_layers(fields, kw)
    _small_token_ids(fields, kw)
    _rope({**fields, "rope_parameters": {**(fields.get("rope_parameters") or {}),
                                         **overrides.get("rope_parameters", {})}}, kw)
    overrides = {k: v for k, v in overrides.items() if k != "rope_parameters" or "rope_parameters" not in kw}
    kw.update({k: v for k, v in overrides.items() if k not in subs})
    return kw


def _attr(config, key: str):
    try:
        return getattr(config, key, None)
    except Exception:  # AmbiguousGlobalPerLayerAttributeError
        return None


def _non_default(config) -> dict[str, Any]:
    try:
        default = type(config)().to_dict()
    except Exception:
        return {}
    return {k: v for k, v in config.to_dict().items()
            if k not in ("transformers_version", "architectures", "model_type") and default.get(k) != v
            and not isinstance(v, dict)}


def _cut_layers(fields: dict[str, Any], kw: dict[str, Any]) -> None:
    """Keep a few layers, chosen so that every kind of layer stays: per-layer kind lists
    (layer_types, mlp_layer_types, ...) keep the first layer of each kind, layer index lists
    (moe_layers, full_attn_idxs, ...) the first layer in and the first out; both are then cut
    to the kept layers."""
    key = next((k for k in LAYER_COUNT_FIELDS if isinstance(fields.get(k), int) and k in kw), None)
    if key is None:
        return
    n = fields[key]
    if n <= kw[key]:
        return
    # a string is per layer only as a pattern (nemotron_h's "M-M*-..."), else "gelu_new" could be
    kinds = {k: v for k, v in fields.items()
             if (isinstance(v, list) or isinstance(v, str) and "pattern" in k) and len(v) == n
             and len({repr(x) for x in v}) <= 4 and k not in kw}
    indices = {k: v for k, v in fields.items()
               if k not in kinds and k not in kw and not k.startswith("out_") and isinstance(v, list)
               and len(v) > 0 and all(type(x) is int for x in v) and v == sorted(set(v)) and v[-1] < n}
    keep: set[int] = set()
    for values in kinds.values():
        firsts: dict[str, int] = {}
        for i, v in enumerate(values):
            firsts.setdefault(repr(v), i)
        keep |= set(firsts.values())
    for values in indices.values():
        keep.add(values[0])
        keep |= {next((i for i in range(n) if i not in values), values[0])}
    keep_list = sorted(keep)
    for i in range(n):
        if len(keep_list) >= kw[key]:
            break
        if i not in keep:
            keep_list.append(i)
    keep_list = sorted(keep_list)
    kw[key] = len(keep_list)
    for k, v in kinds.items():
        cut = [v[i] for i in keep_list]
        kw[k] = "".join(cut) if isinstance(v, str) else cut
    for k, v in indices.items():
        kw[k] = [j for j, i in enumerate(keep_list) if i in set(v)]
    keep = keep_list
    # heterogeneous configs (gemma4): {"05": {"head_dim": 512}, ...} keyed by layer index
    plc = fields.get("per_layer_config")
    if isinstance(plc, dict) and plc:
        width = len(next(iter(plc)))
        kw["per_layer_config"] = {
            f"{j:0{width}d}": {f: SIZES.get(f, min(v, CAPS[f]) if f in CAPS and isinstance(v, int) else v)
                               for f, v in plc[f"{i:0{width}d}"].items()}
            for j, i in enumerate(keep) if f"{i:0{width}d}" in plc}


def _small_token_ids(fields: dict[str, Any], kw: dict[str, Any]) -> None:
    """Special token ids past the tiny vocabulary move to its top, one id each."""
    vocab = kw.get("vocab_size")
    if vocab is None:
        return
    keys = [k for k, v in fields.items()
            if (k.endswith("token_id") or k.endswith("token_index") or k.endswith("token_ids"))
            and (isinstance(v, int) and not isinstance(v, bool) or isinstance(v, list))]
    used = {v for k in keys for v in _as_list(fields[k]) if isinstance(v, int) and v < vocab}
    free = (i for i in range(vocab - 1, 0, -1) if i not in used)
    moved: dict[int, int] = {}
    for k in keys:
        new = []
        for v in _as_list(fields[k]):
            if isinstance(v, int) and v >= vocab:
                v = moved.setdefault(v, next(free))
            new.append(v)
        if new != _as_list(fields[k]):
            kw[k] = new if isinstance(fields[k], list) else new[0]
    if "pad_token_id" in fields and fields["pad_token_id"] is None:
        # classifiers of decoder-only models find the last token by it; the lowest free id, since
        # roberta-style position ids start after it
        used |= set(moved.values())
        kw["pad_token_id"] = min(i for i in range(vocab) if i not in used)


def _as_list(v) -> list:
    return v if isinstance(v, list) else [v]


def _rope(fields: dict[str, Any], kw: dict[str, Any]) -> None:
    """Multimodal rope sections must add up to half the rotary dim: give such models a 16 wide
    head (hidden 64) so that each section keeps at least one frequency."""
    rope = fields.get("rope_parameters")
    if not isinstance(rope, dict) or not rope.get("mrope_section"):
        return
    kw.update(hidden_size=64, head_dim=16)
    factor = rope.get("partial_rotary_factor") or fields.get("partial_rotary_factor") or 1.0
    n = len(rope["mrope_section"])
    half = int(16 * factor) // 2
    sections = [half // n] * n
    sections[0] += half - sum(sections)
    kw["rope_parameters"] = {**rope, "mrope_section": sections}


# ------------------------------------------------------------------------------------ inputs

# input kinds: what a model's users hand it, by the model's main input
MAIN_INPUTS = ("input_ids", "pixel_values", "pixel_values_videos", "input_values", "input_features")


def _kind(spec: Spec, model, params) -> str:
    if spec.model_type in INPUT_KIND:
        return INPUT_KIND[spec.model_type]
    name = getattr(model, "main_input_name", "input_ids")
    if name not in params:  # sub-models often keep the base class's "input_ids"
        name = next((n for n in MAIN_INPUTS if n in params), name)
    config = model.config
    if name == "input_ids":
        # contrastive dual encoders (clip style) take both; a VLM (image tokens) gets text only
        dual = "pixel_values" in params and hasattr(config, "vision_config") and not any(
            k.startswith(("image_token", "img_token")) for k in config.to_dict())
        return "text+image" if dual else "text"
    if name == "pixel_values":
        return "video" if hasattr(_sub(config, "vision_config"), "num_frames") else "image"
    if name == "pixel_values_videos":
        return "video"
    if name == "input_values":
        return "audio"
    if name == "input_features":
        # a conv over the mel bins (whisper style) takes (mels, frames), a conformer (frames, mels)
        bins = _bins(config)
        mels_first = any(isinstance(m, torch.nn.Conv1d) and m.in_channels == bins for m in model.modules())
        return "mels" if mels_first else "frames"
    raise NotImplementedError(f"main input {name!r}")


def _sub(config, key: str):
    return getattr(config, key, None) or config


def _inputs(spec: Spec, model) -> dict[str, Any]:
    config = model.config
    params = inspect.signature(model.forward).parameters
    kind = _kind(spec, model, params)
    inputs: dict[str, Any] = {}
    if "text" in kind:
        inputs.update(_text(spec, config, params))
    if kind in ("image", "text+image"):
        inputs["pixel_values"] = _pixels(config)
    if kind in ("video", "text+video"):
        vision = _sub(config, "vision_config")
        name = "pixel_values" if "pixel_values" in params else "pixel_values_videos"
        inputs[name] = _pixels(config, frames=getattr(vision, "num_frames", 4))
    if kind in ("audio", "audio3d"):
        shape = (BATCH, 1, AUDIO_SAMPLES) if kind == "audio3d" else (BATCH, AUDIO_SAMPLES)
        inputs["input_values"] = torch.randn(*shape)
    if "patches" in kind:  # siglip2 takes images cut into patches, with their grid
        vision = _sub(config, "vision_config")
        side = int(vision.num_patches ** 0.5)
        dim = vision.num_channels * vision.patch_size**2
        inputs.update(pixel_values=torch.randn(BATCH, side * side, dim),
                      pixel_attention_mask=torch.ones(BATCH, side * side, dtype=torch.long),
                      spatial_shapes=torch.tensor([[side, side]] * BATCH))
    if kind == "codebooks":  # audio-token decoders: one row of ids per codebook
        codebooks = _sub(config, "decoder").num_codebooks
        inputs["input_ids"] = _ids(config, SEQ).repeat_interleave(codebooks, dim=0)
    if kind in ("mels", "frames"):
        inputs["input_features"] = _features(config, kind)
    if kind == "series":  # time series: (batch, context, channels) of past values
        channels = getattr(config, "num_input_channels", None)
        shape = (BATCH, config.context_length) + ((channels,) if channels else ())
        inputs["past_values"] = torch.randn(*shape)
    if "decoder_input_ids" in params and getattr(config, "is_encoder_decoder", False) and "text" not in kind:
        inputs["decoder_input_ids"] = _ids(config, SEQ)
    return inputs


def _ids(config, seq: int) -> torch.Tensor:
    """Random token ids below the text vocabulary that are no special token."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    vocab = getattr(text, "vocab_size", None) or getattr(config, "vocab_size", None) or 128
    special = {v for c in (config, text) for k, val in c.to_dict().items()
               if k.endswith(("token_id", "token_index", "token_ids")) for v in _as_list(val)
               if isinstance(v, int)}
    allowed = torch.tensor([i for i in range(vocab) if i not in special])
    return allowed[torch.randint(len(allowed), (BATCH, seq))]


def _text(spec: Spec, config, params) -> dict[str, Any]:
    seq = SEQ_LEN.get(spec.model_type, SEQ)
    ids = _ids(config, seq)
    eos = getattr(config.get_text_config(), "eos_token_id", None)
    if spec.head == "seq-cls" and getattr(config, "is_encoder_decoder", False) and isinstance(eos, int):
        ids[:, -1] = eos  # bart-style classifiers pool the final <eos>, as tokenizers append it
    inputs = {"input_ids": ids}
    if "attention_mask" in params:
        inputs["attention_mask"] = torch.ones_like(ids)
    if "decoder_input_ids" in params and getattr(config, "is_encoder_decoder", False):
        inputs["decoder_input_ids"] = _ids(config, seq)
    return inputs


def _pixels(config, frames: int | None = None) -> torch.Tensor:
    vision = _sub(config, "vision_config")
    size = getattr(vision, "image_size", None) or 32
    size = size if isinstance(size, (list, tuple)) else (size, size)
    channels = getattr(vision, "num_channels", 3)
    shape = (BATCH, channels, *size[-2:]) if frames is None else (BATCH, frames, channels, *size[-2:])
    return torch.randn(*shape)


def _audio(config):
    return next((c for c in (getattr(config, k, None) for k in ("audio_config", "encoder_config")) if c), config)


def _bins(config) -> int:
    audio = _audio(config)
    return next((getattr(audio, k) for k in ("num_mel_bins", "feature_projection_input_dim", "feature_size",
                                             "input_feat_per_channel")
                 if isinstance(getattr(audio, k, None), int)), 80)


def _features(config, kind: str) -> torch.Tensor:
    if kind == "mels":  # whisper pads every clip to 2 * max_source_positions frames
        positions = getattr(_audio(config), "max_source_positions", None)
        return torch.randn(BATCH, _bins(config), 2 * positions if positions else FRAMES)
    return torch.randn(BATCH, FRAMES, _bins(config))


# ------------------------------------------------------------------------------------- check

def _tensors(obj, out: list, seen: set) -> list:
    """Every tensor in an output: ModelOutputs, tuples, dicts and cache objects."""
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif id(obj) in seen or obj is None or isinstance(obj, (str, int, float, bool, torch.nn.Module)):
        pass
    elif isinstance(obj, dict):
        seen.add(id(obj))
        for v in obj.values():
            _tensors(v, out, seen)
    elif isinstance(obj, (list, tuple)):
        seen.add(id(obj))
        for v in obj:
            _tensors(v, out, seen)
    elif hasattr(obj, "__dict__"):
        seen.add(id(obj))
        for v in vars(obj).values():
            _tensors(v, out, seen)
    return out


def _cache_layers(output) -> str:
    """The cache an output returns, with its layer classes: "DynamicCache[DynamicLayer]"."""
    cache = next((v for k, v in output.items() if k in ("cache", "past_key_values", "cache_params")), None) \
        if isinstance(output, dict) else None
    if cache is None:
        return ""
    if hasattr(cache, "self_attention_cache"):  # EncoderDecoderCache: its decoder self-attention half
        return f"{type(cache).__name__}({_layer_names(cache.self_attention_cache)})"
    return _layer_names(cache)


def _layer_names(cache) -> str:
    layers = getattr(cache, "layers", None)
    if layers is None:
        return type(cache).__name__
    return f"{type(cache).__name__}[{','.join(sorted({type(layer).__name__ for layer in layers}))}]"


def check(only: str | None, limit: int | None, skip: int, out_path: str) -> None:
    import gc
    import signal
    import time

    import transformers

    transformers.logging.set_verbosity_error()
    todo = [c for c in cases() if only is None or only in c.name][skip:]
    todo = todo[:limit] if limit else todo

    def alarm(*_):
        raise TimeoutError("case took over 120 s")

    signal.signal(signal.SIGALRM, alarm)
    lines, ok, start = [], 0, time.perf_counter()
    os.makedirs(os.path.dirname(out_path) or ".", exist_ok=True)
    for case in todo:
        t0 = time.perf_counter()
        params, note = 0, ""
        signal.alarm(120)
        try:
            spec = case.build.args[0]
            with torch.device("meta"):  # refuse what did not shrink before allocating it
                try:
                    params = sum(p.numel() for p in tiny_model(spec).parameters())
                except Exception:
                    params = 0
            if params > 50_000_000:
                raise RuntimeError(f"too big: {params} parameters")
            model, inputs = case.build()
            params = sum(p.numel() for p in model.parameters())
            t1 = time.perf_counter()
            first = _tensors(model(**inputs), [], set())
            output = model(**inputs)
            second = _tensors(output, [], set())
            if len(first) != len(second) or not all(
                    a.shape == b.shape and torch.equal(a.nan_to_num(), b.nan_to_num()) for a, b in zip(first, second)):
                raise RuntimeError("outputs differ between two calls")
            if not first:
                raise RuntimeError(f"no tensor in output {type(output).__name__}")
            nonfinite = any(t.is_floating_point() and not torch.isfinite(t).all() for t in second)
            note = " ".join(x for x in (type(output).__name__, _cache_layers(output),
                                        "NONFINITE" if nonfinite else "") if x)
            status = f"OK build {t1 - t0:.2f}s call {(time.perf_counter() - t1) / 2:.2f}s {note}"
            ok += 1
            del model, inputs, output, first, second
        except BaseException as e:  # noqa: BLE001 - one case's failure must not stop the sweep
            if isinstance(e, KeyboardInterrupt):
                raise
            msg = (str(e).strip().splitlines() or [""])[0][:200]
            status = f"FAIL {type(e).__name__}: {msg}"
        finally:
            signal.alarm(0)
        line = f"{case.name:60s} {params:>10d} {time.perf_counter() - t0:7.2f}s {status}"
        print(line, flush=True)
        lines.append(line)
        if len(lines) % 25 == 0:  # a full collection takes ~0.2 s; every case would add minutes
            gc.collect()
    summary = f"{ok}/{len(todo)} OK in {time.perf_counter() - start:.0f}s"
    print(summary)
    with open(out_path, "w") as f:
        f.write("\n".join(lines + [summary]) + "\n")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="build and call every case")
    parser.add_argument("--only", help="cases whose name contains this")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--skip", type=int, default=0, help="leave out the first N cases")
    parser.add_argument("--out", default="build/sweep/zoo_transformers_check.txt")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.check:
        check(args.only, args.limit, args.skip, args.out)
    else:
        for c in cases():
            print(c.name)
