"""ONNX bundles: every sample model's inference graph through onnxruntime, joint graphs
where ONNX can express them, and clear refusals where it cannot."""

from __future__ import annotations

import json

import pytest
import torch

import aotc
from aotc._torch_compat import pytree
from aotc.exporters.onnx import add_to_bundle, onnx_names
from conftest import SAMPLE_NAMES, SAMPLES, clone_inputs, fresh_sample, invoke

TOL = dict(rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def onnx_bundles(tmp_path_factory):
    root = tmp_path_factory.mktemp("onnx")
    out = {}
    for name in SAMPLE_NAMES:
        result = invoke("export", SAMPLES / f"{name}.py", "--onnx", "-o", root / name, "--json")
        assert result.exit_code == 0, result.stderr
        out[name] = root / name
    return out


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_inference_parity(onnx_bundles, name):
    m = aotc.load(onnx_bundles[name], backend="onnx")
    spec = fresh_sample(name)
    given, eager_inputs = clone_inputs(spec.args), clone_inputs(spec.args)
    outs = pytree.tree_leaves(m(*given))
    expected = pytree.tree_leaves(spec.module.eval()(*eager_inputs))
    for o, e in zip(outs, expected, strict=True):
        torch.testing.assert_close(o, e.detach(), **TOL)
    for a, b in zip(given, eager_inputs):  # inplace.py mutates y: applied by the epilogue
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_dynamic_batch_is_an_onnx_dynamic_axis(onnx_bundles):
    m = aotc.load(onnx_bundles["mlp"], backend="onnx")
    eager = fresh_sample("mlp").module.eval()
    for batch in (2, 37):
        x = torch.randn(batch, 16)
        torch.testing.assert_close(m(x), eager(x).detach(), **TOL)


def test_inspect_shows_onnx_without_running_it(onnx_bundles):
    path = onnx_bundles["inplace"]
    result = invoke("inspect", path)
    assert result.exit_code == 0
    assert "onnx/inference.onnx: opset 18; inputs lin_weight, lin_bias, x, y; outputs mutated_y" in " ".join(
        result.stderr.split()
    )
    files = {f["path"]: f for f in json.loads(invoke("inspect", path, "--json").stdout)["manifest"]["files"]}
    assert files["onnx/inference.onnx"]["build"]["opset"] == "18"


@pytest.mark.parametrize("name", ["inplace", "classifier"])
def test_joint_train_step_parity(tmp_path, name):
    out = tmp_path / name
    result = invoke("export", SAMPLES / f"{name}.py", "--joint", "--onnx", "-o", out)
    assert result.exit_code == 0, result.stderr
    step = aotc.load(out, backend="onnx", mode="train")
    spec = fresh_sample(name)
    eager = spec.module.train()
    inputs = clone_inputs(spec.args)
    loss = step.train_step(*clone_inputs(spec.args))
    expected = spec.loss(eager(*inputs), *inputs)
    expected.backward()
    torch.testing.assert_close(loss, expected.detach(), **TOL)
    grads = {n: p.grad for n, p in step.named_parameters()}
    expected_grads = {n: q.grad for n, q in eager.named_parameters()}
    assert grads.keys() == expected_grads.keys()
    assert any(g is not None for g in expected_grads.values())
    for n, want in expected_grads.items():
        assert (grads[n] is None) == (want is None), f"{n}: grad {grads[n]} vs eager {want}"
        if want is not None:
            torch.testing.assert_close(grads[n], want, **TOL, msg=lambda m: f"{n}: {m}")


def test_untranslatable_operators_are_named(tmp_path):
    result = invoke("export", SAMPLES / "cnn.py", "--joint", "--onnx", "-o", tmp_path / "c")
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "Error: The joint graph cannot be exported to ONNX opset 18; operators without an ONNX translation: "
        "aten.convolution_backward.default, aten.max_pool2d_with_indices_backward.default, "
        "aten.native_batch_norm_backward.default, aten.select_backward.default, aten.threshold_backward.default."
    )
    assert not (tmp_path / "c").exists() or not (tmp_path / "c" / "onnx").exists()


def test_onnx_that_onnxruntime_cannot_load_is_refused_by_name(tmp_path):
    """torch.onnx writes `squeeze(1)` of a dim that is not 1 (a no-op in torch) as an ONNX
    Squeeze, which onnxruntime rejects when loading: a named refusal, not a crash
    (diffusers' AllegroTransformer3DModel in the coverage sweep)."""

    class SqueezeNotOne(torch.nn.Module):
        def forward(self, x):
            return x.squeeze(1) * 2

    path = aotc.export(SqueezeNotOne(), (torch.randn(2, 32),), tmp_path / "b").path
    with pytest.raises(aotc.AotcError, match="onnxruntime cannot load the ONNX model torch.onnx wrote for the "
                                             "inference graph .*Squeeze.*; use the fx or aoti backend"):
        add_to_bundle(path)
    assert not (path / "onnx").exists() or not any((path / "onnx").iterdir())
    assert aotc.load(path, backend="fx")(torch.ones(2, 32)).eq(2).all()  # the bundle is as it was


