"""How a bundle graph's ops become ONNX where torch.onnx alone gets them wrong or cannot.

- Translations (onnxscript functions) that replace or add to torch.onnx's: SDPA's CPU
  kernel keeping torch's rule for a query that sees no key, `_safe_softmax`, a bool
  `masked_fill` onnxruntime has no kernel for, and a model library's own ops by the
  library's own translations.
- CPU kernels put back as the ops they were lowered from (`onnx_ready`).
- torch.onnx's optimization without the rewrite rules that change values (`optimized`).
"""

from __future__ import annotations

import sys

import torch


_MKLDNN_LSTM = 2  # ideep::rnn_kind::LSTM, the `mode` torch's lstm decomposition passes


def _lstm_layer(input, w_ih, w_hh, b_ih, b_hh, hx, cx, reverse, batch_sizes, mode, hidden_size, num_layers,
                has_biases, bidirectional, batch_first, train):
    """`aten.mkldnn_rnn_layer` as the one-layer `aten.lstm` it was lowered from.

    AOTAutograd traces `aten.lstm` through torch's Python decomposition
    (torch/_decomp/decompositions.py, `lstm_impl`), which on CPU, for float inputs that
    need no gradient, runs each layer (and direction) as oneDNN's fused
    `mkldnn_rnn_layer` (`mkldnn_one_layer_lstm`: one layer, unidirectional, seq first,
    hx/cx of shape (1, batch, hidden)). torch.onnx translates `aten.lstm` to ONNX's LSTM
    operator, which keeps the sequence length dynamic.
    """
    if mode != _MKLDNN_LSTM or num_layers != 1 or bidirectional or batch_sizes:
        return NotImplemented  # not a layer torch's lstm decomposition writes: stays, and is named
    seq_dim = 1 if batch_first else 0
    x = input.flip(seq_dim) if reverse else input
    # Without biases torch passes placeholder tensors for them; oneDNN ignores those.
    params = [w_ih, w_hh, b_ih, b_hh] if has_biases else [w_ih, w_hh]
    out, hy, cy = torch.ops.aten.lstm.input(x, [hx, cx], params, has_biases, 1, 0.0, False, False, batch_first)
    workspace = input.new_empty((0,), dtype=torch.uint8)  # training state; unused in inference
    return (out.flip(seq_dim) if reverse else out), hy, cy, workspace


