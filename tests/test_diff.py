"""`aotc diff` on real bundles of a small model and its variants: the same model exported
again, a retrained checkpoint, a wider layer, an extra ReLU, a new mutation and output."""

from __future__ import annotations

import copy
import json
import shutil

import pytest
import torch
from torch import nn

import aotc
from aotc.tools.diff import diff_bundles, tensor_change
from conftest import invoke

X = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))


class Net(nn.Module):
    """4 -> hidden -> 2, with a buffer added to the output; each flag is one kind of change."""

    def __init__(self, hidden=8, extra_relu=False, mutate=False, two_outputs=False):
        super().__init__()
        self.a = nn.Linear(4, hidden)
        self.b = nn.Linear(hidden, 2)
        self.register_buffer("steps", torch.zeros(2))
        self.extra_relu, self.mutate, self.two_outputs = extra_relu, mutate, two_outputs

    def forward(self, x):
        if self.mutate:
            self.steps.add_(1)
        h = torch.relu(self.a(x))
        y = self.b(h) + self.steps
        if self.extra_relu:
            y = torch.relu(y)
        return (y, h) if self.two_outputs else y


def _net(seed=0, **flags) -> Net:
    torch.manual_seed(seed)
    return Net(**flags).eval()


def _retrained(model: Net) -> Net:
    """The same model after some more training: every parameter moved by a little noise."""
    new = copy.deepcopy(model)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=g))
    return new


@pytest.fixture(scope="module")
def models() -> dict[str, Net]:
    base = _net()
    return {
        "base": base,
        "same": _net(),
        "retrained": _retrained(base),
        "wider": _net(hidden=16),
        "relu": _net(extra_relu=True),
        "mutating": _net(mutate=True, two_outputs=True),
    }


@pytest.fixture(scope="module")
def bundles(models, tmp_path_factory):
    root = tmp_path_factory.mktemp("diff")
    out = {name: aotc.export(copy.deepcopy(m), (X,), root / name).path for name, m in models.items()}
    out["autograd"] = aotc.export(copy.deepcopy(models["base"]), (X,), root / "autograd",
                                  graphs=("forward", "backward")).path
    return out


def _lines(result, kind: str) -> list[str]:
    """The stderr lines listed under `kind`'s heading."""
    lines = result.stderr.splitlines()
    if kind not in lines:
        return []
    body = lines[lines.index(kind) + 1:]
    return [line.strip() for line in body[: next((i for i, s in enumerate(body) if not s.startswith("  ")), len(body))]]


def test_the_same_model_exported_twice_has_no_changes(bundles):
    result = invoke("diff", bundles["base"], bundles["same"])
    assert result.exit_code == 0, result.stderr
    assert result.stderr.strip() == "no changes"
    assert result.stdout == ""


def test_a_retrained_checkpoint_reports_each_weights_max_abs_change(bundles, models):
    result = invoke("diff", bundles["base"], bundles["retrained"])
    assert result.exit_code == 1
    old, new = models["base"].state_dict(), models["retrained"].state_dict()
    expected = {name: (new[name].double() - old[name].double()).abs().max().item()
                for name in old if not torch.equal(old[name], new[name])}
    assert sorted(expected) == ["a.bias", "a.weight", "b.bias", "b.weight"]  # not the buffer

    diff = diff_bundles(bundles["base"], bundles["retrained"])
    weights = {c.subject: c.max_abs for c in diff.changes if c.kind == "weights"}
    assert weights == expected
    assert {c.kind for c in diff.changes} == {"weights", "files"}  # same graphs, same signature
    assert {c.subject for c in diff.changes if c.kind == "files"} == {"weights.safetensors", "reference.safetensors"}
    assert f"a.weight: max abs change {expected['a.weight']:.6g}" in _lines(result, "weights")
    assert result.stderr.splitlines()[-1] == "6 changes: 4 weights, 2 files"


def test_a_wider_layer_changes_weight_shapes(bundles):
    diff = diff_bundles(bundles["base"], bundles["wider"])
    shapes = {c.subject: (c.old, c.new) for c in diff.changes if c.kind == "weights" and c.max_abs is None}
    assert shapes == {
        "a.weight": ({"shape": [8, 4]}, {"shape": [16, 4]}),
        "a.bias": ({"shape": [8]}, {"shape": [16]}),
        "b.weight": ({"shape": [2, 8]}, {"shape": [2, 16]}),
    }
    assert not [c for c in diff.changes if c.kind in ("signature", "ops")]  # the same program, wider


def test_an_extra_relu_changes_the_op_histogram(bundles):
    result = invoke("diff", bundles["base"], bundles["relu"])
    assert result.exit_code == 1
    assert _lines(result, "ops") == ["inference: aten.relu.default: 1 -> 2"]
    assert _lines(result, "weights") == []

    diff = diff_bundles(bundles["base"], bundles["relu"])
    (relu,) = [c for c in diff.changes if c.kind == "ops"]
    assert (relu.subject, relu.what, relu.old, relu.new) == ("inference: aten.relu.default", "changed", 1, 2)


def test_fail_on_weights_ignores_an_ops_only_change(bundles):
    result = invoke("diff", bundles["base"], bundles["relu"], "--fail-on", "weights")
    assert result.exit_code == 0, result.stderr
    assert "ops (not in --fail-on)" in result.stderr.splitlines()  # still shown
    assert invoke("diff", bundles["base"], bundles["retrained"], "--fail-on", "signature,weights").exit_code == 1


