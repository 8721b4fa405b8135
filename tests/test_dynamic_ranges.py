"""Dynamic dims torch.export cannot keep over the declared range: narrowed to the range it
proved (recorded, said, and checked at run time), or refused with the dim and the line
of the model that fixed its size (aotc.capture.ranges)."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from torch.export import Dim

import aotc
from aotc.cli.main import cli
from aotc.errors import DynamicShapeError, InputError, RangeNarrowedWarning
from conftest import fresh_sample

SAMPLES = Path(__file__).resolve().parent.parent / "sample_models"


class FixedWidth(torch.nn.Module):
    def forward(self, x):
        return x.view(x.shape[0], 4, 3).sum(-1)


class LastThree(torch.nn.Module):
    """Keeps the last three steps: the graph's output is 3 wide only from seq 3 up."""

    def forward(self, x):
        return x[:, -3:] * 2


class Pairs(torch.nn.Module):
    def forward(self, x):
        return x.view(x.shape[0], -1, 2).sum(-1)


def _line(fn, text: str) -> str:
    """`file.py:N` of the line of `fn` holding `text`."""
    lines, start = inspect.getsourcelines(fn)
    offset = next(i for i, line in enumerate(lines) if text in line)
    return f"{Path(inspect.getsourcefile(fn)).name}:{start + offset}"


def test_fixed_dim_is_refused_with_dim_and_line(tmp_path):
    with pytest.raises(DynamicShapeError) as info:
        aotc.export(FixedWidth(), (torch.randn(2, 12),), tmp_path / "b",
                    dynamic_shapes={"x": {1: Dim("feat", min=2, max=64)}})
    message = str(info.value)
    assert "input 'x' dim 1 is declared dynamic (Dim 'feat', 2..64)" in message
    assert "only works when it is 12" in message
    assert "feat == 12 at " in message and _line(FixedWidth.forward, "view(") in message
    assert "--static x:1" in message and "dynamic_shapes=" in message
    assert not (tmp_path / "b").exists()


def test_cli_refuses_fixed_dim_and_static_flag_exports(tmp_path):
    model = tmp_path / "fixed.py"
    model.write_text(
        "import torch\n"
        "from torch.export import Dim\n\n\n"
        "class Fixed(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x.view(x.shape[0], 4, 3).sum(-1)\n\n\n"
        "def build_model():\n    return Fixed()\n\n\n"
        "def example_inputs():\n    return (torch.randn(2, 12),)\n\n\n"
        "dynamic_shapes = {'x': {0: Dim('batch', max=8), 1: Dim('feat', min=2, max=64)}}\n"
    )
    result = CliRunner().invoke(cli, ["export", str(model), "-o", str(tmp_path / "b")])
    assert result.exit_code == 1, result.output
    error = next(line for line in result.output.splitlines() if line.startswith("Error: "))
    assert error.startswith("Error: input 'x' dim 1 is declared dynamic (Dim 'feat', 2..64), but torch.export "
                            "proved Fixed only works when it is 12: the guard ")
    assert "fixed.py:7 fixes it" in error and "pass --static x:1 to aotc export" in error

    result = CliRunner().invoke(cli, ["export", str(model), "-o", str(tmp_path / "b"), "--static", "x:2"])
    assert result.exit_code == 2 and "input 'x' has no dynamic dim 2 to make static" in result.output

    result = CliRunner().invoke(cli, ["export", str(model), "-o", str(tmp_path / "b"), "--static", "x:1", "--json"])
    assert result.exit_code == 0, result.output
    dims = json.loads((tmp_path / "b" / "metadata.json").read_text())["user_inputs"][0]["dynamic_dims"]
    assert list(dims) == ["0"]


def test_narrower_range_is_adopted_recorded_and_enforced(tmp_path):
    with pytest.warns(RangeNarrowedWarning) as warned:
        bundle = aotc.export(LastThree(), (torch.randn(2, 8),), tmp_path / "b",
                             dynamic_shapes={"x": {1: Dim("seq", min=1, max=32)}})
    (line,) = [str(w.message) for w in warned if w.category is RangeNarrowedWarning]
    assert line.startswith("input 'x' dim 1 (Dim 'seq'): declared 1..32, exported for 4..32: ")
    assert _line(LastThree.forward, "-3:") in line
    dim = bundle.metadata.user_inputs[0].dynamic_dims["1"]
    assert (dim.min, dim.max, dim.declared_min, dim.declared_max) == (4, 32, 1, None)
    assert _line(LastThree.forward, "-3:") in dim.narrowed_by

    loaded = aotc.load(tmp_path / "b")
    for seq in (4, 9, 32):
        x = torch.randn(2, seq)
        torch.testing.assert_close(loaded(x), LastThree()(x))
    with pytest.raises(InputError, match=r"outside the exported range \[4, 32\]"):
        loaded(torch.randn(2, 2))