def _attention(query, key, value, dropout_p: float = 0.0, is_causal: bool = False, attn_mask=None, scale=None):
    """ONNX for SDPA's CPU kernel that keeps torch's rule for a query that may attend to no key.

    torch gives zeros for such a row (a left-padded position, a padded row under a causal
    mask); onnxscript's own translation takes Softmax of a row of -inf, which is NaN, and
    the NaN then spreads through the next layer's keys and values to every position. This
    is onnxscript's translation with those rows set to zero, as torch's `_safe_softmax`
    does. (A translation, not a decomposition: re-tracing the graph to decompose one op
    took as long as the whole export.)
    """
    from onnxscript import ir  # onnxscript: optional (aotc[onnx]), only for this translation
    from onnxscript import opset18 as op
    from onnxscript.function_libs.torch_lib.ops.nn import aten__scaled_dot_product_flash_attention_for_cpu

    heads, kv_heads = query.shape[1], key.shape[1]  # torch's kernel shares each key head among a group (GQA)
    if isinstance(heads, int) and isinstance(kv_heads, int) and heads != kv_heads:
        key, value = _repeat_heads(key, heads // kv_heads), _repeat_heads(value, heads // kv_heads)
    result, logsumexp = aten__scaled_dot_product_flash_attention_for_cpu(
        query, key, value, dropout_p=dropout_p, is_causal=is_causal, attn_mask=attn_mask, scale=scale
    )
    if attn_mask is None:
        return result, logsumexp  # causal alone always lets a query see the first key
    allowed = attn_mask if attn_mask.dtype == ir.DataType.BOOL else op.Greater(
        attn_mask, op.CastLike(op.Constant(value_float=float("-inf")), attn_mask))
    sees_a_key = op.ReduceMax(op.Cast(allowed, to=ir.DataType.FLOAT), op.Constant(value_ints=[-1]), keepdims=1)
    zero = op.CastLike(op.Constant(value_float=0.0), result)
    return op.Where(op.Greater(sees_a_key, op.Constant(value_float=0.0)), result, zero), logsumexp


def _repeat_heads(x, times: int):
    """(batch, heads, length, dim) -> (batch, heads * times, length, dim), each head `times`
    over in a row (torch's repeat_interleave on dim 1), for dynamic batch and length."""
    from onnxscript import ir
    from onnxscript import opset18 as op

    def ints(*values):
        return op.Constant(value_ints=list(values))

    shape = op.Shape(x)
    batch_heads, length_dim = op.Slice(shape, ints(0), ints(2)), op.Slice(shape, ints(2), ints(4))
    repeated = op.Expand(op.Unsqueeze(x, ints(2)), op.Concat(batch_heads, ints(times), length_dim, axis=0))
    heads = op.Mul(op.Slice(shape, ints(1), ints(2)), ints(times))
    out = op.Reshape(repeated, op.Concat(op.Slice(shape, ints(0), ints(1)), heads, length_dim, axis=0))
    out.dtype = x.dtype  # what the attention translation reads of its inputs
    out.shape = ir.Shape([x.shape[0], x.shape[1] * times, x.shape[2], x.shape[3]])
    return out


def _safe_softmax(x, dim: int, dtype: int = -1):
    """`aten._safe_softmax`, which torch.onnx has no translation for (it is what SDPA's math
    path and transformers' eager attention trace to): softmax, with zeros for a row that is
    all -inf where ONNX's Softmax gives NaN."""
    from onnxscript import opset18 as op
    from onnxscript.function_libs.torch_lib.ops.core import aten_softmax

    result = aten_softmax(x, dim, dtype)
    masked = op.Cast(op.Equal(x, op.CastLike(op.Constant(value_float=float("-inf")), x)), to=1)  # FLOAT
    all_masked = op.Greater(op.ReduceMin(masked, op.Constant(value_ints=[dim]), keepdims=1), op.Constant(value_float=0.0))
    return op.Where(all_masked, op.CastLike(op.Constant(value_float=0.0), result), result)


def _is_all_true(x):
    """`aten._is_all_true` (a bool tensor's `.all()` feeding a runtime check: D-FINE's): a 0-d bool."""
    from onnxscript import opset18 as op

    return op.Cast(op.ReduceMin(op.Cast(op.Reshape(x, op.Constant(value_ints=[-1])), to=6), keepdims=0), to=9)  # INT32, BOOL


def _rsub_scalar(x, other, alpha=1.0):
    """`aten.rsub.Scalar`: other - alpha * x, in the dtype torch gives it: an integer tensor
    with a float scalar in float32 (torch's default dtype; ProphetNet's `1.0 - mask` of an
    int64 mask), not in the tensor's dtype."""
    from onnxscript import ir
    from onnxscript import opset18 as op

    floats = (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
    if x.dtype not in floats and (isinstance(other, float) or (isinstance(alpha, float) and not alpha.is_integer())):
        x = op.Cast(x, to=ir.DataType.FLOAT)
    scaled = x if alpha == 1 else op.Mul(x, op.CastLike(op.Constant(value_float=float(alpha)), x))
    return op.Sub(op.CastLike(op.Constant(value_float=float(other)), x), scaled)


def _masked_fill(x, mask, value):
    """`aten.masked_fill` where onnxruntime's CPU Where has no kernel: a bool tensor (the
    attention mask HunyuanVideo builds) is filled with And/Or; other dtypes as torch.onnx does."""
    from onnxscript import ir
    from onnxscript import opset18 as op
    from onnxscript.function_libs.torch_lib.ops.core import aten_masked_fill

    if x.dtype != ir.DataType.BOOL:
        return aten_masked_fill(x, mask, value)
    fill = bool(value) if isinstance(value, (bool, int, float)) else bool(value.const_value.numpy())
    return op.Or(x, mask) if fill else op.And(x, op.Not(mask))


# translations of torch.onnx's to replace or add, by op
_TRANSLATIONS = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default: _attention,
    torch.ops.aten._safe_softmax.default: _safe_softmax,
    torch.ops.aten._is_all_true.default: _is_all_true,
    torch.ops.aten.rsub.Scalar: _rsub_scalar,
    torch.ops.aten.masked_fill.Scalar: _masked_fill,
    torch.ops.aten.masked_fill.Tensor: _masked_fill,
}


def translations(program) -> dict:
    """_TRANSLATIONS, and where the graph holds a model library's own ops (transformers'
    `grouped_mm_fallback` for mixture-of-experts layers on CPU), the library's translations
    of them, from the ONNX exporter it ships."""
    table = dict(_TRANSLATIONS)
    if "transformers" in sys.modules and any(str(n.target).startswith("transformers.") for n in program.graph.nodes):
        try:
            from transformers.exporters.exporter_onnx import _ONNX_TRANSLATION_TABLE as library
        except ImportError:  # a transformers without it: the ops are named as untranslatable
            library = {}
        table.update({op: fn for op, fn in library.items() if str(op).startswith("transformers.")})
    return table


# CPU kernels a bundle graph can hold that torch.onnx cannot translate, each as the ops it
# was lowered from.
_UNLOWER = {torch.ops.aten.mkldnn_rnn_layer.default: _lstm_layer}


def onnx_ready(program):
    """`program` with the CPU-only ops of `_UNLOWER` put back; the same program when it has
    none. Inputs, outputs and dynamic dims stay as they are."""
    table = {op: fn for op, fn in _UNLOWER.items() if program.graph.find_nodes(op="call_function", target=op)}
    return program.run_decompositions(table) if table else program


def optimized(exported) -> None:
    """torch.onnx's optimization (onnxscript's constant folding, rewrite rules and fusions) without
    the rules that drop `x + 0`, `x - 0`, `x * 1` and `x / 1`: they match constants within
    1e-8 of 0, so an epsilon that keeps a division finite (`x / (s + 1e-15)`: diffusers'
    Sana linear attention) vanished, and onnxruntime returned NaN where torch gives 0."""
    from onnxscript import rewriter  # onnxscript: optional (aotc[onnx])
    from onnxscript.rewriter.rules.common import _no_op

    # onnxscript's own names (0.7): the optimizer reads its rule list from the module
    inexact = set(_no_op.rules)
    default = rewriter._DEFAULT_REWRITE_RULES
    try:
        rewriter._DEFAULT_REWRITE_RULES = tuple(r for r in default if r not in inexact)
        exported.optimize()  # what torch.onnx.export(optimize=True) runs
    finally:
        rewriter._DEFAULT_REWRITE_RULES = default
