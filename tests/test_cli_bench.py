"""`aotc bench` smoke test (the real benchmarks run in `make bench`, never in tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import invoke


def test_bench_smoke(sample_bundles):
    path, summary = sample_bundles[("classifier", "inference")]
    result = invoke("bench", path, "--iters", "2", "--warmup", "1", "--baselines", "eager", "--model", summary["source"],
                    "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    variants = [r["variant"] for r in report["results"]]
    assert variants == ["aotc fx", "eager"]
    for r in report["results"]:
        assert r["iters"] == 2 and r["cold_start_s"] > 0 and r["median_us"] > 0 and r["peak_memory_mib"] > 0
        assert r["p90_us"] >= r["median_us"]


def test_bench_training_step_smoke(sample_bundles):
    path = sample_bundles[("mlp", "joint")][0]
    result = invoke("bench", path, "--iters", "2", "--warmup", "0", "--baselines", "none", "--train", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["train"] is True


def test_bench_unknown_backend(sample_bundles):
    path = sample_bundles[("classifier", "inference")][0]
    result = invoke("bench", path, "--backend", "onnx", "--baselines", "none")
    assert result.exit_code == 1
    assert result.stderr.strip() == f"Error: Bundle '{path}' has no onnx artifact for cpu; it has fx."


def test_bench_baselines_need_a_model_named_by_the_user(sample_bundles):
    result = invoke("bench", sample_bundles[("classifier", "inference")][0], "--baselines", "eager")
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        "Error: the eager baseline(s) rebuild the model: name its file with --model (model=), or pass "
        "--baselines none to time the bundle alone. aotc never runs a model file a bundle names."
    )


def test_bench_raw_runner_and_failing_baselines(sample_bundles, compiled):
    """The raw AOTInductor runner is timed next to aotc's aoti backend; a baseline that
    fails (here: a model file that does not build) is a row with its error, not an abort."""
    path, summary = sample_bundles[("mlp", "inference")]
    result = invoke("bench", path, "--iters", "3", "--warmup", "1", "--backend", "aoti", "--baselines", "raw",
                    "--repeats", "2", "--json")
    assert result.exit_code == 0, result.stderr
    rows = {r["variant"]: r for r in json.loads(result.stdout)["results"]}
    assert list(rows) == ["aotc aoti/cpu", "aoti raw runner"]
    for r in rows.values():
        assert len(r["runs_median_us"]) == 2 and r["median_us"] > 0 and r["spread"] >= 0
    result = invoke("bench", path, "--iters", "2", "--warmup", "0", "--backend", "aoti", "--baselines", "eager",
                    "--model", "json:loads", "--json")  # json.loads() is no model factory
    assert result.exit_code == 0, result.stderr
    eager = json.loads(result.stdout)["results"][-1]
    assert eager["variant"] == "eager" and eager["median_us"] is None and "failed" in eager["error"]


def test_every_timed_variant_is_checked_against_eager(sample_bundles, compiled):
    """aotc's backends and the raw runner give eager's outputs on the timed inputs; a model
    file whose weights differ from the bundle's makes aotc's rows WRONG: exit 1, no ratios."""
    path, summary = sample_bundles[("mlp", "inference")]
    result = invoke("bench", path, "--iters", "2", "--warmup", "0", "--baselines", "eager,raw", "--model",
                    summary["source"], "--json")
    assert result.exit_code == 0, result.stderr
    rows = {r["variant"]: r for r in json.loads(result.stdout)["results"]}
    assert {v: r["check"] for v, r in rows.items()} == {
        "aotc fx": "pass", "aotc aoti/cpu": "pass", "aoti raw runner": "pass", "eager": "eager"}

    other = Path(path).parent / "mlp_other_weights.py"
    other.write_text(Path(summary["source"]).read_text().replace("seed=0", "seed=1"))
    result = invoke("bench", path, "--iters", "2", "--warmup", "0", "--backend", "fx", "--baselines", "eager",
                    "--model", str(other))
    assert result.exit_code == 1
    assert "aotc fx: WRONG: output[0] max abs" in " ".join(result.stderr.split())
    assert "give other results than eager" in result.stderr


def test_without_eager_the_bundle_reference_is_the_check(sample_bundles):
    path = sample_bundles[("mlp", "joint")][0]
    result = invoke("bench", path, "--iters", "1", "--warmup", "0", "--baselines", "none", "--json")
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)["results"]
    assert rows and all(r["check"] == "pass" for r in rows), rows  # the first step's loss, against export's


DROPOUT_MODEL = '''
import torch
from torch import nn


def build_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.5), nn.Linear(16, 1))


def example_inputs():
    return (torch.randn(4, 8, generator=torch.Generator().manual_seed(1)),)


def loss(outputs, x):
    return outputs.pow(2).mean()
'''

# one training step of each variant as bench's child builds it, under the seed its first call runs at
STEP_LOSSES = '''
import json, sys
import torch
from aotc.tools.bench_child import _model_step
spec = {"bundle": sys.argv[1], "source": sys.argv[2], "device": "cpu", "train": True, "trusted": [],
        "public_keys": [], "threads": 1}
losses = {}
for variant in ("eager", "torch.compile (cold cache)"):
    step = _model_step({**spec, "variant": variant}, torch.device("cpu"))
    torch.manual_seed(0)
    losses[variant] = step().item()
print(json.dumps(losses))
'''


def test_torch_compile_training_baseline_draws_eager_dropout(tmp_path):
    """bench's torch.compile children compile as aotc does, with eager's random kernels: a
    training step's dropout draws eager's mask under eager's seed, so its loss is checked
    against eager's (inductor's own generator made gpt2's and tiny_transformer's rows WRONG).
    A subprocess: the setting is inductor's, for the whole process."""
    model_file = tmp_path / "drop.py"
    model_file.write_text(DROPOUT_MODEL)
    bundle = tmp_path / "b"
    result = invoke("export", model_file, "--autograd", "-o", bundle)
    assert result.exit_code == 0, result.stderr
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))
    proc = subprocess.run([sys.executable, "-c", STEP_LOSSES, str(bundle), str(model_file)], capture_output=True,
                          text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    losses = json.loads(proc.stdout.strip().splitlines()[-1])
    assert losses["torch.compile (cold cache)"] == losses["eager"], losses
