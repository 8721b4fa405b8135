"""The decoder of a Stable-Diffusion-shaped AutoencoderKL (diffusers), small: channels
64/128; one 4x32x32 latent to a 3x64x64 image: `model(latent).sample`.

Random weights from a config (nothing is downloaded); built for `aotc bench --suite`.
"""
import torch
from diffusers import AutoencoderKL


class Decoder(torch.nn.Module):
    """`vae.decode` as a module's forward: what a pipeline calls after the denoising loop."""

    def __init__(self):
        super().__init__()
        self.vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(64, 128),
                                 down_block_types=("DownEncoderBlock2D",) * 2,
                                 up_block_types=("UpDecoderBlock2D",) * 2, layers_per_block=1, norm_num_groups=32)

    def forward(self, latent):
        return self.vae.decode(latent)


def build_model():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return Decoder().eval()


def example_inputs():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(1, 4, 32, 32, generator=g),)


def loss(outputs, *inputs, **kwargs):
    return outputs.sample.pow(2).mean()