class Positions(torch.nn.Module):
    def forward(self, x, ids):
        return x + ids.float().sum(-1, keepdim=True)


def test_expanded_inputs(tmp_path):
    """Flux's position ids are an expanded tensor (stride 0 over the batch): onnx's example
    inputs take that layout, and a compiled layout that reads one element along a dim takes
    only inputs that repeat along it (diffusers' Flux2 and SparseControlNet in the sweep)."""
    from aotc.contract.aliasing import StrideGuard

    x, ids = torch.randn(2, 16, 4), torch.arange(64).view(1, 16, 4).expand(2, 16, 4)
    path = aotc.export(Positions(), (x, ids), tmp_path / "b").path
    add_to_bundle(path)
    loaded = aotc.load(path, backend="onnx")
    torch.testing.assert_close(loaded(x, ids), Positions()(x, ids))
    torch.testing.assert_close(loaded(x, ids.contiguous()), Positions()(x, ids))

    guard = StrideGuard.of([2, 16, 4], [0, 4, 1], static=True)
    fitted = guard.fit(ids.contiguous())
    assert fitted.stride() == (0, 4, 1) and torch.equal(fitted, ids)
    with pytest.raises(aotc.InputError, match=r"exported expanded along dim\(s\) \[0\] \(stride 0\).*differ"):
        guard.fit(torch.arange(128).view(2, 16, 4))


class SafeSoftmax(torch.nn.Module):
    """What eager attention with a mask traces to: `_safe_softmax`, zeros for a row that
    may attend to nothing."""

    def forward(self, scores, mask):
        return torch.ops.aten._safe_softmax(scores.masked_fill(mask, float("-inf")), -1)


def test_safe_softmax_has_a_translation(tmp_path):
    scores, mask = torch.randn(3, 5), torch.tensor([[False] * 5, [True] * 5, [True, False, True, False, False]])
    path = aotc.export(SafeSoftmax(), (scores, mask), tmp_path / "b").path
    add_to_bundle(path)
    got, want = aotc.load(path, backend="onnx")(scores, mask), SafeSoftmax()(scores, mask)
    assert want[1].eq(0).all()
    torch.testing.assert_close(got, want)


def test_transformers_own_ops_take_its_translations(tmp_path):
    """DeepSeek-V3's mixture of experts runs transformers' `grouped_mm_fallback` op on CPU:
    the translation transformers' own ONNX exporter ships for it is used."""
    pytest.importorskip("transformers", reason="the hf extra (make test installs it)")
    from benchmarks.sweep.zoos import find

    model, inputs = find("transformers/deepseek_v3/causal-lm").build()
    path = aotc.export(model, ((), inputs), tmp_path / "b").path
    assert "transformers.grouped_mm_fallback" in (path / "graphs" / "inference.pt2").read_bytes().decode("latin-1")
    add_to_bundle(path)
    with torch.no_grad():
        got, want = aotc.load(path, backend="onnx")(**inputs), model(**inputs)
    torch.testing.assert_close(got.logits, want.logits, rtol=1e-3, atol=1e-4)


class EpsilonDivide(torch.nn.Module):
    """diffusers' Sana linear attention: a ReLU kernel's sums can be 0, and an epsilon keeps
    the division finite."""

    def forward(self, x):
        scores = torch.relu(x)
        return scores / (scores.sum(-1, keepdim=True) + 1e-15)


def test_an_epsilon_is_kept(tmp_path):
    """onnxscript's optimizer drops `x + c` for any |c| < 1e-8 as `x + 0`: onnxruntime gave
    0/0 = NaN where torch gives 0."""
    x = torch.randn(4, 8)
    x[1] = -1.0  # a row whose scores are all 0
    path = aotc.export(EpsilonDivide(), (x,), tmp_path / "b").path
    add_to_bundle(path)
    got, want = aotc.load(path, backend="onnx")(x), EpsilonDivide()(x)
    assert want[1].eq(0).all()
    torch.testing.assert_close(got, want)


class Rotate(torch.nn.Module):
    """A rotary embedding as complex numbers (diffusers' Lumina, QwenImage, ZImage)."""

    def forward(self, x, angle):
        z = torch.view_as_complex(x.view(*x.shape[:-1], -1, 2)) * torch.polar(torch.ones_like(angle), angle)
        return torch.view_as_real(z).flatten(-2)


class Spectrum(torch.nn.Module):
    """FNet's token mixing: a complex Fourier transform whose real part the graph returns."""

    def forward(self, x):
        return torch.fft.fft(torch.fft.fft(x, dim=-1), dim=-2).real


