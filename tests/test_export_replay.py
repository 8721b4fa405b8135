"""Export replays the bundle it wrote on the example inputs (fx) and refuses one that does
not give eager's results: never a bundle that silently computes something else."""

from __future__ import annotations

import pytest
import torch

import aotc
from aotc.errors import CaptureError


class PaddedEncoder(torch.nn.Module):
    """nn.TransformerEncoder in eval with a padding mask: under no_grad eager takes its fast
    path (nested tensors: zeros at padded positions); torch traces the other path."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=True)

    def forward(self, x, mask):
        return self.encoder(x, src_key_padding_mask=mask)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_bundle_unlike_eager_is_refused_and_not_written(tmp_path):
    x = torch.randn(2, 5, 8)
    mask = torch.tensor([[False] * 5, [False, False, False, True, True]])
    with pytest.raises(CaptureError, match=r"does not give eager's results.*output\[0\] differs by up to"):
        aotc.export(PaddedEncoder().eval(), ((x, mask), {}), tmp_path / "b")
    assert not (tmp_path / "b").exists()
    # without padding both paths compute the same: the bundle is written
    aotc.export(PaddedEncoder().eval(), ((x, torch.zeros(2, 5, dtype=torch.bool)), {}), tmp_path / "b")
    assert (tmp_path / "b" / "manifest.json").exists()
