"""Export replays the bundle it wrote on the example inputs (fx) and refuses one that does
not give eager's results: never a bundle that silently computes something else."""

from __future__ import annotations

import pytest
import torch

import aotc
from aotc.errors import CaptureError, InputError


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


class ViewsOfInput(torch.nn.Module):
    def forward(self, x, y):
        return x.t(), x[0], y + 1


def test_views_of_an_input_laid_out_otherwise(tmp_path):
    # exported with a transposed x; the replay passes x as reference.safetensors stores it
    # (contiguous), which once gave views with the export's strides on other memory
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(4, 3, generator=g).t(), torch.randn(3, 4, generator=g)
    bundle = aotc.export(ViewsOfInput(), ((x, y), {}), tmp_path / "b").path
    loaded = aotc.load(bundle, backend="fx")
    for given in (x, x.contiguous()):
        actual, expected = loaded(given, y), ViewsOfInput()(given, y)
        for a, e in zip(actual, expected, strict=True):
            assert torch.equal(a, e) and a.stride() == e.stride()
        assert [a.data_ptr() for a in actual[:2]] == [e.data_ptr() for e in expected[:2]]  # views of `given`
    assert aotc.verify(bundle).ok


@pytest.mark.slow
def test_compiled_views_of_an_input_laid_out_otherwise_are_refused(tmp_path):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(4, 3, generator=g).t(), torch.randn(3, 4, generator=g)
    bundle = aotc.export(ViewsOfInput(), ((x, y), {}), tmp_path / "b").path
    aotc.compile(bundle)
    loaded = aotc.load(bundle, backend="aoti")
    actual, expected = loaded(x, y), ViewsOfInput()(x, y)
    for a, e in zip(actual, expected, strict=True):
        assert torch.equal(a, e) and a.stride() == e.stride()
    assert [a.data_ptr() for a in actual[:2]] == [e.data_ptr() for e in expected[:2]]
    refusal = r"laid out with strides \(4, 1\), unlike at export \(1, 3\), and output 0 is a view.*backend='fx'"
    with pytest.raises(InputError, match=refusal):
        loaded(x.contiguous(), y)
    assert aotc.verify(bundle).ok  # verify lays its stored inputs out as the export's
