"""gpu-report.md and gpu-report.json: the prepared GPU run's one report (benchmarks/gpu/check.sh).

From the run's folder: steps.log (what ran, how long), cuda-suite.xml (pytest's JUnit
report of the CUDA suite), gpu-bench.json and gpu-bench.md (the benchmark). The report
says, for each of issue 46's figures, whether this run met it:
- every CUDA test passes;
- the C++ runtime equals Python bitwise on the GPU, serving and training;
- aotc's inference geomean >= torch.compile's default, and within 2% of the raw runner;
- with CUDA graphs, aotc >= torch.compile reduce-overhead on the batch-1 rows;
- the fused-step geomean >= eager's fused torch.optim step.
"""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script
    sys.path.insert(0, str(ROOT))

from benchmarks.gpu.report import RAW_TARGET, geomeans  # noqa: E402


def suite(xml: Path) -> dict:
    """Counts, and each test's outcome, from pytest's JUnit XML."""
    if not xml.is_file():
        return {"ran": False, "tests": {}}
    tests = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = f"{case.get('classname', '').split('.')[-1]}::{case.get('name')}"
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            found = case.find(tag)
            if found is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                message = (found.get("message") or "").strip().splitlines()[0][:300] if found.get("message") else ""
        tests[name] = {"outcome": outcome, "message": message, "seconds": float(case.get("time") or 0)}
    return {"ran": True, "tests": tests}


# pytest -v's line for each test: "tests/test_cuda.py::test_x[mlp] PASSED [ 3%]"
_VERBOSE = re.compile(r"^(?:tests/)?(\w+)\.py::(\S+) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b", re.M)


def suite_from_log(log: Path) -> dict:
    """Each test's outcome from pytest -v's log: the JUnit XML is not written when the suite
    is killed at its time limit, and the tests that finished before it still count."""
    if not log.is_file():
        return {"ran": False, "tests": {}}
    outcomes = {"PASSED": "passed", "FAILED": "failed", "SKIPPED": "skipped", "ERROR": "error",
                "XFAIL": "skipped", "XPASS": "failed"}
    tests = {f"{module}::{name}": {"outcome": outcomes[word], "message": "", "seconds": 0.0}
             for module, name, word in _VERBOSE.findall(log.read_text(errors="replace"))}
    return {"ran": bool(tests), "tests": tests}


def figures(tests: dict, rows: list[dict], suite_exit: int | None = None) -> list[dict]:
    """Each figure the issue sets: its value in this run and whether it is met (None: not
    measured). `suite_exit` 2: pytest was interrupted at its time limit, so not every test ran
    (124, 137: timeout stopped or killed it)."""
    outcomes = [t["outcome"] for t in tests.values()]
    interrupted = suite_exit in (2, 124, 137)
    cpp = {n: t["outcome"] for n, t in tests.items() if "cpp_runtime" in n}
    by_pair = {(g.aotc, g.other): g for g in geomeans(rows)}

    def at_least(key: tuple[str, str], bar: float) -> dict:
        g = by_pair.get(key)
        value = g.value if g else None
        return {"value": value, "rows": g.rows if g else 0, "met": None if value is None else value >= bar}

    return [
        {"figure": "every CUDA test passes", "value": f"{outcomes.count('passed')} passed, "
         f"{outcomes.count('failed') + outcomes.count('error')} failed, {outcomes.count('skipped')} skipped"
         + ("; interrupted at its time limit" if interrupted else ""),
         "met": (not interrupted and outcomes.count("passed") == len(outcomes)) if outcomes else None},
        {"figure": "C++ equals Python bitwise on the GPU (serving and training)",
         "value": (f"{list(cpp.values()).count('passed')} of {len(cpp)} tests passed; not passed: "
                   + (", ".join(n.split("::")[1] for n, o in sorted(cpp.items()) if o != "passed") or "none"))
         if cpp else "not run",
         "met": (all(o == "passed" for o in cpp.values()) if cpp else None)},
        {"figure": "aotc >= torch.compile default (inference geomean)", **at_least(("aotc", "compile"), 1.0)},
        {"figure": f"aotc within 2% of the raw runner (geomean >= {RAW_TARGET})", **at_least(("aotc", "raw"), RAW_TARGET)},
        {"figure": "aotc + CUDA graphs >= reduce-overhead (batch 1)", **at_least(("aotc-cuda-graphs", "compile-reduce-overhead"), 1.0)},
        {"figure": "fused step >= eager fused torch.optim", **at_least(("aotc-fused", "eager-fused"), 1.0)},
    ]


def _mark(met) -> str:
    return {True: "met", False: "NOT met", None: "not measured"}[met]


def render(run: Path, tests: dict, figs: list[dict]) -> str:
    steps = (run / "steps.log").read_text() if (run / "steps.log").is_file() else "(no steps.log)\n"
    lines = ["# aotc on the GPU: the prepared run (make gpu-check)", "", "```", steps.rstrip(), "```", "",
             "## The figures", "", "| figure | this run | |", "| --- | --- | --- |"]
    for f in figs:
        value = (f"{f['value']:.3f} over {f['rows']} rows" if isinstance(f["value"], float)
                 else "no rows" if f["value"] is None else str(f["value"]))
        lines.append(f"| {f['figure']} | {value} | {_mark(f['met'])} |")
    bad = {n: t for n, t in tests.items() if t["outcome"] in ("failed", "error")}
    lines += ["", f"## The CUDA suite: {len(tests)} tests", ""]
    lines += [f"- **{t['outcome']}** `{n}`: {t['message']}" for n, t in sorted(bad.items())] or ["- no failures"]
    skipped = {n: t for n, t in tests.items() if t["outcome"] == "skipped"}
    lines += [f"- skipped `{n}`: {t['message']}" for n, t in sorted(skipped.items())]
    bench = run / "gpu-bench.md"
    lines += ["", bench.read_text().replace("\n# ", "\n## ") if bench.is_file() else "## The benchmark\n\nnot run"]
    return "\n".join(lines) + "\n"


def main(folder: str) -> int:
    run = Path(folder)
    tests = suite(run / "cuda-suite.xml")["tests"] or suite_from_log(run / "cuda-suite.log")["tests"]
    bench = json.loads((run / "gpu-bench.json").read_text()) if (run / "gpu-bench.json").is_file() else {}
    exit_file = run / "cuda-suite.exit"
    suite_exit = int(exit_file.read_text()) if exit_file.is_file() else None
    figs = figures(tests, bench.get("rows", []), suite_exit)
    (run / "gpu-report.md").write_text(render(run, tests, figs))
    (run / "gpu-report.json").write_text(json.dumps(
        {"figures": figs, "suite": tests, "environment": bench.get("environment")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
