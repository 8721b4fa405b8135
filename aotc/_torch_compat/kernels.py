"""torch's tracing kernels that aotc replaces while it captures, so a graph does what eager
does: part of aotc._torch_compat (which re-exports every name), in a module of their own
because they are one concern: the decompositions torch traces dropout and RNNs with, and
which random draws the traced graphs keep.
"""

from __future__ import annotations

import contextlib

import torch
from torch._C import DispatchKey


@contextlib.contextmanager
def random_draws_kept():
    """Keep every random op in the traced graphs, its result used or not. Inside a tracing
    context, FX's dead-code elimination takes random ops for pure unless inductor's
    fallback_random is on (torch/fx/graph.py). A dropout whose result nothing uses (the
    layout stream of LiLT's last layer) then left the joint graph, while eager still draws
    its mask: every later dropout in the graph drew another mask than eager's."""
    import torch._inductor.config as inductor_config  # a config module: imports no compiler

    with inductor_config.patch(fallback_random=True):
        yield


@contextlib.contextmanager
def eager_dropout():
    """Trace `aten.dropout` as eager runs it. Outside training (or with p=0) ATen's
    dropout returns its input itself, so an in-place op on the result mutates the input;
    torch's tracing kernel returns a clone up to 2.13 (2.14 fixed it), and a graph traced
    with it silently stops mutating the caller's tensor. Inside this block it returns the
    input, as ATen does; in training it is torch's own kernel (2.15's handles complex inputs)."""
    op = torch.ops.aten.dropout.default
    keys = [k for k in (DispatchKey.CompositeImplicitAutograd, DispatchKey.Autograd) if k in op.py_kernels]
    saved = {k: op.py_kernels[k] for k in keys}
    torch_dropout = next(iter(saved.values()), None)

    def dropout(input, p, train):
        if train and p != 0:
            return torch_dropout(input, p, train)
        return input

    for k in keys:
        op.py_kernels[k] = dropout
    op._dispatch_cache.clear()
    try:
        yield
    finally:
        op.py_kernels.update(saved)
        op._dispatch_cache.clear()


@contextlib.contextmanager
def eager_rnn():
    """Trace RNN/LSTM/GRU as eager runs them; two fixes to torch 2.13's tracing kernels
    (torch._decomp.decompositions):
    - `_rnn_helper` sets the dropout between layers to 0 by mistake (`num_layers < i - 1`
      is never true), so a training graph silently skips it. Here each layer is traced
      alone and followed by that dropout, in eager's order (the same RNG draws).
    - `select_one_layer_lstm_function` takes oneDNN's inference-only LSTM kernel whenever
      the input does not require grad, even when the weights do, whose backward then
      fails. Here that kernel is taken only when nothing needs a gradient."""
    import torch._decomp.decompositions as decompositions  # capture only

    original = decompositions._rnn_helper
    select_lstm = decompositions.select_one_layer_lstm_function

    def select_one_layer_lstm_function(input, hx, params):
        weights = [p for layer in params for p in layer]
        if torch.is_grad_enabled() and any(t.requires_grad for t in [input, *hx, *weights]):
            return decompositions.one_layer_lstm
        return select_lstm(input, hx, params)

    def rnn_helper(input, hidden, params, has_biases, num_layers, dropout, train, bidirectional, batch_first,
                   layer_fn):
        if not (dropout and train and num_layers > 1):
            return original(input, hidden, params, has_biases, num_layers, dropout, train, bidirectional,
                            batch_first, layer_fn)
        per_layer = 2 if bidirectional else 1
        input = input.transpose(0, 1) if batch_first else input
        final_hiddens = []
        for i in range(num_layers):
            layer = slice(per_layer * i, per_layer * (i + 1))
            input, finals = original(input, hidden[layer], params[layer], has_biases, 1, 0.0, train, bidirectional,
                                     False, layer_fn)
            final_hiddens += finals
            if i < num_layers - 1:
                input = torch.dropout(input, dropout, train=True)
        input = input.transpose(0, 1) if batch_first else input
        return input, final_hiddens

    decompositions._rnn_helper = rnn_helper
    decompositions.select_one_layer_lstm_function = select_one_layer_lstm_function
    try:
        yield
    finally:
        decompositions._rnn_helper = original
        decompositions.select_one_layer_lstm_function = select_lstm
