"""Recurrent layers' training graphs as eager runs them (two of torch 2.13's tracing kernels
differ, see _torch_compat.eager_rnn): the dropout between the layers of a multi-layer
LSTM, drawn as eager draws it; and an LSTM whose input does not require grad, which
differentiates its weights."""

from __future__ import annotations

import pytest
import torch

import aotc


class ThreeLayerLSTM(torch.nn.Module):
    def __init__(self, batch_first: bool, bidirectional: bool):
        super().__init__()
        torch.manual_seed(0)
        self.rnn = torch.nn.LSTM(6, 8, num_layers=3, dropout=0.5, batch_first=batch_first,
                                 bidirectional=bidirectional)

    def forward(self, x):
        out, (h, c) = self.rnn(x)
        return out, h, c


@pytest.mark.slow
def test_lstm_layer_dropout_replays_as_eager(tmp_path):
    model = ThreeLayerLSTM(batch_first=True, bidirectional=False).train()
    # an input that requires grad, as the embedding's output in sample_models/word_lm.py
    x = torch.randn(2, 3, 6, requires_grad=True)
    aotc.export(model, (x,), tmp_path / "b", graphs=("forward", "backward"))
    graph = (tmp_path / "b" / "graphs" / "forward.py").read_text()
    assert graph.count("native_dropout.default(") == 2  # between layers 1-2 and 2-3

    loaded = aotc.load(tmp_path / "b", mode="train")
    x_eager, x_loaded = (x.detach().clone().requires_grad_() for _ in range(2))
    torch.manual_seed(3)
    expected = model(x_eager)
    sum(t.sum() for t in expected).backward()
    torch.manual_seed(3)
    actual = loaded(x_loaded)
    sum(t.sum() for t in actual).backward()
    for e, a in zip(expected, actual):
        torch.testing.assert_close(a, e)
    torch.testing.assert_close(x_loaded.grad, x_eager.grad)
    grads = dict(loaded.named_parameters())
    for name, p in model.named_parameters():
        torch.testing.assert_close(grads[name].grad, p.grad, msg=lambda m: f"{name}: {m}")


def test_lstm_input_without_grad_trains_its_weights(tmp_path):
    # torch's kernel takes oneDNN's inference LSTM when the input does not require grad,
    # and its backward then failed at call for want of a workspace
    torch.manual_seed(0)
    model = torch.nn.LSTM(4, 5, batch_first=True).train()
    x = torch.randn(2, 3, 4)
    aotc.export(model, (x,), tmp_path / "b", graphs=("forward", "backward"))
    loaded = aotc.load(tmp_path / "b", mode="train")
    expected, actual = model(x), loaded(x)
    (expected[0].sum() + expected[1][1].sum()).backward()
    (actual[0].sum() + actual[1][1].sum()).backward()
    torch.testing.assert_close(actual[0], expected[0])
    grads = dict(loaded.named_parameters())
    for name, p in model.named_parameters():
        torch.testing.assert_close(grads[name].grad, p.grad, msg=lambda m: f"{name}: {m}")