def test_tied_dims_become_one_within_both_declared_ranges(tmp_path):
    def add(x, y):
        return x + y

    with pytest.warns(RangeNarrowedWarning):
        bundle = aotc.export(add, (torch.randn(2, 12), torch.randn(2, 12)), tmp_path / "b",
                             dynamic_shapes={"x": {1: Dim("a", min=2, max=64)}, "y": {1: Dim("b", min=4, max=32)}})
    a, b = (m.dynamic_dims["1"] for m in bundle.metadata.user_inputs)
    assert a.symbol == b.symbol and (a.min, a.max) == (b.min, b.max) == (4, 32)
    assert (a.declared_min, a.declared_max) == (2, 64)


def test_divisible_dim_becomes_a_relation(tmp_path):
    with pytest.warns(RangeNarrowedWarning, match=r"\(= 2\*_feat\)"):
        bundle = aotc.export(Pairs(), (torch.randn(2, 12),), tmp_path / "b",
                             dynamic_shapes={"x": {1: Dim("feat", min=2, max=64)}})
    dim = bundle.metadata.user_inputs[0].dynamic_dims["1"]
    assert dim.symbol.startswith("2*") and (dim.min, dim.max) == (2, 64)
    loaded = aotc.load(tmp_path / "b")
    for width in (2, 10, 64):
        x = torch.randn(2, width)
        torch.testing.assert_close(loaded(x), Pairs()(x))


@pytest.mark.slow
def test_mistral_default_config_dynamic_batch_and_seq_matches_eager(tmp_path):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.MistralConfig(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64,
    )
    model = transformers.MistralForCausalLM(config).eval()
    ids, mask = torch.randint(3, 96, (2, 7)), torch.ones(2, 7, dtype=torch.long)
    batch, seq = Dim("batch", min=1, max=16), Dim("seq", min=1, max=48)
    bundle = aotc.export(model, ((), {"input_ids": ids, "attention_mask": mask}), tmp_path / "b",
                         dynamic_shapes={"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}})
    dims = bundle.metadata.user_inputs[0].dynamic_dims
    assert [(d.min, d.max) for d in dims.values()] == [(1, 16), (1, 48)]

    loaded = aotc.load(tmp_path / "b")
    for size in [(1, 1), (1, 5), (3, 9), (2, 7), (4, 48)]:
        x = torch.randint(3, 96, size)
        m = torch.ones(size, dtype=torch.long)
        with torch.no_grad():
            expected = model(input_ids=x, attention_mask=m).logits
        torch.testing.assert_close(loaded(input_ids=x, attention_mask=m).logits, expected, msg=lambda s: f"{size}: {s}")


@pytest.mark.slow
def test_gpt_blocks_joint_narrows_seq_and_trains_as_eager(tmp_path):
    out = tmp_path / "joint"
    result = CliRunner().invoke(cli, ["export", str(SAMPLES / "gpt_blocks.py"), "--joint", "-o", str(out), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    (note,) = summary["narrowed"]
    assert "declared 1..64, exported for 3..64" in note and "gpt_blocks.py:" in note
    dim = aotc.Bundle.open(out).metadata.user_inputs[0].dynamic_dims["1"]
    assert (dim.min, dim.max, dim.declared_min) == (3, 64, 1)

    spec = fresh_sample("gpt_blocks")
    eager = spec.module.train()
    loaded = aotc.load(out, mode="train")
    for batch, seq in [(2, 16), (3, 5)]:
        ids = torch.randint(0, 128, (batch, seq), generator=torch.Generator().manual_seed(seq))
        eager.zero_grad()
        expected = spec.loss(eager(ids), ids)
        expected.backward()
        loaded.zero_grad()
        loss = loaded.train_step(ids)
        torch.testing.assert_close(loss.detach(), expected.detach(), rtol=1e-4, atol=1e-5)
        grads = dict(loaded.named_parameters())
        for name, p in eager.named_parameters():
            torch.testing.assert_close(grads[name].grad, p.grad, rtol=1e-4, atol=1e-5, msg=lambda s: f"{name}: {s}")
