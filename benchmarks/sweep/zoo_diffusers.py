"""diffusers cases: each model class from a tiny config, called with the keyword inputs its
pipelines pass (sample, timestep, encoder_hidden_states, ...; the default return_dict).

    .venv/bin/python -m benchmarks.sweep.zoo_diffusers --check [--only SUBSTR]

One builder function per case (`@case`), so a config and its inputs read together. A class's
main case is its forward (head "base"); a method pipelines call on its own (the VAE's decode)
is a second case, wrapped as a module's forward, named "diffusers/<Class>/<head>".
Builders import diffusers lazily: `cases()` builds nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

import torch

from benchmarks.sweep.cases import Case, seeded, unzero

B = 2  # batch

Built = tuple[torch.nn.Module, dict[str, Any]]


@dataclass(frozen=True)
class Spec:
    cls: str                    # diffusers class name: the case's family
    head: str                   # "base" (forward) or what the case calls instead
    make: Callable[[], Built]   # model and inputs; called right after seeding


SPECS: list[Spec] = []

# Every other diffusers ModelMixin class (0.42.1), left out with why.
_WRAPPER = "runs several {} in a loop: the same layers as that case"
_INTERNAL = "a pipeline-internal projection/conditioning module (a few layers), not a model users export"
_NOT_YET = "no tiny config here yet (newer or niche; inputs need its pipeline's preparation)"
EXCLUDED: dict[str, str] = {
    # not deterministic or no plain forward
    "ConsistencyDecoderVAE": "forward decodes by sampling noise (randn_tensor) each call: not deterministic",
    "AutoencoderKLAllegro": "encode exists only tiled (enable_tiling; 24-frame, 320 px tiles): no small case",
    "MotionAdapter": "weights for UNetMotionModel; its forward does nothing",
    "ControlNetXSAdapter": "weights for UNetControlNetXSModel; its forward raises",
    "Kandinsky6SRLatentUpscalerBank": "a bank of upscalers the pipeline picks from; no forward of its own",
    # wrappers
    "MultiControlNetModel": _WRAPPER.format("ControlNetModel"),
    "MultiAdapter": _WRAPPER.format("T2IAdapter"),
    "SD3MultiControlNetModel": _WRAPPER.format("SD3ControlNetModel"),
    "FluxMultiControlNetModel": _WRAPPER.format("FluxControlNetModel"),
    "HunyuanDiT2DMultiControlNetModel": _WRAPPER.format("HunyuanDiT2DControlNetModel"),
    "QwenImageMultiControlNetModel": _WRAPPER.format("QwenImageControlNetModel"),
    # deprecated pipelines
    "T5FilmDecoder": "spectrogram diffusion: a deprecated pipeline",
    "UniDiffuserModel": "UniDiffuser: a deprecated pipeline",
    "UniDiffuserTextDecoder": "UniDiffuser: a deprecated pipeline",
    # pipeline-internal pieces
    **dict.fromkeys([
        "CLIPImageProjection", "ReduxImageEncoder", "StableAudioProjectionModel",
        "AudioLDM2ProjectionModel", "StableAudio3DurationEmbedder", "Ideogram4PromptEnhancerHead",
        "AceStepAudioTokenizer", "AceStepAudioTokenDetokenizer", "AceStepConditionEncoder",
        "AnimaTextConditioner", "MiniMaxMusic3ConditionEncoder"], _INTERNAL),
    # not configured yet
    "QwenImage21Transformer2DModel": "img_mask's meaning is not in its signature; a guessed one fails in forward",
    **dict.fromkeys([
        "AceStepTransformer1DModel", "AnyFlowFARTransformer3DModel", "AnyFlowTransformer3DModel",
        "AutoencoderKLHunyuanImageRefiner", "AutoencoderKLKVAEAudio", "AutoencoderKLKVAEVideo",
        "AutoencoderKLLTX2Audio", "AutoencoderKLMiniMaxH3", "AutoencoderKLMiniMaxH3Audio",
        "AutoencoderRAE", "AutoencoderSAME", "BriaFibo2Transformer2DModel",
        "BriaFiboTransformer2DModel", "ConsisIDTransformer3DModel", "Cosmos3AVAEAudioTokenizer",
        "Cosmos3OmniTransformer", "CosmosControlNetModel", "GlmImageTransformer2DModel",
        "HunyuanVideoFramepackTransformer3DModel", "Ideogram4Transformer2DModel",
        "JoyImageEditPlusTransformer3DModel", "JoyImageEditTransformer3DModel",
        "Kandinsky6SRTransformer3DModel", "Kandinsky6SRVAE", "Kandinsky6Transformer3DModel",
        "Krea2Transformer2DModel", "LTX2VideoDiffusionDecoderModel", "LTX2VideoTransformer3DModel",
        "LongCatAudioDiTTransformer", "LongCatAudioDiTVae", "MMAudioVAE", "MMAudioVocoder",
        "MiniMaxH3Transformer3DModel", "MiniMaxMusic3RVQDepthDecoder",
        "MiniMaxMusic3Transformer1DModel", "MiniMaxMusic3Vocoder", "OmniGenTransformer2DModel",
        "RFD4ProteinaAutoencoder", "RFD4ProteinaTransformer", "SanaWMLTX2RefinerTransformer3DModel",
        "SanaWMTransformer3DModel", "WanAnimate2Transformer3DModel", "WanAnimateTransformer3DModel"],
        _NOT_YET),
}


def case(cls: str, head: str = "base") -> Callable[[Callable[[], Built]], Callable[[], Built]]:
    def register(make: Callable[[], Built]) -> Callable[[], Built]:
        SPECS.append(Spec(cls, head, make))
        return make
    return register


def build(spec: Spec) -> Built:
    seeded()
    model, inputs = spec.make()
    unzero(model)
    return model.eval(), inputs


def cases() -> list[Case]:
    return [
        Case(name=f"diffusers/{s.cls}" + ("" if s.head == "base" else f"/{s.head}"),
             library="diffusers", family=s.cls, head=s.head, build=partial(build, s), venv="main")
        for s in SPECS
    ]


# ---- inputs -----------------------------------------------------------------------------

def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def steps() -> torch.Tensor:
    """DDPM-style integer timesteps, one per sample (as UNet pipelines pass them)."""
    return torch.tensor([10, 500])[:B]


def flow_t(scale: float = 1000.0) -> torch.Tensor:
    """Flow-matching timesteps, one per sample: sigma * 1000 (SD3) or sigma (Flux)."""
    return torch.tensor([0.3, 0.8])[:B] * scale


def image_ids(h: int, w: int) -> torch.Tensor:
    """Flux-style (h*w, 3) position ids: (0, row, col), as FluxPipeline makes them."""
    ids = torch.zeros(h, w, 3)
    ids[..., 1] = torch.arange(h)[:, None]
    ids[..., 2] = torch.arange(w)[None, :]
    return ids.reshape(h * w, 3)


class Decode(torch.nn.Module):
    """`vae.decode(z)` as a forward with a plain signature: what pipelines call on the VAE
    once denoising is done, so a model users export on its own."""

    def __init__(self, vae: torch.nn.Module):
        super().__init__()
        self.vae = vae

    def forward(self, z: torch.Tensor) -> Any:
        return self.vae.decode(z)


# ---- UNets ------------------------------------------------------------------------------

@case("UNet2DModel")
def _():
    from diffusers import UNet2DModel

    m = UNet2DModel(sample_size=32, in_channels=3, out_channels=3, layers_per_block=1,
                    block_out_channels=(32, 64), attention_head_dim=8,
                    down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                    up_block_types=("AttnUpBlock2D", "UpBlock2D"))
    return m, {"sample": randn(B, 3, 32, 32), "timestep": steps()}


def _sd_unet(**extra: Any):
    from diffusers import UNet2DConditionModel

    return UNet2DConditionModel(
        sample_size=16, in_channels=4, out_channels=4, layers_per_block=1,
        block_out_channels=(32, 64), cross_attention_dim=32, attention_head_dim=8,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), **extra)


@case("UNet2DConditionModel")
def _():  # Stable Diffusion 1.x/2.x layout
    return _sd_unet(), {"sample": randn(B, 4, 16, 16), "timestep": steps(),
                        "encoder_hidden_states": randn(B, 7, 32)}


@case("UNet2DConditionModel", "sdxl")
def _():  # SDXL: pooled text embeds and size/crop ids through added_cond_kwargs
    m = _sd_unet(addition_embed_type="text_time", addition_time_embed_dim=8,
                 projection_class_embeddings_input_dim=16 + 6 * 8,
                 transformer_layers_per_block=(1, 2))
    return m, {"sample": randn(B, 4, 16, 16), "timestep": steps(),
               "encoder_hidden_states": randn(B, 7, 32),
               "added_cond_kwargs": {"text_embeds": randn(B, 16),
                                     "time_ids": torch.tensor([[128., 128, 0, 0, 128, 128]] * B)}}


@case("UNet1DModel")
def _():  # the value-function layout (diffusers' own test config)
    from diffusers import UNet1DModel

    m = UNet1DModel(block_out_channels=(8, 8, 16, 16), in_channels=14, out_channels=14,
                    time_embedding_type="positional", use_timestep_embedding=True,
                    flip_sin_to_cos=False, freq_shift=1.0, out_block_type="OutConv1DBlock",
                    mid_block_type="MidResTemporalBlock1D",
                    down_block_types=("DownResnetBlock1D",) * 4,
                    up_block_types=("UpResnetBlock1D",) * 3, act_fn="swish")
    return m, {"sample": randn(B, 14, 16), "timestep": steps()}


@case("ControlNetModel")
def _():
    from diffusers import ControlNetModel

    m = ControlNetModel(in_channels=4, layers_per_block=1, block_out_channels=(32, 64),
                        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                        cross_attention_dim=32, attention_head_dim=8,
                        conditioning_embedding_out_channels=(16, 32))
    # the condition image is at pixel scale: 2x the latents with two embedding stages
    return m, {"sample": randn(B, 4, 16, 16), "timestep": steps(),
               "encoder_hidden_states": randn(B, 7, 32), "controlnet_cond": randn(B, 3, 32, 32)}


# ---- autoencoders -----------------------------------------------------------------------

def _kl_vae():
    from diffusers import AutoencoderKL

    return AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, layers_per_block=1,
                         block_out_channels=(32, 64), sample_size=32,
                         down_block_types=("DownEncoderBlock2D",) * 2,
                         up_block_types=("UpDecoderBlock2D",) * 2)


@case("AutoencoderKL")
def _():  # forward encodes and decodes the posterior's mode (sample_posterior=False)
    return _kl_vae(), {"sample": randn(B, 3, 32, 32)}


@case("AutoencoderKL", "decode")
def _():  # what pipelines call: latents -> image
    return Decode(_kl_vae()), {"z": randn(B, 4, 16, 16)}


@case("AutoencoderTiny")
def _():
    from diffusers import AutoencoderTiny

    m = AutoencoderTiny(encoder_block_out_channels=(32, 32), decoder_block_out_channels=(32, 32),
                        num_encoder_blocks=(1, 2), num_decoder_blocks=(2, 1))
    return m, {"sample": randn(B, 3, 32, 32)}


@case("VQModel")
def _():
    from diffusers import VQModel

    m = VQModel(in_channels=3, out_channels=3, latent_channels=3, block_out_channels=(32, 64),
                down_block_types=("DownEncoderBlock2D",) * 2,
                up_block_types=("UpDecoderBlock2D",) * 2, num_vq_embeddings=32)
    return m, {"sample": randn(B, 3, 32, 32)}


# ---- transformers -----------------------------------------------------------------------

@case("Transformer2DModel")
def _():  # the continuous (Stable Diffusion 1.x) spatial transformer block
    from diffusers import Transformer2DModel

    m = Transformer2DModel(num_attention_heads=2, attention_head_dim=16, in_channels=32,
                           cross_attention_dim=16)
    return m, {"hidden_states": randn(B, 32, 8, 8), "encoder_hidden_states": randn(B, 7, 16)}


@case("DiTTransformer2DModel")
def _():
    from diffusers import DiTTransformer2DModel

    m = DiTTransformer2DModel(in_channels=4, out_channels=8, num_attention_heads=2,
                              attention_head_dim=8, num_layers=2, patch_size=2, sample_size=8,
                              num_embeds_ada_norm=10)
    return m, {"hidden_states": randn(B, 4, 8, 8), "timestep": steps(),
               "class_labels": torch.tensor([1, 7])[:B]}


@case("PixArtTransformer2DModel")
def _():
    from diffusers import PixArtTransformer2DModel

    m = PixArtTransformer2DModel(sample_size=8, num_layers=2, patch_size=2, in_channels=4,
                                 out_channels=8, num_attention_heads=2, attention_head_dim=8,
                                 cross_attention_dim=16, caption_channels=24,
                                 use_additional_conditions=False)
    return m, {"hidden_states": randn(B, 4, 8, 8), "encoder_hidden_states": randn(B, 7, 24),
               "timestep": steps(), "added_cond_kwargs": {"resolution": None, "aspect_ratio": None}}


@case("SD3Transformer2DModel")
def _():
    from diffusers import SD3Transformer2DModel

    m = SD3Transformer2DModel(sample_size=16, patch_size=2, in_channels=4, out_channels=4,
                              num_layers=2, attention_head_dim=8, num_attention_heads=2,
                              joint_attention_dim=32, caption_projection_dim=16,
                              pooled_projection_dim=24, pos_embed_max_size=16)
    return m, {"hidden_states": randn(B, 4, 16, 16), "encoder_hidden_states": randn(B, 7, 32),
               "pooled_projections": randn(B, 24), "timestep": flow_t()}


@case("FluxTransformer2DModel")
def _():  # Flux.1-dev layout: guidance-distilled, packed 2x2 latents
    from diffusers import FluxTransformer2DModel

    m = FluxTransformer2DModel(patch_size=1, in_channels=16, num_layers=1, num_single_layers=1,
                               attention_head_dim=16, num_attention_heads=2,
                               joint_attention_dim=32, pooled_projection_dim=24,
                               guidance_embeds=True, axes_dims_rope=(4, 4, 8))
    return m, {"hidden_states": randn(B, 16, 16), "encoder_hidden_states": randn(B, 7, 32),
               "pooled_projections": randn(B, 24), "timestep": flow_t(1.0),
               "img_ids": image_ids(4, 4), "txt_ids": torch.zeros(7, 3),
               "guidance": torch.full((B,), 3.5)}


@case("SanaTransformer2DModel")
def _():
    from diffusers import SanaTransformer2DModel

    m = SanaTransformer2DModel(patch_size=1, in_channels=4, out_channels=4, num_layers=2,
                               num_attention_heads=2, attention_head_dim=8,
                               num_cross_attention_heads=2, cross_attention_head_dim=8,
                               cross_attention_dim=16, caption_channels=24, sample_size=16)
    return m, {"hidden_states": randn(B, 4, 16, 16), "encoder_hidden_states": randn(B, 7, 24),
               "timestep": flow_t()}


@case("UNet3DConditionModel")
def _():  # text-to-video (ModelScope): sample is (B, C, frames, H, W)
    from diffusers import UNet3DConditionModel

    m = UNet3DConditionModel(sample_size=16, in_channels=4, out_channels=4, layers_per_block=1,
                             block_out_channels=(32, 64), cross_attention_dim=32,
                             attention_head_dim=8,
                             down_block_types=("CrossAttnDownBlock3D", "DownBlock3D"),
                             up_block_types=("UpBlock3D", "CrossAttnUpBlock3D"))
    return m, {"sample": randn(B, 4, 3, 16, 16), "timestep": steps(),
               "encoder_hidden_states": randn(B, 7, 32)}


@case("UNetSpatioTemporalConditionModel")
def _():  # Stable Video Diffusion: (B, frames, C, H, W), image latents concatenated (8 = 4 + 4)
    from diffusers import UNetSpatioTemporalConditionModel

    m = UNetSpatioTemporalConditionModel(
        sample_size=16, in_channels=8, out_channels=4, layers_per_block=1,
        block_out_channels=(32, 64), cross_attention_dim=32, num_attention_heads=(2, 4),
        addition_time_embed_dim=8, projection_class_embeddings_input_dim=3 * 8, num_frames=3,
        down_block_types=("CrossAttnDownBlockSpatioTemporal", "DownBlockSpatioTemporal"),
        up_block_types=("UpBlockSpatioTemporal", "CrossAttnUpBlockSpatioTemporal"))
    return m, {"sample": randn(B, 3, 8, 16, 16), "timestep": steps(),
               "encoder_hidden_states": randn(B, 1, 32),
               "added_time_ids": torch.tensor([[6.0, 127.0, 0.02]] * B)}  # fps, motion, noise


@case("UNetMotionModel")
def _():  # AnimateDiff: (B, C, frames, H, W); the pipeline repeats prompt embeds per frame
    from diffusers import UNetMotionModel

    m = UNetMotionModel(sample_size=16, in_channels=4, out_channels=4, layers_per_block=1,
                        block_out_channels=(16, 32), norm_num_groups=16, cross_attention_dim=32,
                        num_attention_heads=2, motion_num_attention_heads=2,
                        down_block_types=("CrossAttnDownBlockMotion", "DownBlockMotion"),
                        up_block_types=("UpBlockMotion", "CrossAttnUpBlockMotion"))
    return m, {"sample": randn(B, 4, 3, 16, 16), "timestep": steps(),
               "encoder_hidden_states": randn(B * 3, 7, 32)}


@case("I2VGenXLUNet")
def _():
    from diffusers import I2VGenXLUNet

    m = I2VGenXLUNet(sample_size=16, in_channels=4, out_channels=4, layers_per_block=1,
                     block_out_channels=(32, 64), cross_attention_dim=32, attention_head_dim=8,
                     down_block_types=("CrossAttnDownBlock3D", "DownBlock3D"),
                     up_block_types=("UpBlock3D", "CrossAttnUpBlock3D"))
    return m, {"sample": randn(B, 4, 3, 16, 16), "timestep": steps(),
               "fps": torch.tensor([16] * B), "image_latents": randn(B, 4, 3, 16, 16),
               "image_embeddings": randn(B, 32), "encoder_hidden_states": randn(B, 7, 32)}


@case("Kandinsky3UNet")
def _():  # 4 levels and 2 layers per block: its blocks assume both (fixed tuples zipped)
    from diffusers import Kandinsky3UNet

    m = Kandinsky3UNet(in_channels=4, time_embedding_dim=32, groups=4, attention_head_dim=8,
                       layers_per_block=2, block_out_channels=(16, 32, 32, 64),
                       cross_attention_dim=32, encoder_hid_dim=16)
    return m, {"sample": randn(B, 4, 16, 16), "timestep": steps(),
               "encoder_hidden_states": randn(B, 7, 16),
               "encoder_attention_mask": torch.ones(B, 7, dtype=torch.long)}


@case("UVit2DModel")
def _():  # aMUSEd: masked token prediction; micro_conds are 5 numbers per sample
    from diffusers import UVit2DModel

    m = UVit2DModel(hidden_size=32, cond_embed_dim=16, micro_cond_encode_dim=4,
                    micro_cond_embed_dim=5 * 4, encoder_hidden_size=16, vocab_size=40,
                    codebook_size=32, in_channels=16, block_out_channels=32, num_res_blocks=1,
                    block_num_heads=2, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=64, sample_size=8)
    return m, {"input_ids": torch.randint(0, 40, (B, 8, 8)), "encoder_hidden_states": randn(B, 7, 16),
               "pooled_text_emb": randn(B, 16),
               "micro_conds": torch.tensor([[512.0, 512, 0, 0, 6]] * B)}


# ---- more autoencoders ------------------------------------------------------------------

@case("AsymmetricAutoencoderKL")
def _():  # forward takes the inpainting mask too (None: plain decode)
    from diffusers import AsymmetricAutoencoderKL

    m = AsymmetricAutoencoderKL(
        down_block_types=("DownEncoderBlock2D",) * 2, down_block_out_channels=(32, 64),
        up_block_types=("UpDecoderBlock2D",) * 2, up_block_out_channels=(32, 64),
        latent_channels=4, sample_size=32)
    return m, {"sample": randn(B, 3, 32, 32)}


@case("AutoencoderKLTemporalDecoder")
def _():  # SVD's VAE: the batch is frames; num_frames says how many make one video
    from diffusers import AutoencoderKLTemporalDecoder

    m = AutoencoderKLTemporalDecoder(down_block_types=("DownEncoderBlock2D",) * 2,
                                     block_out_channels=(32, 64), latent_channels=4)
    return m, {"sample": randn(B, 3, 32, 32), "num_frames": B}


@case("AutoencoderDC")
def _():  # Sana's deep-compression VAE
    from diffusers import AutoencoderDC

    m = AutoencoderDC(latent_channels=8, attention_head_dim=8,
                      encoder_block_types=("ResBlock", "EfficientViTBlock"),
                      decoder_block_types=("ResBlock", "EfficientViTBlock"),
                      encoder_block_out_channels=(16, 32), decoder_block_out_channels=(16, 32),
                      encoder_layers_per_block=(1, 1), decoder_layers_per_block=(1, 1),
                      encoder_qkv_multiscales=((), (5,)), decoder_qkv_multiscales=((), (5,)),
                      decoder_norm_types="rms_norm", decoder_act_fns="silu")
    return m, {"sample": randn(B, 3, 32, 32)}


@case("AutoencoderOobleck")
def _():  # Stable Audio's VAE: (B, audio channels, samples)
    from diffusers import AutoencoderOobleck

    m = AutoencoderOobleck(encoder_hidden_size=12, downsampling_ratios=[2, 4],
                           channel_multiples=[1, 2], decoder_channels=12,
                           decoder_input_channels=6, audio_channels=2)
    return m, {"sample": randn(B, 2, 64)}


@case("AutoencoderKLCogVideoX")
def _():  # video VAE: (B, C, frames, H, W), frames = 1 + 4k
    from diffusers import AutoencoderKLCogVideoX

    m = AutoencoderKLCogVideoX(block_out_channels=(8, 8, 8, 8), latent_channels=4,
                               layers_per_block=1, norm_num_groups=2,
                               temporal_compression_ratio=4)
    return m, {"sample": randn(B, 3, 5, 16, 16)}


@case("AutoencoderKLHunyuanVideo")
def _():
    from diffusers import AutoencoderKLHunyuanVideo

    m = AutoencoderKLHunyuanVideo(latent_channels=4, block_out_channels=(8, 8, 8, 8),
                                  layers_per_block=1, norm_num_groups=4)
    return m, {"sample": randn(B, 3, 5, 32, 32)}


@case("AutoencoderKLLTXVideo")
def _():
    from diffusers import AutoencoderKLLTXVideo

    m = AutoencoderKLLTXVideo(latent_channels=8, block_out_channels=(8, 8, 8, 8),
                              decoder_block_out_channels=(8, 8, 8, 8),
                              layers_per_block=(1, 1, 1, 1, 1),
                              decoder_layers_per_block=(1, 1, 1, 1, 1),
                              spatio_temporal_scaling=(True, True, False, False),
                              decoder_spatio_temporal_scaling=(True, True, False, False),
                              decoder_inject_noise=(False,) * 5, patch_size=1)
    return m, {"sample": randn(B, 3, 9, 16, 16)}


@case("AutoencoderKLWan")
def _():  # Wan 2.1's causal video VAE (feature caches live inside one forward)
    from diffusers import AutoencoderKLWan

    m = AutoencoderKLWan(base_dim=8, z_dim=4, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                         temperal_downsample=[False, True, True])
    return m, {"sample": randn(B, 3, 5, 16, 16)}


@case("AutoencoderKLQwenImage")
def _():  # images as one-frame videos
    from diffusers import AutoencoderKLQwenImage

    m = AutoencoderKLQwenImage(base_dim=8, z_dim=4, dim_mult=[1, 2, 4, 4], num_res_blocks=1,
                               temperal_downsample=[False, True, True])
    return m, {"sample": randn(B, 3, 1, 32, 32)}


@case("AutoencoderKLFlux2")
def _():
    from diffusers import AutoencoderKLFlux2

    m = AutoencoderKLFlux2(block_out_channels=(32, 64), layers_per_block=1, latent_channels=4,
                           down_block_types=("DownEncoderBlock2D",) * 2,
                           up_block_types=("UpDecoderBlock2D",) * 2, sample_size=32)
    return m, {"sample": randn(B, 3, 32, 32)}


@case("AutoencoderKLMochi")
def _():
    from diffusers import AutoencoderKLMochi

    m = AutoencoderKLMochi(encoder_block_out_channels=(32, 32, 32, 32),
                           decoder_block_out_channels=(32, 32, 32, 32), latent_channels=4,
                           layers_per_block=(1, 1, 1, 1, 1))
    return m, {"sample": randn(B, 3, 7, 16, 16)}


@case("AutoencoderKLMagvit")
def _():  # EasyAnimate's VAE
    from diffusers import AutoencoderKLMagvit

    m = AutoencoderKLMagvit(latent_channels=4, block_out_channels=(8, 8, 8, 8), layers_per_block=1,
                            norm_num_groups=8)
    return m, {"sample": randn(B, 3, 5, 16, 16)}


# ---- more transformers ------------------------------------------------------------------

@case("PriorTransformer")
def _():  # Kandinsky 2 / Karlo prior: text embedding -> image embedding
    from diffusers import PriorTransformer

    m = PriorTransformer(num_attention_heads=2, attention_head_dim=4, num_layers=2,
                         embedding_dim=8, num_embeddings=7, additional_embeddings=4)
    return m, {"hidden_states": randn(B, 8), "timestep": steps(), "proj_embedding": randn(B, 8),
               "encoder_hidden_states": randn(B, 7, 8),
               "attention_mask": torch.ones(B, 7, dtype=torch.bool)}


def _hunyuan_dit_inputs() -> dict[str, Any]:
    from diffusers.models.embeddings import get_2d_rotary_pos_embed

    return {"hidden_states": randn(B, 4, 8, 8), "timestep": steps().float(),  # it casts to this
            "encoder_hidden_states": randn(B, 7, 16),
            "text_embedding_mask": torch.ones(B, 7, dtype=torch.long),
            "encoder_hidden_states_t5": randn(B, 9, 24),
            "text_embedding_mask_t5": torch.ones(B, 9, dtype=torch.long),
            "image_meta_size": torch.tensor([[64.0, 64, 64, 64, 0, 0]] * B),
            "style": torch.zeros(B, dtype=torch.long),
            # as HunyuanDiTPipeline makes it: head dim, crop region, grid
            "image_rotary_emb": get_2d_rotary_pos_embed(8, ((0, 0), (4, 4)), (4, 4), output_type="pt")}


@case("HunyuanDiT2DModel")
def _():
    from diffusers import HunyuanDiT2DModel

    m = HunyuanDiT2DModel(num_attention_heads=2, attention_head_dim=8, in_channels=4,
                          patch_size=2, hidden_size=16, num_layers=2, mlp_ratio=2.0,
                          cross_attention_dim=16, cross_attention_dim_t5=24,
                          pooled_projection_dim=12, text_len=7, text_len_t5=9, sample_size=8)
    return m, _hunyuan_dit_inputs()


@case("AuraFlowTransformer2DModel")
def _():
    from diffusers import AuraFlowTransformer2DModel

    m = AuraFlowTransformer2DModel(sample_size=16, patch_size=2, in_channels=4,
                                   num_mmdit_layers=1, num_single_dit_layers=1,
                                   attention_head_dim=8, num_attention_heads=2,
                                   joint_attention_dim=32, caption_projection_dim=16,
                                   out_channels=4, pos_embed_max_size=64)
    return m, {"hidden_states": randn(B, 4, 16, 16), "encoder_hidden_states": randn(B, 7, 32),
               "timestep": flow_t(1.0)}


@case("CogVideoXTransformer3DModel")
def _():  # (B, latent frames, C, H, W); 3 latent frames = 9 video frames
    from diffusers import CogVideoXTransformer3DModel

    m = CogVideoXTransformer3DModel(num_attention_heads=2, attention_head_dim=8, in_channels=4,
                                    out_channels=4, time_embed_dim=8, text_embed_dim=16,
                                    num_layers=1, sample_width=8, sample_height=8,
                                    sample_frames=9, patch_size=2, max_text_seq_length=7)
    return m, {"hidden_states": randn(B, 3, 4, 8, 8), "encoder_hidden_states": randn(B, 7, 16),
               "timestep": steps()}


def _cogview_conds() -> dict[str, torch.Tensor]:
    return {"original_size": torch.tensor([[64.0, 64]] * B),
            "target_size": torch.tensor([[64.0, 64]] * B), "crop_coords": torch.zeros(B, 2)}


@case("CogView3PlusTransformer2DModel")
def _():
    from diffusers import CogView3PlusTransformer2DModel

    m = CogView3PlusTransformer2DModel(patch_size=2, in_channels=4, num_layers=1,
                                       attention_head_dim=4, num_attention_heads=2,
                                       out_channels=4, text_embed_dim=8, time_embed_dim=8,
                                       condition_dim=2, pos_embed_max_size=8, sample_size=8)
    return m, {"hidden_states": randn(B, 4, 8, 8), "encoder_hidden_states": randn(B, 7, 8),
               "timestep": steps(), **_cogview_conds()}


@case("CogView4Transformer2DModel")
def _():
    from diffusers import CogView4Transformer2DModel

    m = CogView4Transformer2DModel(patch_size=2, in_channels=4, out_channels=4, num_layers=1,
                                   attention_head_dim=8, num_attention_heads=2, text_embed_dim=8,
                                   time_embed_dim=8, condition_dim=4, rope_axes_dim=(64, 64))
    return m, {"hidden_states": randn(B, 4, 8, 8), "encoder_hidden_states": randn(B, 7, 8),
               "timestep": steps(), **_cogview_conds()}


@case("LuminaNextDiT2DModel")
def _():
    from diffusers import LuminaNextDiT2DModel
    from diffusers.models.embeddings import get_2d_rotary_pos_embed_lumina

    m = LuminaNextDiT2DModel(sample_size=16, patch_size=2, in_channels=4, hidden_size=16,
                             num_layers=2, num_attention_heads=2, num_kv_heads=1, multiple_of=16,
                             cross_attention_dim=32)
    rope = get_2d_rotary_pos_embed_lumina(8, 384, 384)  # head dim, as the pipeline
    return m, {"hidden_states": randn(B, 4, 16, 16), "timestep": flow_t(1.0),
               "encoder_hidden_states": randn(B, 7, 32),
               "encoder_mask": torch.ones(B, 7, dtype=torch.long), "image_rotary_emb": rope,
               "cross_attention_kwargs": {}}  # None fails in 0.42.1 (`**None` in its blocks)


@case("Lumina2Transformer2DModel")
def _():
    from diffusers import Lumina2Transformer2DModel

    m = Lumina2Transformer2DModel(sample_size=16, patch_size=2, in_channels=4, hidden_size=24,
                                  num_layers=1, num_refiner_layers=1, num_attention_heads=3,
                                  num_kv_heads=1, multiple_of=16, axes_dim_rope=(4, 2, 2),
                                  axes_lens=(64, 64, 64), cap_feat_dim=32)
    return m, {"hidden_states": randn(B, 4, 16, 16), "timestep": flow_t(1.0),
               "encoder_hidden_states": randn(B, 7, 32),
               "encoder_attention_mask": torch.ones(B, 7, dtype=torch.bool)}


@case("LatteTransformer3DModel")
def _():
    from diffusers import LatteTransformer3DModel

    m = LatteTransformer3DModel(num_attention_heads=2, attention_head_dim=8, in_channels=4,
                                out_channels=8, num_layers=1, cross_attention_dim=16,
                                sample_size=8, patch_size=2, activation_fn="gelu-approximate",
                                num_embeds_ada_norm=1000, norm_type="ada_norm_single",
                                norm_elementwise_affine=False, norm_eps=1e-6,
                                caption_channels=24, video_length=3)
    return m, {"hidden_states": randn(B, 4, 3, 8, 8), "timestep": steps(),
               "encoder_hidden_states": randn(B, 7, 24)}


@case("AllegroTransformer3DModel")
def _():
    from diffusers import AllegroTransformer3DModel

    m = AllegroTransformer3DModel(num_attention_heads=2, attention_head_dim=8, in_channels=4,
                                  out_channels=4, num_layers=1, cross_attention_dim=16,
                                  sample_height=8, sample_width=8, sample_frames=8,
                                  caption_channels=24)
    return m, {"hidden_states": randn(B, 4, 2, 8, 8), "encoder_hidden_states": randn(B, 7, 24),
               "timestep": steps()}


@case("MochiTransformer3DModel")
def _():
    from diffusers import MochiTransformer3DModel

    m = MochiTransformer3DModel(patch_size=2, num_attention_heads=2, attention_head_dim=8,
                                num_layers=2, pooled_projection_dim=16, in_channels=4,
                                text_embed_dim=16, time_embed_dim=4, max_sequence_length=16)
    return m, {"hidden_states": randn(B, 4, 2, 16, 16), "encoder_hidden_states": randn(B, 7, 16),
               "timestep": steps(), "encoder_attention_mask": torch.ones(B, 7, dtype=torch.bool)}


@case("LTXVideoTransformer3DModel")
def _():  # latents come packed: (B, frames*H*W, C), with the grid passed as ints
    from diffusers import LTXVideoTransformer3DModel

    m = LTXVideoTransformer3DModel(in_channels=8, out_channels=8, num_attention_heads=2,
                                   attention_head_dim=8, cross_attention_dim=16, num_layers=1,
                                   caption_channels=16)
    return m, {"hidden_states": randn(B, 2 * 4 * 4, 8), "encoder_hidden_states": randn(B, 7, 16),
               "timestep": steps(), "encoder_attention_mask": torch.ones(B, 7, dtype=torch.long),
               "num_frames": 2, "height": 4, "width": 4}


@case("HunyuanVideoTransformer3DModel")
def _():
    from diffusers import HunyuanVideoTransformer3DModel

    m = HunyuanVideoTransformer3DModel(in_channels=4, out_channels=4, num_attention_heads=2,
                                       attention_head_dim=10, num_layers=1, num_single_layers=1,
                                       num_refiner_layers=1, patch_size=1, patch_size_t=1,
                                       text_embed_dim=16, pooled_projection_dim=8,
                                       rope_axes_dim=(2, 4, 4))
    return m, {"hidden_states": randn(B, 4, 2, 8, 8), "timestep": steps(),
               "encoder_hidden_states": randn(B, 7, 16),
               "encoder_attention_mask": torch.ones(B, 7, dtype=torch.long),
               "pooled_projections": randn(B, 8), "guidance": torch.full((B,), 6000.0)}


def _wan_like(cls):
    return cls(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12, in_channels=4,
               out_channels=4, text_dim=16, freq_dim=256, ffn_dim=32, num_layers=2,
               rope_max_seq_len=32)


@case("WanTransformer3DModel")
def _():
    from diffusers import WanTransformer3DModel

    return _wan_like(WanTransformer3DModel), {
        "hidden_states": randn(B, 4, 2, 16, 16), "timestep": steps(),
        "encoder_hidden_states": randn(B, 7, 16)}


@case("SkyReelsV2Transformer3DModel")
def _():
    from diffusers import SkyReelsV2Transformer3DModel

    return _wan_like(SkyReelsV2Transformer3DModel), {
        "hidden_states": randn(B, 4, 2, 16, 16), "timestep": steps(),
        "encoder_hidden_states": randn(B, 7, 16)}


def _qwen_inputs() -> dict[str, Any]:
    """Packed 2x2 latents (16 = 4 channels * 2 * 2); img_shapes: the latent grid per sample."""
    return {"hidden_states": randn(B, 4 * 4, 16), "encoder_hidden_states": randn(B, 7, 16),
            "encoder_hidden_states_mask": torch.ones(B, 7, dtype=torch.long),
            "timestep": flow_t(1.0), "img_shapes": [[(1, 4, 4)]] * B}


@case("QwenImageTransformer2DModel")
def _():
    from diffusers import QwenImageTransformer2DModel

    m = QwenImageTransformer2DModel(patch_size=2, in_channels=16, out_channels=4, num_layers=2,
                                    attention_head_dim=16, num_attention_heads=2,
                                    joint_attention_dim=16, axes_dims_rope=(8, 4, 4))
    return m, _qwen_inputs()


@case("Flux2Transformer2DModel")
def _():  # 4-axis ids (t, h, w, layer), batched, as Flux2Pipeline makes them
    from diffusers import Flux2Transformer2DModel

    m = Flux2Transformer2DModel(patch_size=1, in_channels=16, num_layers=1, num_single_layers=1,
                                attention_head_dim=16, num_attention_heads=2,
                                joint_attention_dim=32, timestep_guidance_channels=32,
                                axes_dims_rope=(4, 4, 4, 4))
    r = torch.arange
    img_ids = torch.cartesian_prod(r(1), r(4), r(4), r(1))
    txt_ids = torch.cartesian_prod(r(1), r(1), r(1), r(7))
    return m, {"hidden_states": randn(B, 16, 16), "encoder_hidden_states": randn(B, 7, 32),
               "timestep": flow_t(1.0), "img_ids": img_ids.expand(B, -1, -1),
               "txt_ids": txt_ids.expand(B, -1, -1), "guidance": torch.full((B,), 4.0)}


@case("ChromaTransformer2DModel")
def _():  # Flux-like, without pooled text: modulations come from the approximator
    from diffusers import ChromaTransformer2DModel

    m = ChromaTransformer2DModel(patch_size=1, in_channels=16, num_layers=1, num_single_layers=1,
                                 attention_head_dim=16, num_attention_heads=2,
                                 joint_attention_dim=32, axes_dims_rope=(4, 4, 8),
                                 approximator_num_channels=8, approximator_hidden_dim=32,
                                 approximator_layers=1)
    return m, {"hidden_states": randn(B, 16, 16), "encoder_hidden_states": randn(B, 7, 32),
               "timestep": flow_t(1.0), "img_ids": image_ids(4, 4), "txt_ids": torch.zeros(7, 3)}


@case("BriaTransformer2DModel")
def _():
    from diffusers import BriaTransformer2DModel

    m = BriaTransformer2DModel(patch_size=1, in_channels=16, num_layers=1, num_single_layers=1,
                               attention_head_dim=16, num_attention_heads=2,
                               joint_attention_dim=32, axes_dims_rope=[4, 4, 8])
    return m, {"hidden_states": randn(B, 16, 16), "encoder_hidden_states": randn(B, 7, 32),
               "timestep": flow_t(), "img_ids": image_ids(4, 4), "txt_ids": torch.zeros(7, 3)}


@case("HiDreamImageTransformer2DModel")
def _():  # mixture-of-experts blocks; llama3 states are (layers, B, L, D)
    from diffusers import HiDreamImageTransformer2DModel

    m = HiDreamImageTransformer2DModel(patch_size=2, in_channels=4, out_channels=4, num_layers=1,
                                       num_single_layers=1, attention_head_dim=8,
                                       num_attention_heads=2, caption_channels=[8, 4],
                                       text_emb_dim=8, num_routed_experts=2,
                                       num_activated_experts=1, axes_dims_rope=(4, 2, 2),
                                       max_resolution=(32, 32), llama_layers=[0, 1])
    return m, {"hidden_states": randn(B, 4, 16, 16), "timesteps": steps(),
               "encoder_hidden_states_t5": randn(B, 7, 8),
               "encoder_hidden_states_llama3": randn(2, B, 7, 4), "pooled_embeds": randn(B, 8)}


@case("StableAudioDiTModel")
def _():  # rotary table made as StableAudioPipeline makes it
    from diffusers import StableAudioDiTModel
    from diffusers.models.embeddings import get_1d_rotary_pos_embed

    m = StableAudioDiTModel(sample_size=8, in_channels=4, num_layers=1, attention_head_dim=8,
                            num_attention_heads=2, num_key_value_attention_heads=1,
                            out_channels=4, cross_attention_dim=16, time_proj_dim=8,
                            global_states_input_dim=16, cross_attention_input_dim=16)
    rope = get_1d_rotary_pos_embed(8 // 2, 8 + 1, use_real=True, repeat_interleave_real=False)
    return m, {"hidden_states": randn(B, 4, 8), "timestep": steps(),
               "encoder_hidden_states": randn(B, 7, 16), "global_hidden_states": randn(B, 1, 16),
               "rotary_embedding": rope}


@case("ZImageTransformer2DModel")
def _():  # lists of per-sample tensors: latents (C, frames, H, W) and caption features (L, D)
    from diffusers import ZImageTransformer2DModel

    m = ZImageTransformer2DModel(in_channels=4, dim=32, n_layers=1, n_refiner_layers=1,
                                 n_heads=2, n_kv_heads=2, cap_feat_dim=16, axes_dims=[4, 6, 6],
                                 axes_lens=[128, 32, 32])
    return m, {"x": [randn(4, 1, 8, 8) for _ in range(B)], "t": flow_t(1.0),
               "cap_feats": [randn(7, 16) for _ in range(B)]}


@case("TransformerTemporalModel")
def _():  # the batch is frames; num_frames says how many make one video
    from diffusers import TransformerTemporalModel

    m = TransformerTemporalModel(num_attention_heads=2, attention_head_dim=8, in_channels=16,
                                 norm_num_groups=8)
    return m, {"hidden_states": randn(B * 3, 16, 4, 4), "num_frames": 3}


# ---- more controlnets -------------------------------------------------------------------

@case("SD3ControlNetModel")
def _():
    from diffusers import SD3ControlNetModel

    m = SD3ControlNetModel(sample_size=16, patch_size=2, in_channels=4, out_channels=4,
                           num_layers=1, attention_head_dim=8, num_attention_heads=2,
                           joint_attention_dim=32, caption_projection_dim=16,
                           pooled_projection_dim=24, pos_embed_max_size=16)
    return m, {"hidden_states": randn(B, 4, 16, 16), "controlnet_cond": randn(B, 4, 16, 16),
               "encoder_hidden_states": randn(B, 7, 32), "pooled_projections": randn(B, 24),
               "timestep": flow_t()}


@case("FluxControlNetModel")
def _():
    from diffusers import FluxControlNetModel

    m = FluxControlNetModel(patch_size=1, in_channels=16, num_layers=1, num_single_layers=1,
                            attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                            pooled_projection_dim=24, guidance_embeds=True,
                            axes_dims_rope=[4, 4, 8])
    return m, {"hidden_states": randn(B, 16, 16), "controlnet_cond": randn(B, 16, 16),
               "encoder_hidden_states": randn(B, 7, 32), "pooled_projections": randn(B, 24),
               "timestep": flow_t(1.0), "img_ids": image_ids(4, 4), "txt_ids": torch.zeros(7, 3),
               "guidance": torch.full((B,), 3.5)}


@case("SanaControlNetModel")
def _():
    from diffusers import SanaControlNetModel

    m = SanaControlNetModel(in_channels=4, out_channels=4, num_attention_heads=2,
                            attention_head_dim=8, num_layers=2, num_cross_attention_heads=2,
                            cross_attention_head_dim=8, cross_attention_dim=16,
                            caption_channels=24, sample_size=16)
    return m, {"hidden_states": randn(B, 4, 16, 16), "encoder_hidden_states": randn(B, 7, 24),
               "timestep": flow_t(), "controlnet_cond": randn(B, 4, 16, 16)}


@case("T2IAdapter")
def _():  # returns a list of feature maps, one per UNet level
    from diffusers import T2IAdapter

    m = T2IAdapter(in_channels=3, channels=[32, 64], num_res_blocks=1, downscale_factor=4)
    return m, {"x": randn(B, 3, 32, 32)}


# ---- less common classes ----------------------------------------------------------------

@case("StableCascadeUNet")
def _():  # Stable Cascade's prior stage: timestep as a ratio in [0, 1], CLIP conditions
    from diffusers import StableCascadeUNet

    m = StableCascadeUNet(in_channels=4, out_channels=4, timestep_ratio_embedding_dim=16,
                          conditioning_dim=32, block_out_channels=(32, 32),
                          num_attention_heads=(2, 2), down_num_layers_per_block=(1, 1),
                          up_num_layers_per_block=(1, 1), clip_text_in_channels=16,
                          clip_text_pooled_in_channels=16, clip_image_in_channels=16, clip_seq=2,
                          dropout=(0.0, 0.0), switch_level=(False,))
    return m, {"sample": randn(B, 4, 16, 16), "timestep_ratio": flow_t(1.0),
               "clip_text_pooled": randn(B, 1, 16), "clip_text": randn(B, 7, 16),
               "clip_img": randn(B, 1, 16)}


@case("UNetControlNetXSModel")
def _():  # a UNet with a small ControlNet-XS woven into it
    from diffusers import UNetControlNetXSModel

    m = UNetControlNetXSModel(sample_size=16, block_out_channels=(32, 64), norm_num_groups=4,
                              down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                              up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
                              cross_attention_dim=32, num_attention_heads=2,
                              ctrl_block_out_channels=(2, 4), ctrl_num_attention_heads=1,
                              ctrl_max_norm_num_groups=2,
                              ctrl_conditioning_embedding_out_channels=(2, 2))
    return m, {"sample": randn(B, 4, 16, 16), "timestep": steps(),
               "encoder_hidden_states": randn(B, 7, 32), "controlnet_cond": randn(B, 3, 32, 32)}


@case("ControlNetUnionModel")
def _():  # ControlNet++ (SDXL): several condition images, chosen by control_type
    from diffusers import ControlNetUnionModel

    m = ControlNetUnionModel(in_channels=4, layers_per_block=1, block_out_channels=(32, 64),
                             down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                             cross_attention_dim=32, attention_head_dim=8,
                             conditioning_embedding_out_channels=(16, 32),
                             addition_embed_type="text_time", addition_time_embed_dim=8,
                             projection_class_embeddings_input_dim=16 + 6 * 8,
                             num_control_type=2, num_trans_channel=32, num_trans_head=2,
                             num_trans_layer=1, num_proj_channel=32)
    return m, {"sample": randn(B, 4, 16, 16), "timestep": steps(),
               "encoder_hidden_states": randn(B, 7, 32),
               "controlnet_cond": [randn(B, 3, 32, 32), randn(B, 3, 32, 32)],
               "control_type": torch.tensor([[1.0, 1.0]] * B), "control_type_idx": [0, 1],
               "added_cond_kwargs": {"text_embeds": randn(B, 16),
                                     "time_ids": torch.tensor([[128., 128, 0, 0, 128, 128]] * B)}}


@case("SparseControlNetModel")
def _():  # SparseCtrl (AnimateDiff): latent-space condition frames plus their mask
    from diffusers import SparseControlNetModel

    m = SparseControlNetModel(in_channels=4, conditioning_channels=4, layers_per_block=1,
                              block_out_channels=(16, 32), norm_num_groups=16,
                              down_block_types=("CrossAttnDownBlockMotion", "DownBlockMotion"),
                              cross_attention_dim=32, attention_head_dim=8,
                              motion_num_attention_heads=2,
                              conditioning_embedding_out_channels=(16, 32))
    return m, {"sample": randn(B, 4, 3, 16, 16), "timestep": steps(),
               "encoder_hidden_states": randn(B * 3, 7, 32),
               "controlnet_cond": randn(B, 4, 3, 16, 16),
               "conditioning_mask": torch.tensor([1.0, 0, 1]).view(1, 1, 3, 1, 1).expand(B, 1, 3, 16, 16)}


@case("HunyuanDiT2DControlNetModel")
def _():  # the condition is VAE latents of the control image
    from diffusers import HunyuanDiT2DControlNetModel

    m = HunyuanDiT2DControlNetModel(num_attention_heads=2, attention_head_dim=8, in_channels=4,
                                    patch_size=2, hidden_size=16, transformer_num_layers=4,
                                    mlp_ratio=2.0, cross_attention_dim=16,
                                    cross_attention_dim_t5=24, pooled_projection_dim=12,
                                    text_len=7, text_len_t5=9, sample_size=8)
    return m, {**_hunyuan_dit_inputs(), "controlnet_cond": randn(B, 4, 8, 8)}


@case("QwenImageControlNetModel")
def _():
    from diffusers import QwenImageControlNetModel

    m = QwenImageControlNetModel(patch_size=2, in_channels=16, out_channels=4, num_layers=2,
                                 attention_head_dim=16, num_attention_heads=2,
                                 joint_attention_dim=16, axes_dims_rope=(8, 4, 4))
    return m, {**_qwen_inputs(), "controlnet_cond": randn(B, 4 * 4, 16)}


@case("AutoencoderKLHunyuanImage")
def _():
    from diffusers import AutoencoderKLHunyuanImage

    m = AutoencoderKLHunyuanImage(in_channels=3, out_channels=3, latent_channels=8,
                                  block_out_channels=(32, 32, 64), layers_per_block=1,
                                  spatial_compression_ratio=4, sample_size=32)
    return m, {"sample": randn(B, 3, 32, 32)}


@case("AutoencoderKLHunyuanVideo15")
def _():  # batch 1: its mid-block attention mask is (B, S, S) against one head, so B > 1 fails
    from diffusers import AutoencoderKLHunyuanVideo15

    m = AutoencoderKLHunyuanVideo15(latent_channels=8, block_out_channels=(16, 32, 32, 32),
                                    layers_per_block=1, spatial_compression_ratio=8,
                                    temporal_compression_ratio=4)
    return m, {"sample": randn(1, 3, 5, 32, 32)}


@case("AutoencoderKLLTX2Video")
def _():  # channels must grow by level (flat widths break its upsamplers' channel split)
    from diffusers import AutoencoderKLLTX2Video

    m = AutoencoderKLLTX2Video(latent_channels=8, block_out_channels=(8, 16, 32, 64),
                               decoder_block_out_channels=(8, 16, 32),
                               layers_per_block=(1, 1, 1, 1, 1),
                               decoder_layers_per_block=(1, 1, 1, 1), patch_size=1)
    return m, {"sample": randn(B, 3, 9, 32, 32)}


@case("CosmosTransformer3DModel")
def _():  # concat_padding_mask off: resizing the mask needs torchvision, not in this venv
    from diffusers import CosmosTransformer3DModel

    m = CosmosTransformer3DModel(in_channels=4, out_channels=4, num_attention_heads=2,
                                 attention_head_dim=12, num_layers=2, mlp_ratio=2.0,
                                 text_embed_dim=16, adaln_lora_dim=4, max_size=(4, 32, 32),
                                 patch_size=(1, 2, 2), rope_scale=(1.0, 1.0, 1.0),
                                 concat_padding_mask=False)
    return m, {"hidden_states": randn(B, 4, 2, 16, 16), "timestep": flow_t(1.0),
               "encoder_hidden_states": randn(B, 7, 16)}


@case("EasyAnimateTransformer3DModel")
def _():  # head dim 16: its 3D rope splits a head in three even parts
    from diffusers import EasyAnimateTransformer3DModel

    m = EasyAnimateTransformer3DModel(num_attention_heads=2, attention_head_dim=16, in_channels=4,
                                      out_channels=4, patch_size=2, sample_width=8,
                                      sample_height=8, num_layers=1, mmdit_layers=1,
                                      time_embed_dim=8, text_embed_dim=16)
    return m, {"hidden_states": randn(B, 4, 2, 8, 8), "timestep": steps(),
               "encoder_hidden_states": randn(B, 7, 16)}


@case("SanaVideoTransformer3DModel")
def _():
    from diffusers import SanaVideoTransformer3DModel

    m = SanaVideoTransformer3DModel(in_channels=4, out_channels=4, num_attention_heads=2,
                                    attention_head_dim=8, num_layers=2,
                                    num_cross_attention_heads=2, cross_attention_head_dim=8,
                                    cross_attention_dim=16, caption_channels=24, sample_size=8)
    return m, {"hidden_states": randn(B, 4, 2, 16, 16), "encoder_hidden_states": randn(B, 7, 24),
               "timestep": flow_t()}


@case("WanVACETransformer3DModel")
def _():  # Wan with VACE control blocks fed by control_hidden_states
    from diffusers import WanVACETransformer3DModel

    m = WanVACETransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2,
                                  attention_head_dim=12, in_channels=4, out_channels=4,
                                  text_dim=16, freq_dim=256, ffn_dim=32, num_layers=2,
                                  rope_max_seq_len=32, vace_layers=[0], vace_in_channels=8)
    return m, {"hidden_states": randn(B, 4, 2, 16, 16), "timestep": steps(),
               "encoder_hidden_states": randn(B, 7, 16),
               "control_hidden_states": randn(B, 8, 2, 16, 16),
               "control_hidden_states_scale": torch.ones(1)}


@case("HunyuanImageTransformer2DModel")
def _():
    from diffusers import HunyuanImageTransformer2DModel

    m = HunyuanImageTransformer2DModel(in_channels=4, out_channels=4, num_attention_heads=2,
                                       attention_head_dim=8, num_layers=1, num_single_layers=1,
                                       num_refiner_layers=1, patch_size=(1, 1),
                                       text_embed_dim=16, rope_axes_dim=(4, 4))
    return m, {"hidden_states": randn(B, 4, 8, 8), "timestep": flow_t(),  # float: it casts to this
               "encoder_hidden_states": randn(B, 7, 16),
               "encoder_attention_mask": torch.ones(B, 7, dtype=torch.long)}


@case("HunyuanVideo15Transformer3DModel")
def _():  # image-to-video: 9 = noisy (4) + image (4) + mask (1) channels
    from diffusers import HunyuanVideo15Transformer3DModel

    m = HunyuanVideo15Transformer3DModel(in_channels=9, out_channels=4, num_attention_heads=2,
                                         attention_head_dim=10, num_layers=1,
                                         num_refiner_layers=1, text_embed_dim=16,
                                         text_embed_2_dim=8, image_embed_dim=12,
                                         rope_axes_dim=(2, 4, 4))
    return m, {"hidden_states": randn(B, 9, 2, 8, 8), "timestep": flow_t(),  # float: it casts to this
               "encoder_hidden_states": randn(B, 7, 16),
               "encoder_attention_mask": torch.ones(B, 7, dtype=torch.long),
               "encoder_hidden_states_2": randn(B, 5, 8),
               "encoder_attention_mask_2": torch.ones(B, 5, dtype=torch.long),
               "image_embeds": randn(B, 4, 12)}


@case("LongCatImageTransformer2DModel")
def _():
    from diffusers import LongCatImageTransformer2DModel

    m = LongCatImageTransformer2DModel(patch_size=1, in_channels=16, num_layers=1,
                                       num_single_layers=1, attention_head_dim=16,
                                       num_attention_heads=2, joint_attention_dim=32,
                                       pooled_projection_dim=32, axes_dims_rope=[4, 4, 8])
    return m, {"hidden_states": randn(B, 16, 16), "encoder_hidden_states": randn(B, 7, 32),
               "timestep": flow_t(1.0), "img_ids": image_ids(4, 4), "txt_ids": torch.zeros(7, 3)}


@case("OvisImageTransformer2DModel")
def _():
    from diffusers import OvisImageTransformer2DModel

    m = OvisImageTransformer2DModel(patch_size=1, in_channels=16, out_channels=16, num_layers=1,
                                    num_single_layers=1, attention_head_dim=16,
                                    num_attention_heads=2, joint_attention_dim=32,
                                    axes_dims_rope=(4, 4, 8))
    return m, {"hidden_states": randn(B, 16, 16), "encoder_hidden_states": randn(B, 7, 32),
               "timestep": flow_t(1.0), "img_ids": image_ids(4, 4), "txt_ids": torch.zeros(7, 3)}


@case("PRXTransformer2DModel")
def _():
    from diffusers import PRXTransformer2DModel

    m = PRXTransformer2DModel(in_channels=4, patch_size=2, context_in_dim=16, hidden_size=32,
                              mlp_ratio=2.0, num_heads=2, depth=2, axes_dim=[8, 8])
    # PRXPipeline passes t / num_train_timesteps, in [0, 1] (the model scales by 1000 itself)
    return m, {"hidden_states": randn(B, 4, 16, 16), "timestep": flow_t(1.0),
               "encoder_hidden_states": randn(B, 7, 16),
               "attention_mask": torch.ones(B, 7, dtype=torch.bool)}


@case("AudioLDM2UNet2DConditionModel")
def _():  # per block: self-attention (None), GPT-2 states, T5 states (`_1`)
    from diffusers import AudioLDM2UNet2DConditionModel

    m = AudioLDM2UNet2DConditionModel(sample_size=16, in_channels=4, out_channels=4,
                                      layers_per_block=1, block_out_channels=(32, 64),
                                      cross_attention_dim=((None, 32, 16), (None, 32, 16)),
                                      attention_head_dim=8,
                                      down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                                      up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"))
    return m, {"sample": randn(B, 4, 16, 16), "timestep": steps(),
               "encoder_hidden_states": randn(B, 8, 32), "encoder_hidden_states_1": randn(B, 5, 16),
               "encoder_attention_mask_1": torch.ones(B, 5, dtype=torch.long)}


@case("AutoencoderKLCosmos")
def _():
    from diffusers import AutoencoderKLCosmos

    m = AutoencoderKLCosmos(latent_channels=4, encoder_block_out_channels=(8, 8, 8, 8),
                            decode_block_out_channels=(8, 8, 8, 8), attention_resolutions=(8,),
                            resolution=32, num_layers=1, patch_size=2,
                            spatial_compression_ratio=4, temporal_compression_ratio=4,
                            latents_mean=None, latents_std=None)
    return m, {"sample": randn(B, 3, 9, 32, 32)}


@case("ChronoEditTransformer3DModel")
def _():  # Wan-derived image editing
    from diffusers import ChronoEditTransformer3DModel

    return _wan_like(ChronoEditTransformer3DModel), {
        "hidden_states": randn(B, 4, 2, 16, 16), "timestep": steps(),
        "encoder_hidden_states": randn(B, 7, 16)}


@case("AutoencoderKLQwenImage21")
def _():  # an image VAE on Wan's video layout: 4 channels (RGBA) by default, one frame
    from diffusers import AutoencoderKLQwenImage21

    m = AutoencoderKLQwenImage21(base_dim=8, decoder_base_dim=8, z_dim=4, dim_mult=[1, 1, 1, 1],
                                 num_res_blocks=1, temperal_downsample=[False, True, True])
    return m, {"sample": randn(B, 4, 1, 16, 16)}  # images: one frame


@case("AutoencoderKLKVAE")
def _():
    from diffusers import AutoencoderKLKVAE

    m = AutoencoderKLKVAE(channels=32, num_enc_blocks=1, num_dec_blocks=1, z_channels=4,
                          ch_mult=(1, 2), sample_size=32)
    return m, {"sample": randn(B, 3, 32, 32)}


@case("DreamLiteUNetModel")
def _():
    from diffusers import DreamLiteUNetModel

    m = DreamLiteUNetModel(sample_size=16, block_out_channels=(32, 64, 64), layers_per_block=1,
                           cross_attention_dim=32, attention_head_dim=8)
    return m, {"sample": randn(B, 4, 16, 16), "timestep": steps(),
               "encoder_hidden_states": randn(B, 7, 32)}


@case("MotifVideoTransformer3DModel")
def _():
    from diffusers import MotifVideoTransformer3DModel

    m = MotifVideoTransformer3DModel(in_channels=4, out_channels=4, num_attention_heads=2,
                                     attention_head_dim=10, num_layers=1, num_single_layers=1,
                                     patch_size=1, patch_size_t=1, text_embed_dim=16,
                                     rope_axes_dim=(2, 4, 4))
    return m, {"hidden_states": randn(B, 4, 2, 8, 8), "timestep": flow_t(),
               "encoder_hidden_states": randn(B, 7, 16),
               "encoder_attention_mask": torch.ones(B, 7, dtype=torch.long)}


@case("NucleusMoEImageTransformer2DModel")
def _():  # 5 layers: the first three and the last stay dense, so one is MoE. Experts choose
    # tokens: capacity (factor * tokens / experts) must not exceed the 16 image tokens
    from diffusers import NucleusMoEImageTransformer2DModel

    m = NucleusMoEImageTransformer2DModel(patch_size=2, in_channels=16, out_channels=4,
                                          num_layers=5, attention_head_dim=16,
                                          num_attention_heads=2, joint_attention_dim=16,
                                          axes_dims_rope=(8, 4, 4), num_experts=4,
                                          moe_intermediate_dim=16, capacity_factors=2.0)
    return m, {"hidden_states": randn(B, 4 * 4, 16), "img_shapes": [(1, 4, 4)] * B,
               "encoder_hidden_states": randn(B, 7, 16),
               "encoder_hidden_states_mask": torch.ones(B, 7, dtype=torch.long),
               "timestep": flow_t(1.0)}


@case("Flux3Transformer2DModel")
def _():
    from diffusers import Flux3Transformer2DModel

    m = Flux3Transformer2DModel(in_channels=16, cond_in_channels=16, num_layers=1,
                                num_single_layers=1, attention_head_dim=16, num_attention_heads=2,
                                joint_attention_dim=32, timestep_channels=32,
                                axes_dims_rope=(4, 4, 4, 4))
    r = torch.arange
    img_ids = torch.cartesian_prod(r(1), r(4), r(4), r(1))
    txt_ids = torch.cartesian_prod(r(1), r(1), r(1), r(7))
    return m, {"hidden_states": randn(B, 16, 16), "encoder_hidden_states": randn(B, 7, 32),
               "timestep": flow_t(1.0), "img_ids": img_ids, "txt_ids": txt_ids}  # unbatched ids


@case("StableAudio3DiTModel")
def _():
    from diffusers import StableAudio3DiTModel

    m = StableAudio3DiTModel(io_channels=8, embed_dim=32, depth=2, num_heads=2, cond_token_dim=16,
                             global_cond_dim=16, local_add_cond_dim=8, timestep_features_dim=16,
                             num_memory_tokens=4)
    return m, {"hidden_states": randn(B, 8, 16), "timestep": flow_t(1.0),
               "encoder_hidden_states": randn(B, 7, 16), "global_hidden_states": randn(B, 16)}


@case("ZImageControlNetModel")
def _():  # shares its embedders and refiners with a transformer (from_transformer), as loaded
    from diffusers import ZImageControlNetModel, ZImageTransformer2DModel

    t = ZImageTransformer2DModel(in_channels=4, dim=32, n_layers=1, n_refiner_layers=1, n_heads=2,
                                 n_kv_heads=2, cap_feat_dim=16, axes_dims=[4, 6, 6],
                                 axes_lens=[128, 32, 32])
    m = ZImageControlNetModel(control_layers_places=[0], control_refiner_layers_places=[0],
                              control_in_dim=4, dim=32, n_refiner_layers=1, n_heads=2,
                              n_kv_heads=2)
    m = ZImageControlNetModel.from_transformer(m, t)
    return m, {"x": [randn(4, 1, 8, 8) for _ in range(B)], "t": flow_t(1.0),
               "cap_feats": [randn(7, 16) for _ in range(B)],
               "control_context": [randn(4, 1, 8, 8) for _ in range(B)]}


@case("Kandinsky5Transformer3DModel")
def _():  # channels-last latents (B, frames, H, W, C); rope positions as the pipeline makes them
    from diffusers import Kandinsky5Transformer3DModel

    m = Kandinsky5Transformer3DModel(in_visual_dim=4, in_text_dim=16, in_text_dim2=8, time_dim=16,
                                     out_visual_dim=4, model_dim=32, ff_dim=64,
                                     num_text_blocks=1, num_visual_blocks=1, axes_dims=(4, 6, 6))
    r = torch.arange
    return m, {"hidden_states": randn(B, 1, 8, 8, 4), "encoder_hidden_states": randn(B, 7, 16),
               "timestep": flow_t(), "pooled_projections": randn(B, 8),
               "visual_rope_pos": [r(1), r(4), r(4)], "text_rope_pos": r(7)}


@case("HeliosTransformer3DModel")
def _():  # Wan-derived; without history latents (its first chunk)
    from diffusers import HeliosTransformer3DModel

    m = HeliosTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12,
                                 in_channels=4, out_channels=4, text_dim=16, freq_dim=256,
                                 ffn_dim=32, num_layers=2, rope_dim=(4, 4, 4))
    return m, {"hidden_states": randn(B, 4, 2, 16, 16), "timestep": steps(),
               "encoder_hidden_states": randn(B, 7, 16)}


@case("ErnieImageTransformer2DModel")
def _():  # text comes padded (B, T, D) with its true lengths
    from diffusers import ErnieImageTransformer2DModel

    m = ErnieImageTransformer2DModel(hidden_size=32, num_attention_heads=2, num_layers=2,
                                     ffn_hidden_size=64, in_channels=16, out_channels=16,
                                     text_in_dim=16, rope_axes_dim=(4, 6, 6))
    return m, {"hidden_states": randn(B, 16, 4, 4), "timestep": flow_t(),
               "text_bth": randn(B, 7, 16), "text_lens": torch.tensor([7, 5])[:B]}


@case("AutoencoderVidTok")
def _():  # its forward samples the posterior by default: sample_posterior=False takes the mode
    from diffusers import AutoencoderVidTok

    m = AutoencoderVidTok(ch=8, ch_mult=[1, 2], z_channels=4, num_res_blocks=1)
    return m, {"sample": randn(B, 3, 5, 16, 16), "sample_posterior": False}


@case("DreamLiteTransformer2DModel")
def _():
    from diffusers import DreamLiteTransformer2DModel

    m = DreamLiteTransformer2DModel(num_attention_heads=2, attention_head_dim=16, in_channels=32,
                                    cross_attention_dim=16)
    return m, {"hidden_states": randn(B, 32, 8, 8), "encoder_hidden_states": randn(B, 7, 16)}


def main() -> None:
    import argparse

    from diffusers.utils import logging

    from benchmarks.sweep.zoo_timm import run_check  # shared by both zoos

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="build and run each case eagerly")
    ap.add_argument("--only", help="cases whose name contains this")
    args = ap.parse_args()
    logging.set_verbosity_error()
    if args.check:
        run_check(cases(), "build/sweep/zoo_diffusers_check.txt", args.only)


if __name__ == "__main__":
    main()
