"""A Stable-Diffusion-shaped UNet2DConditionModel (diffusers), small: channels 64/128,
cross-attention on 64-dim text states; one 4x32x32 latent, 16 text tokens:
`model(latent, t, encoder_hidden_states=...).sample`.

Random weights from a config (nothing is downloaded); built for `aotc bench --suite`.
"""
import torch
from diffusers import UNet2DConditionModel


def build_model():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return UNet2DConditionModel(
            sample_size=32, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(64, 128),
            down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
            cross_attention_dim=64, attention_head_dim=8, norm_num_groups=32,
        ).eval()


def example_inputs():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(1, 4, 32, 32, generator=g), torch.tensor(10)), {
        "encoder_hidden_states": torch.randn(1, 16, 64, generator=g)}


def loss(outputs, *inputs, **kwargs):
    return outputs.sample.pow(2).mean()
