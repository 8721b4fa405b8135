"""`aotc compile --freeze`: inference graphs compiled with their weights folded in. A frozen
package gives eager's results, says it is frozen, and the module it backs refuses new
weights with a named error rather than silently ignoring them."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

import aotc
from aotc.errors import AotcError, FrozenWeightsError
from conftest import SAMPLES, fresh_sample, invoke

pytestmark = pytest.mark.slow  # one AOTInductor compile (about 20 s here)


@pytest.fixture(scope="module")
def frozen_mlp(sample_bundles, tmp_path_factory):
    path = tmp_path_factory.mktemp("frozen") / "mlp"
    shutil.copytree(sample_bundles[("mlp", "inference")][0], path)
    result = invoke("compile", path, "--freeze", "--json")
    assert result.exit_code == 0, result.stderr
    return path, json.loads(result.stdout)


def test_frozen_package_matches_eager_at_every_batch_size(frozen_mlp):
    path, summary = frozen_mlp
    build = summary["compiled"]["compiled/cpu/inference.pt2"]["build"]
    assert build["frozen"] == "true"
    loaded = aotc.load(path, backend="aoti")
    eager = fresh_sample("mlp").module.eval()
    # freezing ran (inductor skips it silently under grad mode): every Linear runs on
    # weights prepacked for oneDNN
    linears = sum(isinstance(m, torch.nn.Linear) for m in eager.modules())
    assert int(build["prepacked"]) == linears > 0
    with torch.no_grad():
        for batch in (2, 7, 64):
            x = torch.randn(batch, 16)
            torch.testing.assert_close(loaded(x), eager(x), rtol=1e-4, atol=1e-5)
    report = aotc.verify(path)
    assert report.ok and any(c.artifact == "aoti/cpu (frozen)" for c in report.checks)
    shown = invoke("inspect", path)
    said = " ".join(shown.stderr.split())
    assert "compiled/cpu/inference.pt2: frozen: the weights are folded into the code" in said
    assert f"{linears} calls on oneDNN-prepacked weights" in said


def test_new_weights_are_refused_not_ignored(frozen_mlp):
    path, _ = frozen_mlp
    loaded = aotc.load(path, backend="aoti")
    x = torch.randn(4, 16)
    with pytest.raises(FrozenWeightsError, match=r"load_state_dict\(\) was called.*--freeze"):
        loaded.load_state_dict(fresh_sample("mlp").module.state_dict())
    with torch.no_grad():
        loaded(x)  # untouched weights: runs
        loaded.fc1.weight.mul_(2)
        with pytest.raises(FrozenWeightsError, match="'fc1.weight' was replaced or changed in place"):
            loaded(x)
    replaced = aotc.load(path, backend="aoti")
    replaced.fc2.bias = torch.nn.Parameter(torch.zeros_like(replaced.fc2.bias))
    with torch.no_grad(), pytest.raises(FrozenWeightsError, match="'fc2.bias' was replaced"):
        replaced(x)
    # the fx graph reads the module's weights: there, new weights are simply used
    fx = aotc.load(path, backend="fx")
    fx.load_state_dict(fresh_sample("mlp").module.state_dict())


def test_graph_that_updates_buffers_is_not_frozen(tmp_path):
    # an inference graph captured in train mode updates BatchNorm's running statistics
    result = invoke("export", SAMPLES / "mlp.py", "--train", "-o", tmp_path / "b")
    assert result.exit_code == 0, result.stderr
    with pytest.raises(AotcError, match=r"updates buffers \(bn.running_mean, bn.running_var.*without --freeze"):
        aotc.compile(tmp_path / "b", freeze=True)
