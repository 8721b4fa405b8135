"""`aotc bench --suite`: the suite's models are real model definitions, a run of it times
every variant in fresh processes, and the report's ratios and geomeans are computed from
the medians it measured."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest
import torch

from aotc.errors import AotcError
from aotc.sources.model_file import load_model
from aotc.tools import bench_suite
from conftest import invoke

ROOT = Path(__file__).resolve().parents[1]


def test_the_suite_has_real_models_of_every_family():
    names = [m.name for m in bench_suite.SUITE]
    assert len(names) >= 20 and len(set(names)) == len(names)
    assert {m.family for m in bench_suite.SUITE} == {"text", "vision", "audio", "diffusion", "samples"}
    with pytest.raises(AotcError, match="no model nope"):
        bench_suite.pick(["nope"])
    # two of them, built and called as their users call them
    for name, read in (("distilbert", lambda out: out.last_hidden_state), ("vae_decoder", lambda out: out.sample)):
        spec = load_model(str(bench_suite.pick([name])[0].source))
        with torch.no_grad():
            assert torch.isfinite(read(spec.module(*spec.args, **spec.kwargs))).all()


def test_report_ratios_and_geomeans_come_from_the_medians():
    def row(family, eager, aotc, tc):
        timed = {"eager": {"median_us": eager}, "aotc aoti/cpu": {"median_us": aotc},
                 "torch.compile (warm cache)": {"median_us": tc},
                 "torch.compile (cold cache)": {"median_us": tc, "cold_start_s": 30.0},
                 "aoti raw runner": {"median_us": None, "error": "did not run"}}
        return {"family": family, "inference": {"1": timed}, "train": {},
                "compile": {"compile_s": 20.0, "size_bytes": 2**20}}

    results = {"a": row("text", 100.0, 50.0, 80.0), "b": row("text", 100.0, 200.0, 100.0)}
    g = bench_suite.family_geomeans(results, "1")["text"]
    assert math.isclose(g["aotc aoti/cpu"], 1.0)  # sqrt(2.0 * 0.5)
    assert math.isclose(g["torch.compile (warm cache)"], math.sqrt(1.25))
    md = bench_suite.report_md(results)
    assert "| a | text | 0.10 ms ±0% | 2.00x ±0% | failed | 1.25x ±0% | not run | not run | 1.60x | 20 s | 30 s | 1.0 MiB |" in md
    assert "| text | 2 | 1.00x | - | 1.12x | - | - |" in md
    assert "None was WRONG in this run." in md


def test_a_wrong_variant_counts_in_no_ratio_and_a_close_one_is_a_tie():
    def row(aotc, tc, check="pass", spreads=0.0):
        timed = {"eager": {"median_us": 100.0, "spread": spreads},
                 "aotc aoti/cpu": {"median_us": aotc, "check": check, "spread": spreads},
                 "torch.compile (warm cache)": {"median_us": tc, "check": "pass", "spread": spreads},
                 "torch.compile (cold cache)": {"median_us": tc, "cold_start_s": 30.0}}
        return {"family": "vision", "inference": {"1": timed}, "train": {},
                "compile": {"compile_s": 20.0, "size_bytes": 2**20}}

    results = {"right": row(50.0, 80.0), "wrong": row(10.0, 80.0, check="WRONG: output[0] max abs 0.5"),
               "close": row(50.0, 52.0, spreads=0.10)}
    g = bench_suite.family_geomeans(results, "1")["vision"]
    assert math.isclose(g["aotc aoti/cpu"], 2.0)  # right and close; wrong's 10x is not counted
    md = bench_suite.report_md(results)
    assert "| wrong | vision | 1.00 ms ±0% | WRONG |" in md.replace("0.10 ms", "1.00 ms")
    assert "**1 WRONG:** wrong (1 thread): aotc aoti/cpu: WRONG: output[0] max abs 0.5" in md
    assert "| tie (1.04x, spread 10%) |" in md
    assert bench_suite.wrong_rows(results) == ["wrong (1 thread): aotc aoti/cpu: WRONG: output[0] max abs 0.5"]


@pytest.mark.slow
def test_a_suite_run_times_every_variant(tmp_path):
    result = invoke("bench", "--suite", "--models", "mlp", "--no-train", "--threads", "1", "--iters", "5",
                    "--out", tmp_path, "--json")
    assert result.exit_code == 0, result.stderr
    row = json.loads(result.stdout)["mlp"]
    # its linear layers are too small for prepacking to pay (tests/test_weight_fold.py)
    assert row["compile"]["build"]["compiled/cpu/inference.pt2"]["weights"] == "inputs"
    timed = row["inference"]["1"]
    for variant in bench_suite.INFERENCE:
        assert timed[variant]["median_us"] > 0, variant
    assert "| mlp | samples |" in (tmp_path / "report.md").read_text()
    assert json.loads((tmp_path / "results.json").read_text()).keys() == {"mlp"}


def test_a_run_keeps_the_rows_of_other_thread_counts(tmp_path, monkeypatch):
    def row(threads):  # what run_model measured, in the shape it returns
        timed = {v: {"median_us": 100.0} for v in bench_suite.INFERENCE}
        timed["torch.compile (cold cache)"] = {"median_us": 100.0, "cold_start_s": 9.0}
        return {"family": "samples", "inference": {threads: timed}, "train": {},
                "compile": {"compile_s": 5.0, "size_bytes": 1024}}

    rows = iter([row("1"), row("2")])
    monkeypatch.setattr(bench_suite, "run_model", lambda *args: next(rows))
    bench_suite.run_suite(["mlp"], tmp_path, [1], say=lambda _: None)
    bench_suite.run_suite(["mlp"], tmp_path, [2], say=lambda _: None)
    assert set(json.loads((tmp_path / "results.json").read_text())["mlp"]["inference"]) == {"1", "2"}
    assert "## Inference, 2 threads" in (tmp_path / "report.md").read_text()


def test_a_training_only_run_keeps_the_inference_rows(tmp_path, monkeypatch):
    calls = []

    def run_model(model, workdir, threads, repeats, iters, train, say, inference=True):
        calls.append((model.name, inference))
        timed = {v: {"median_us": 100.0} for v in bench_suite.INFERENCE}
        timed["torch.compile (cold cache)"] = {"median_us": 100.0, "cold_start_s": 9.0}
        step = {"compile": {"compile_s": 7.0}, "threads": 1, "results": {"eager": {"median_us": 200.0},
                                                                          "aotc joint+sgd aoti/cpu": {"median_us": 100.0}}}
        if inference:
            return {"family": "samples", "inference": {"1": timed}, "train": {},
                    "compile": {"compile_s": 5.0, "size_bytes": 1024}}
        return {"family": "samples", "inference": {}, "train": {"joint+sgd": step}}

    monkeypatch.setattr(bench_suite, "run_model", run_model)
    bench_suite.run_suite(["mlp", "classifier"], tmp_path, [1], say=lambda _: None, train=False)
    bench_suite.run_suite(["mlp", "classifier"], tmp_path, [1], say=lambda _: None, inference=False)
    assert calls == [("mlp", True), ("classifier", True), ("mlp", False)]  # classifier has no training rows
    mlp = json.loads((tmp_path / "results.json").read_text())["mlp"]
    assert set(mlp["inference"]) == {"1"} and mlp["compile"]["size_bytes"] == 1024 and "joint+sgd" in mlp["train"]
    report = (tmp_path / "report.md").read_text()
    assert "| mlp | samples | 0.10 ms ±0% |" in report and "| mlp | joint+sgd | 0.20 ms | - | 2.00x ±0% | - | - | 7 s |" in report
    assert "Geomean of aotc's fused step over eager's: 2.00x (1 rows)." in report


def test_each_part_records_the_code_it_ran_on_and_stale_runs_only_the_others(tmp_path, monkeypatch):
    from aotc.tools import bench_provenance

    known = subprocess.run(["git", "cat-file", "-e", "1c099fb^{commit}"], cwd=ROOT, capture_output=True)
    if known.returncode:
        pytest.skip("a clone without the history these commits are in")
    now = "5414fdc"  # its aotc, exporters, cli and sample_models are dd1cc9c's; 1c099fb's ONNX exporter differs
    monkeypatch.setattr(bench_provenance, "current_commit", lambda: now)
    monkeypatch.setattr(bench_suite, "current_commit", lambda: now)
    calls = []

    def run_model(model, *args):
        calls.append(model.name)
        timed = {v: {"median_us": 100.0} for v in bench_suite.INFERENCE}
        timed["torch.compile (cold cache)"] = {"median_us": 100.0, "cold_start_s": 9.0}
        return {"family": "samples", "inference": {"1": timed}, "train": {}, "compile": {"compile_s": 5.0, "size_bytes": 1}}

    monkeypatch.setattr(bench_suite, "run_model", run_model)
    bench_suite.run_suite(["mlp", "classifier", "cnn"], tmp_path, [1], say=lambda _: None, train=False)
    data = json.loads((tmp_path / "results.json").read_text())
    ran = data["mlp"]["ran"]["inference 1"]
    assert ran["commit"] == now and ran["torch"] == torch.__version__ and ran["cpu"]
    data["mlp"]["ran"]["inference 1"]["commit"] = "dd1cc9c"  # other commit, same code
    data["classifier"]["ran"]["inference 1"]["commit"] = "1c099fb"  # other code
    del data["cnn"]["ran"]  # a row from before parts recorded it
    (tmp_path / "results.json").write_text(json.dumps(data))
    calls.clear()
    bench_suite.run_suite(["mlp", "classifier", "cnn"], tmp_path, [1], say=lambda _: None, train=False, stale=True)
    assert calls == ["classifier", "cnn"]
    report = (tmp_path / "report.md").read_text()
    assert f"per aotc commit they ran on: {now} (2), dd1cc9c (1)" in report
    assert f"3 of 3 ran on the code of {now}" in report
    calls.clear()  # a part none of them has: their 2-thread inference
    bench_suite.run_suite(["mlp", "classifier"], tmp_path, [2], say=lambda _: None, train=False, stale=True)
    assert calls == ["mlp", "classifier"]


def test_a_part_timed_on_another_instruction_set_is_stale(monkeypatch):
    """Two hosts named "AMD EPYC" ran the suite, one with AVX-512 and one without, and bert's
    folded package went from 1.26x eager to 0.80x: parts from both are not one run."""
    from aotc.tools import bench_provenance

    monkeypatch.setattr(bench_provenance, "current_commit", lambda: "5414fdc")
    row = {"ran": {"inference 1": {"commit": "5414fdc", "isa": "AVX512"}, "inference 2": {"commit": "5414fdc"}}}
    assert bench_provenance.current(row, ["inference 1"], "5414fdc", here="AVX512")
    assert not bench_provenance.current(row, ["inference 1"], "5414fdc", here="AVX2")
    assert not bench_provenance.current(row, ["inference 2"], "5414fdc", here="AVX512")  # from before parts said
    stamp = bench_provenance.stamp()
    assert stamp["isa"] == torch.backends.cpu.get_cpu_capability()
    other = "AVX2" if stamp["isa"] == "AVX512" else "AVX512"
    row["ran"] = {"inference 1": {**stamp, "isa": other}, "inference 2": stamp}
    row["inference"] = {"1": {}, "2": {}}
    assert f"instruction set {other} (1), {stamp['isa']} (1)" in bench_provenance.provenance({"bert": row})


def test_stale_goes_with_the_suite():
    for args in (["--stale"], ["somewhere", "--stale"]):
        result = invoke("bench", *args)
        assert result.exit_code == 2 and "--stale picks the suite's models to run again" in result.stderr


def test_the_report_names_each_package_whose_weights_were_not_folded_and_why():
    timed = {v: {"median_us": 100.0} for v in bench_suite.INFERENCE}
    timed["torch.compile (cold cache)"] = {"median_us": 100.0, "cold_start_s": 9.0}

    def row(build):
        return {"family": "samples", "inference": {"1": timed}, "train": {},
                "compile": {"compile_s": 5.0, "size_bytes": 1, "build": {"compiled/cpu/inference.pt2": build}}}

    results = {"cnn": row({"weights": "folded"}),
               "mlp": row({"weights": "inputs", "not_folded": "its largest linear layer takes 4,096 multiply-adds"})}
    assert ("Weights: folded into the inference package (constants inductor prepacks) in 1 of 2 models; passed as "
            "inputs in mlp (its largest linear layer takes 4,096 multiply-adds).") in bench_suite.report_md(results)
