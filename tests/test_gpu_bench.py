"""benchmarks/gpu/bench.py's logic on CPU: the GPU benchmark checks every variant against
eager before timing it, records rows the budget leaves out, and exits 1 on a WRONG row.
(The GPU run itself is `make gpu-check` on a lent machine.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.gpu import bench, measure, variants  # noqa: E402

BENCH = ROOT / "benchmarks" / "gpu" / "bench.py"
QUICK = ["--device", "cpu", "--models", "mlp", "--quick", "--no-train"]


def rows_of(out: Path) -> list[dict]:
    return json.loads((out / "gpu-bench.json").read_text())["rows"]


@pytest.mark.slow
def test_cpu_smoke_checks_and_times_every_variant(tmp_path):
    proc = subprocess.run([sys.executable, str(BENCH), "--out", str(tmp_path), *QUICK, "--variants", "eager", "aotc",
                           "raw"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = rows_of(tmp_path)
    assert [(r["model"], r["batch"], r["status"]) for r in rows] == [("mlp", 1, "ok"), ("mlp", 16, "ok")]
    for row in rows:
        assert set(row["variants"]) == {"eager", "aotc", "raw"}
        for v in row["variants"].values():
            assert v["status"] == "ok", v
            assert v["check"]["passed"] and v["check"]["max_abs"] <= v["check"]["atol"]
            assert len(v["samples_ms"]) == 3 and v["median_ms"] > 0
    assert rows[0]["bundle"]["dynamic_batch"] and rows[0]["bundle"]["built_in_this_row"]
    assert not rows[1]["bundle"]["built_in_this_row"]  # batch 16 reuses the dynamic bundle
    report = (tmp_path / "gpu-bench.md").read_text()
    assert "aotc vs the raw AOTInductor runner" in report and "## Sources" in report


def test_a_wrong_variant_makes_a_wrong_row_and_exit_1(tmp_path, monkeypatch):
    real = variants.build

    def off_by_one_percent(name, row):  # "compile" returns eager's output, 1% off
        if name != "compile":
            return real(name, row)
        eager = real("eager", row)
        return variants.Variant(lambda: eager.call() * 1.01)

    monkeypatch.setattr(variants, "build", off_by_one_percent)
    code = bench.main(["--out", str(tmp_path), *QUICK, "--variants", "eager", "compile", "--batches", "4"])
    assert code == 1
    [row] = rows_of(tmp_path)
    assert row["status"] == "WRONG" and row["reason"] == "outputs differ from eager's: compile"
    assert row["variants"]["compile"]["status"] == "WRONG" and row["variants"]["compile"]["median_ms"] is None
    assert row["variants"]["eager"]["status"] == "ok"
    assert "**WRONG**" in (tmp_path / "gpu-bench.md").read_text()


def test_rows_past_the_budget_are_recorded_not_dropped(tmp_path):
    assert bench.main(["--out", str(tmp_path), *QUICK, "--variants", "eager", "--budget-s", "0"]) == 0
    rows = rows_of(tmp_path)
    assert [(r["batch"], r["status"], r["reason"]) for r in rows] == [
        (1, "not run", "not run: over the time budget"), (16, "not run", "not run: over the time budget")]


def test_judge_holds_each_dtype_to_its_tolerance():
    want = torch.linspace(-3, 3, 100)
    assert measure.judge([want], [want + 2e-3]).passed  # within fp32's atol, scaled by the largest value (3)
    assert not measure.judge([want], [want + 2e-2]).passed
    assert measure.judge([want.bfloat16()], [(want + 5e-2).bfloat16()]).passed
    assert not measure.judge([torch.arange(4)], [torch.arange(4) + 1]).passed  # integers exactly
    assert not measure.judge([want], [want, want]).passed
    assert measure.judge([want], [want[:50]]).note.startswith("leaf 0 is torch.float32 (50,)")


def test_outside_tolerance_passes_only_as_close_to_float64_as_eager():
    exact = torch.linspace(0, 1, 1000, dtype=torch.float64)
    eager = (exact + 0.05).float()  # eager's own error, as bf16 rounding after every op leaves
    closer = (exact + 0.01).float()  # a fused kernel that kept more precision
    assert not measure.judge([eager], [closer]).passed
    assert measure.judge_against_truth([eager], [closer], [exact]).passed
    assert not measure.judge_against_truth([eager], [(exact + 0.3).float()], [exact]).passed


def test_the_gpu_report_says_which_figures_a_run_met(tmp_path):
    """gpu_report.py on a run folder: pytest's JUnit XML of the CUDA suite (one C++ test
    failed) and a benchmark whose rows give aotc 1.2x torch.compile and 0.9x the raw runner."""
    from benchmarks.gpu import gpu_report

    (tmp_path / "cuda-suite.xml").write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.test_cuda" name="test_a" time="1.0"/>'
        '<testcase classname="tests.test_cuda" name="test_the_cpp_runtime_serves_bitwise_as_python[mlp-plain]">'
        '<failure message="assert False&#10;more">x</failure></testcase>'
        '<testcase classname="tests.test_cuda" name="test_b"><skipped message="needs a GPU"/></testcase>'
        '</testsuite></testsuites>')

    def ok(ms):
        return {"status": "ok", "median_ms": ms}

    rows = [{"kind": "inference", "status": "ok", "batch": 1,
             "variants": {"aotc": ok(1.0), "compile": ok(1.2), "raw": ok(0.9)}}]
    (tmp_path / "gpu-bench.json").write_text(json.dumps({"rows": rows, "environment": {"device": "test"}}))
    assert gpu_report.main(str(tmp_path)) == 0
    figures = {f["figure"]: f for f in json.loads((tmp_path / "gpu-report.json").read_text())["figures"]}
    assert figures["every CUDA test passes"]["value"] == "1 passed, 1 failed, 1 skipped"
    assert figures["every CUDA test passes"]["met"] is False
    assert figures["C++ equals Python bitwise on the GPU (serving and training)"]["met"] is False
    assert figures["aotc >= torch.compile default (inference geomean)"]["met"] is True
    assert figures["aotc within 2% of the raw runner (geomean >= 0.98)"]["met"] is False
    assert figures["fused step >= eager fused torch.optim"]["met"] is None
    report = (tmp_path / "gpu-report.md").read_text()
    assert "- **failed** `test_cuda::test_the_cpp_runtime_serves_bitwise_as_python[mlp-plain]`: assert False" in report


def test_a_suite_cut_at_its_time_limit_has_not_passed():
    from benchmarks.gpu.gpu_report import figures

    tests = {"test_cuda::test_a": {"outcome": "passed", "message": "", "seconds": 1.0}}
    assert figures(tests, [], suite_exit=0)[0]["met"] is True
    cut = figures(tests, [], suite_exit=2)[0]
    assert cut["met"] is False and cut["value"].endswith("interrupted at its time limit")


def test_a_killed_suite_without_its_xml_is_read_from_its_verbose_log(tmp_path):
    """Killed at its time limit, pytest writes no JUnit XML (an H200 run did so): the tests
    that ended before it are read from pytest -v's log, and the cut still fails the figure."""
    from benchmarks.gpu import gpu_report

    (tmp_path / "cuda-suite.log").write_text(
        "tests/test_cuda.py::test_every_sample[mlp-inference] PASSED      [  3%]\n"
        "tests/test_cuda.py::test_every_sample[mlp-autograd] FAILED       [  6%]\n"
        "tests/test_compile.py::test_cuda_compile_and_run SKIPPED (needs a CUDA device) [  9%]\n"
        "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!! KeyboardInterrupt !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n")
    (tmp_path / "cuda-suite.exit").write_text("137\n")
    assert gpu_report.main(str(tmp_path)) == 0
    suite = json.loads((tmp_path / "gpu-report.json").read_text())["suite"]
    assert {name: t["outcome"] for name, t in suite.items()} == {
        "test_cuda::test_every_sample[mlp-inference]": "passed",
        "test_cuda::test_every_sample[mlp-autograd]": "failed",
        "test_compile::test_cuda_compile_and_run": "skipped",
    }
    first = json.loads((tmp_path / "gpu-report.json").read_text())["figures"][0]
    assert first["met"] is False and first["value"].endswith("interrupted at its time limit")