def test_a_new_mutation_and_output_change_the_signature(bundles):
    diff = diff_bundles(bundles["base"], bundles["mutating"])
    signature = {c.subject: c for c in diff.changes if c.kind == "signature"}
    mutation = signature["inference: mutation of steps"]
    assert (mutation.what, mutation.new["mutates_data"], mutation.new["mutation_type"]) == (
        "added", True, "MUTATED_OUT_GRAPH")
    added = signature["inference: output output[1]"]
    assert (added.what, added.new["role"], added.new["shape"]) == ("added", "user_output", [3, 8])
    assert signature["number of user outputs"].old == 1 and signature["number of user outputs"].new == 2
    result = invoke("diff", bundles["base"], bundles["mutating"], "--fail-on", "signature")
    assert result.exit_code == 1
    assert "inference: mutation of steps: added (mutation_type MUTATED_OUT_GRAPH, mutates_data True, " \
           "mutates_metadata False)" in _lines(result, "signature")


def test_json_is_all_that_is_on_stdout(bundles):
    result = invoke("diff", bundles["base"], bundles["relu"], "--json")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["counts"]["ops"] == 1 and data["ran"] is False
    assert {"kind": "ops", "subject": "inference: aten.relu.default", "what": "changed", "old": 1, "new": 2,
            "max_abs": None, "note": ""} in data["changes"]
    assert "changes:" not in result.stdout  # the human summary stays off stdout (and --json prints none)


def test_run_compares_outputs_like_eager(bundles, models):
    result = invoke("diff", bundles["base"], bundles["retrained"], "--run", "--json")
    assert result.exit_code == 1, result.stderr
    (output,) = [c for c in json.loads(result.stdout)["changes"] if c["kind"] == "outputs"]
    with torch.no_grad():
        eager = (models["retrained"](X).double() - models["base"](X).double()).abs().max().item()
    assert output["subject"] == "output[0]"
    assert output["max_abs"] == pytest.approx(eager, rel=1e-5, abs=1e-7)

    same = diff_bundles(bundles["base"], bundles["same"], run=True)
    assert same.changes == () and same.skipped == () and same.ran


def test_run_skips_a_bundle_without_an_inference_graph(bundles):
    diff = diff_bundles(bundles["base"], bundles["autograd"], run=True)
    assert not [c for c in diff.changes if c.kind == "outputs"]
    (skipped,) = diff.skipped
    assert skipped == (f"outputs: the new bundle '{bundles['autograd']}' has no eval-mode inference graph (it has "
                       "forward, backward, captured in train mode); outputs are compared for inference bundles only.")
    graphs = {c.subject: c.what for c in diff.changes if c.kind == "signature" and c.subject.startswith("graph ")}
    assert graphs == {"graph inference": "removed", "graph forward": "added", "graph backward": "added"}


def test_a_missing_bundle_is_trouble_not_a_change(bundles, tmp_path):
    result = invoke("diff", bundles["base"], tmp_path / "nowhere")
    assert result.exit_code == 2
    assert result.stderr == f"Error: cannot read the new bundle: Bundle '{tmp_path / 'nowhere'}' not found: " \
                            "no such directory.\n"


def test_a_corrupt_bundle_is_trouble_naming_it(bundles, tmp_path):
    damaged = tmp_path / "damaged"
    shutil.copytree(bundles["base"], damaged)
    data = bytearray((damaged / "weights.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (damaged / "weights.safetensors").write_bytes(bytes(data))
    result = invoke("diff", damaged, bundles["base"], "--json")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith(f"Error: cannot read the old bundle: Bundle '{damaged}': weights.safetensors "
                                    "has sha256 ")
    assert "Traceback" not in result.stderr


def test_a_regional_bundle_is_refused(bundles, tmp_path):
    regional = tmp_path / "regional"
    regional.mkdir()
    (regional / "regions.json").write_text("{}")
    result = invoke("diff", regional, bundles["base"])
    assert result.exit_code == 2
    assert f"The old bundle '{regional}' is a regional bundle" in result.stderr


def test_an_unknown_kind_for_fail_on_is_a_usage_error(bundles):
    result = invoke("diff", bundles["base"], bundles["same"], "--fail-on", "weights,colour")
    assert result.exit_code == 2
    assert "colour is not a kind of change" in result.stderr


def test_a_nan_never_hides_in_a_small_max_abs():
    old = torch.tensor([1.0, 2.0, float("nan"), 4.0])
    change = tensor_change("weights", "w", old, torch.tensor([1.0, 2.5, 3.0, 4.0]))
    assert change.max_abs == 0.5 and change.note == "1 values became or stopped being NaN/inf"
    assert tensor_change("weights", "w", old, old.clone()) is None  # NaN where it was: the same bytes
    ints = tensor_change("weights", "n", torch.tensor([3, 7]), torch.tensor([3, -2]))
    assert ints.max_abs == 9.0


def test_a_record_on_one_side_only_is_no_change(bundles, tmp_path):
    recorded = tmp_path / "recorded"
    shutil.copytree(bundles["same"], recorded)
    result = invoke("verify", recorded, "--record")
    assert result.exit_code == 0, result.stderr
    result = invoke("diff", bundles["base"], recorded)
    assert result.exit_code == 0, result.stderr
    assert "no changes" in result.stderr
