"""aotc verify: passes on every sample bundle, fails loudly on tampering and drift."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET

import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import MODE_FLAGS, SAMPLE_NAMES, invoke, rehash


@pytest.mark.parametrize("name", SAMPLE_NAMES)
@pytest.mark.parametrize("mode", list(MODE_FLAGS))
def test_verify_passes_for_every_sample(sample_bundles, name, mode):
    path, summary = sample_bundles[(name, mode)]
    result = invoke("verify", path, "--json", "--samples", "1", "--model", summary["source"])
    assert result.exit_code == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["ok"]
    artifacts = {c["artifact"] for c in report["checks"]}
    assert "fx" in artifacts and "fx vs eager (sample 1)" in artifacts
    names = {c["name"] for c in report["checks"] if c["artifact"] == "fx"}
    assert any(n.startswith("output[") for n in names) or "loss" in names
    if mode != "inference":
        assert any(n.startswith("grad:") for n in names)


def test_verify_covers_compiled_artifacts(sample_bundles, compiled):
    report = json.loads(invoke("verify", sample_bundles[("mlp", "autograd")][0], "--json", "--samples", "0").stdout)
    assert report["ok"]
    assert {c["artifact"] for c in report["checks"]} == {"fx", "aoti/cpu"}


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_verify_from_golden_references_alone(sample_bundles):
    result = invoke("verify", sample_bundles[("inplace", "inference")][0], "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] and {c["artifact"] for c in report["checks"]} == {"fx"}
    assert report["skipped"] == ["random samples: no model file given (model=, --model)"]


def test_verify_never_runs_the_model_file_a_bundle_names(sample_bundles, tmp_path):
    # A bundle whose manifest points at a .py inside itself: verify must not import it.
    path = _copy(sample_bundles[("mlp", "inference")][0], tmp_path / "b")
    marker = tmp_path / "ran"
    (path / "evil.py").write_text(f"open({str(marker)!r}, 'w').close()\n")

    def edit(manifest):
        manifest["model"]["source"] = str(path / "evil.py")
        manifest["files"].append({"path": "evil.py", "kind": "other", "size": 0, "sha256": ""})

    rehash(path, edit)
    result = invoke("verify", path, "--json")
    assert result.exit_code == 0, result.stderr
    assert not marker.exists()
    assert json.loads(result.stdout)["skipped"] == ["random samples: no model file given (model=, --model)"]


def test_verify_no_run_checks_integrity_and_loads_nothing(sample_bundles, compiled, tmp_path, monkeypatch):
    import aotc

    def forbidden(*args, **kwargs):
        raise AssertionError("--no-run must not load a bundle")

    monkeypatch.setattr(aotc, "load", forbidden)
    monkeypatch.setattr(torch.export, "load", forbidden)
    path = sample_bundles[("mlp", "autograd")][0]
    result = invoke("verify", path, "--no-run", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] and report["checks"] == []
    assert "compiled/cpu/forward.pt2" in report["integrity"] and "graphs/backward.pt2" in report["integrity"]


def test_verify_fails_on_perturbed_weights(sample_bundles, tmp_path):
    path = _copy(sample_bundles[("mlp", "inference")][0], tmp_path / "b")
    weights = load_file(str(path / "weights.safetensors"))
    weights["fc2.bias"] = weights["fc2.bias"] + 0.01
    save_file(weights, str(path / "weights.safetensors"))
    rehash(path)  # only the numbers differ
    junit = tmp_path / "report.xml"
    result = invoke("verify", path, "--junit", junit)
    assert result.exit_code == 1
    table = result.stderr
    assert "output[0]" in table and "FAIL" in table and "failed" in table.splitlines()[-1]
    suite = ET.parse(junit).getroot()
    failed = [c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None]
    assert "output[0]" in failed and int(suite.get("failures")) == len(failed)
    assert int(suite.get("tests")) > len(failed)  # buffers and inputs still pass


def test_verify_refuses_a_tampered_file_before_running(sample_bundles, tmp_path):
    path = _copy(sample_bundles[("mlp", "inference")][0], tmp_path / "b")
    data = bytearray((path / "reference.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (path / "reference.safetensors").write_bytes(bytes(data))
    result = invoke("verify", path)
    assert result.exit_code == 1
    assert result.stderr.strip().startswith(f"Error: Bundle '{path}': reference.safetensors has sha256 ")


def test_golden_references_match_eager(sample_bundles):
    """The references are what eager computes (a sanity check of the reference itself)."""
    import copy

    from conftest import clone_inputs, fresh_sample

    path = sample_bundles[("classifier", "inference")][0]
    golden = load_file(str(path / "reference.safetensors"))
    spec = fresh_sample("classifier")
    (x,) = clone_inputs(spec.args)
    torch.testing.assert_close(golden["input:x"], x)
    torch.testing.assert_close(golden["output[0]"], copy.deepcopy(spec.module).eval()(x).detach())


def test_verify_reports_progress_per_artifact(sample_bundles):
    import aotc

    path, summary = sample_bundles[("inplace", "inference")]  # never compiled by other tests: fx only
    seen = []
    report = aotc.verify(path, model=summary["source"], samples=2, on_artifact=lambda *a: seen.append(a))
    labels = [label for label, _, _ in seen]
    # each artifact on the golden inputs, then on each random sample, then "done"
    assert labels == ["fx", "fx vs eager (sample 1)", "fx vs eager (sample 2)", "done"]
    assert [done for _, done, _ in seen] == [0, 1, 2, 3] and {total for _, _, total in seen} == {3}
    assert {c.artifact for c in report.checks} == set(labels[:-1])


class _FullyMaskedRow(torch.nn.Module):
    """Attention over a row whose keys are all masked: eager's softmax gives NaN there."""

    def forward(self, q, k, mask):
        return (q @ k.transpose(-1, -2)).masked_fill(mask, float("-inf")).softmax(-1)


def test_a_nan_where_eager_has_nan_is_eager_result(tmp_path):
    import aotc
    from aotc.tools.verify import compare

    q, k = torch.randn(2, 3, 4), torch.randn(2, 5, 4)
    mask = torch.zeros(2, 3, 5, dtype=torch.bool)
    mask[0, 1] = True  # one row with every key masked
    assert _FullyMaskedRow()(q, k, mask).isnan().any()
    aotc.export(_FullyMaskedRow(), (q, k, mask), tmp_path / "b")  # export's own replay compares as verify does
    result = invoke("verify", tmp_path / "b", "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    # NaN on one side only is a difference, whatever the tolerance
    want = torch.tensor([1.0, float("nan"), 3.0])
    for got, passed in ((want.clone(), True), (torch.tensor([1.0, 2.0, 3.0]), False),
                        (torch.tensor([float("nan"), float("nan"), 3.0]), False)):
        [check] = compare("fx", {"output[0]": want}, {"output[0]": got}, {}, (1e-3, 1e-4))
        assert check.passed is passed, got
    assert compare("fx", {"output[0]": want}, {"output[0]": want.clone()}, {}, None)[0].max_abs == 0.0
    # the same infinity is no difference either (inf - inf is NaN); an infinity on one side is
    inf = torch.tensor([1.0, float("inf"), -float("inf")])
    assert compare("fx", {"output[0]": inf}, {"output[0]": inf.clone()}, {}, None)[0].max_abs == 0.0
    [check] = compare("fx", {"output[0]": inf}, {"output[0]": inf.flip(0)}, {}, None)
    assert not check.passed and check.max_abs == float("inf")