@pytest.mark.parametrize("model, args", [(Rotate(), (torch.randn(3, 8), torch.randn(3, 4))),
                                         (Spectrum(), (torch.randn(2, 5, 8),))], ids=["rotary", "fft"])
def test_complex_computation_inside_the_graph(tmp_path, model, args):
    """torch.onnx lowers complex intermediates it knows; export's check stands behind the result."""
    path = aotc.export(model, args, tmp_path / "b").path
    add_to_bundle(path)
    # onnxruntime's DFT sums in another order than torch's FFT: up to 1.1e-5 apart on outputs
    # of magnitude ~6 over 300 inputs, past assert_close's float32 atol of 1e-5 once
    torch.testing.assert_close(aotc.load(path, backend="onnx")(*args), model(*args), atol=1e-4, rtol=1e-4)


def test_complex_graph_inputs_and_outputs_are_refused_by_name(tmp_path):
    """A complex tensor in the graph's signature has no ONNX type (a complex buffer of rotary
    frequencies in diffusers' Lumina and ZImage; here a complex output)."""

    class Transform(torch.nn.Module):
        def forward(self, x):
            return torch.fft.fft(x, dim=-1)

    path = aotc.export(Transform(), (torch.randn(3, 8),), tmp_path / "b").path
    with pytest.raises(aotc.AotcError, match=r"takes or returns complex tensors \(output.*which ONNX has no type for"):
        add_to_bundle(path)


class BoolMask(torch.nn.Module):
    """HunyuanVideo's attention mask: a bool tensor filled by masked_fill, which onnxruntime's
    CPU Where has no kernel for."""

    def forward(self, x, lengths):
        keep = torch.ones(x.shape[0], x.shape[1], dtype=torch.bool)
        keep = keep.masked_fill(torch.arange(x.shape[1]) >= lengths[:, None], False)
        return x.masked_fill(~keep[..., None], 0.0), keep.masked_fill(lengths[:, None] > 100, True)


def test_masked_fill_of_a_bool_tensor(tmp_path):
    x, lengths = torch.randn(2, 5, 3), torch.tensor([2, 5])
    path = aotc.export(BoolMask(), (x, lengths), tmp_path / "b").path
    add_to_bundle(path)
    for got, want in zip(aotc.load(path, backend="onnx")(x, lengths), BoolMask()(x, lengths)):
        assert torch.equal(got, want)


def test_onnx_that_disagrees_with_the_graph_is_refused(tmp_path):
    # ONNX's training-mode BatchNormalization does not compute torch's batch statistics.
    result = invoke("export", SAMPLES / "mlp.py", "--joint", "--onnx", "-o", tmp_path / "m")
    assert result.exit_code == 1
    assert "Error: onnxruntime does not reproduce the joint graph: mutated:bn.running_mean" in result.stderr


def test_graph_that_draws_random_numbers_is_refused_every_time(tmp_path):
    """Comparing one onnxruntime run with torch can match by chance (a dropout mask of a
    few elements); a graph with random ops is refused from its operators, not its values."""
    import torch.nn.functional as F

    class AlwaysDropout(torch.nn.Module):
        def forward(self, x):
            return F.dropout(x, 0.5) + x  # F.dropout drops in eval too (training=True)

    aotc.export(AlwaysDropout(), (torch.ones(2),), tmp_path / "b")
    with pytest.raises(aotc.AotcError, match=r"draws random numbers \(aten\.\w+"):
        add_to_bundle(tmp_path / "b")
    assert not (tmp_path / "b" / "onnx").exists()


# An LSTM word language model (tied embedding/decoder weights). Its bundle graph runs each
# LSTM layer as oneDNN's aten.mkldnn_rnn_layer, which ONNX cannot express: the exporter
# puts aten.lstm back for ONNX and still checks the result against the bundle graph. The
# export needs only the bundle, so `aotc compile BUNDLE --onnx` takes the same path.


@pytest.fixture(scope="session")
def word_lm_bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("onnx-lstm") / "word_lm"
    result = invoke("export", SAMPLES / "word_lm.py", "--onnx", "-o", out)
    assert result.exit_code == 0, result.stderr
    return out


def _max_abs_error(got, expected) -> float:
    pairs = list(zip(pytree.tree_leaves(got), pytree.tree_leaves(expected), strict=True))
    return max((a - b.detach()).abs().max().item() for a, b in pairs)


def test_lstm_word_lm_matches_eager(word_lm_bundle):
    m = aotc.load(word_lm_bundle, backend="onnx")
    spec = fresh_sample("word_lm")
    eager = spec.module.eval()
    g = torch.Generator().manual_seed(1)
    other_batch = (torch.randint(0, 50, (5, 3), generator=g), torch.randn(2, 3, 16, generator=g) * 0.1,
                   torch.randn(2, 3, 16, generator=g) * 0.1)
    for args in (spec.args, other_batch):  # batch is a dynamic axis
        with torch.no_grad():
            expected = eager(*clone_inputs(args))
        got = m(*clone_inputs(args))
        for o, e in zip(pytree.tree_leaves(got), pytree.tree_leaves(expected), strict=True):
            torch.testing.assert_close(o, e, **TOL)


def test_lstm_onnx_model_has_no_mkldnn_op(word_lm_bundle):
    import onnx

    model = onnx.load(str(word_lm_bundle / "onnx" / "inference.onnx"))
    ops = [(n.domain, n.op_type) for n in model.graph.node]
    assert [op for op in ops if "mkldnn" in f"{op[0]}.{op[1]}".lower()] == []
    assert ops.count(("", "LSTM")) == 2  # one ONNX LSTM per layer
    signature = aotc.Bundle.open(word_lm_bundle).signature.graphs["inference"]
    assert [i.name for i in model.graph.input] == onnx_names([s.name for s in signature.inputs])


def test_lstm_variants_reverse_batch_first_no_bias(tmp_path):
    """The reverse layer of a bidirectional LSTM, batch_first, no biases: each is another
    form of the oneDNN layer to put back."""

    class BiLSTM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(4, 6, bias=False, batch_first=True, bidirectional=True)

        def forward(self, x, h0, c0):
            return self.lstm(x, (h0, c0))

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = BiLSTM().eval()
    g = torch.Generator().manual_seed(0)
    x, h0, c0 = torch.randn(2, 3, 4, generator=g), torch.randn(2, 2, 6, generator=g), torch.randn(2, 2, 6, generator=g)
    bundle = aotc.export(model, (x, h0, c0), tmp_path / "lstm")
    add_to_bundle(bundle.path)
    got = aotc.load(bundle.path, backend="onnx")(x, h0, c0)
    with torch.no_grad():
        expected = model(x, h0, c0)
    assert _max_abs_error(got, expected) < 1e-5


def test_bfloat16_inputs_buffers_and_outputs(tmp_path):
    """numpy has no bfloat16, so such graphs feed onnxruntime OrtValues (RecurrentGemma keeps a
    bfloat16 buffer; feeding it as a numpy array crashed with a TypeError)."""
    class Mixed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("scale", torch.linspace(0.5, 2.0, 4, dtype=torch.bfloat16))

        def forward(self, x):  # onnxruntime's CPU kernels compute little in bfloat16: it casts
            y = x.float() * self.scale.float()
            return y.bfloat16(), y.sum(-1)

    model = Mixed().eval()
    x = torch.randn(3, 4).bfloat16()
    path = aotc.export(model, (x,), tmp_path / "b").path
    add_to_bundle(path)
    got, want = aotc.load(path, backend="onnx")(x), model(x)
    assert [g.dtype for g in got] == [torch.bfloat16, torch.float32]
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


class InvertedMask(torch.nn.Module):
    def forward(self, mask):  # ProphetNet: (1.0 - mask) * min, of an int64 mask; and int - int stays int
        return (1.0 - mask) * torch.finfo(torch.float32).min, 1 - mask


def test_rsub_of_an_integer_tensor_takes_torchs_dtype(tmp_path):
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    path = aotc.export(InvertedMask(), (mask,), tmp_path / "b").path
    ops = {str(n.target) for n in aotc.Bundle.open(path).exported_program("inference").graph.nodes}
    assert "aten.rsub.Scalar" in ops
    add_to_bundle(path)
    for got, want in zip(aotc.load(path, backend="onnx")(mask), InvertedMask()(mask)):
        assert got.dtype == want.dtype and torch.equal(got, want)


class GroupedQueryAttention(torch.nn.Module):
    def forward(self, q, k, v):  # Sapiens2's: 4 query heads share 2 key/value heads
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)


def test_grouped_query_attention_shares_key_heads_as_torch_does(tmp_path):
    q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
    batch = torch.export.Dim("batch", min=1, max=8)
    path = aotc.export(GroupedQueryAttention(), (q, k, v), tmp_path / "b",
                       dynamic_shapes=({0: batch}, {0: batch}, {0: batch})).path
    ops = {str(n.target) for n in aotc.Bundle.open(path).exported_program("inference").graph.nodes}
    assert "aten._scaled_dot_product_flash_attention_for_cpu.default" in ops
    add_to_bundle(path)
    loaded = aotc.load(path, backend="onnx")
    for n in (2, 3):
        args = (torch.randn(n, 4, 5, 8), torch.randn(n, 2, 5, 8), torch.randn(n, 2, 5, 8))
        torch.testing.assert_close(loaded(*args), GroupedQueryAttention()(*args))
