"""Why aotc's text models run faster than torch.compile with freezing (issue 48, part 5).

Both run inductor's code with freezing on, yet the suite's text family read 1.26x eager for
aotc and 1.07x for `torch.compile` with freezing. This compares, for the suite's BERT and
Llama at 1 thread:

- the generated code: each package's GEMM calls by library (MKL's packed sgemm, oneDNN's
  linear and the post-ops fused into it), attention calls and generated kernels, read from
  aotc's package (its wrapper.cpp) and from torch.compile's output code (TORCH_LOGS);
- the time per call of aotc, torch.compile with freezing, and the same with
  `dynamic=True`, in fresh processes that take turns, each checked against eager first;
  for torch.compile, the profiler's share of its time in GEMM calls;
- each distinct linear size of the model, timed alone in both libraries.

    .venv/bin/python benchmarks/text_codegen.py [--models bert,llama] [--rounds 3]

Writes benchmarks/text_codegen.{md,json}. About 5 minutes on 2 cores.
"""

from __future__ import annotations

import collections
import json
import platform
import re
import statistics
import subprocess
import sys
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import suite_variants  # noqa: E402

VARIANTS = ("aotc", "tc freeze", "tc freeze dyn")
GEMM_OPS = r"_mkl_linear|_linear_pointwise|aten::(addmm|mm|bmm)$"  # the profiler's names of GEMM calls

# the calls each package makes, as they are spelled in the two kinds of generated code
GEMM_PATTERNS = {
    "MKL packed sgemm": r"torch\.ops\.mkl\._mkl_linear\.default\(|aoti_torch_cpu__mkl_linear\(",
    "oneDNN linear": r"torch\.ops\.mkldnn\._linear_pointwise\.default\(|aoti_torch_cpu__linear_pointwise\(",
    "oneDNN linear + binary": r"torch\.ops\.mkldnn\._linear_pointwise\.binary\(|aoti_torch_cpu__linear_pointwise_binary\(",
    "aten mm/addmm/bmm": r"extern_kernels\.(?:mm|addmm|bmm)\(|aoti_torch_cpu_(?:mm|addmm|bmm)_out\(",
    "attention (SDPA)": r"_scaled_dot_product_flash_attention_for_cpu(?:\.default)?\(",
}


def code_summary(code: str) -> dict:
    """What one package's generated code calls: GEMM calls by library, the post-op each
    oneDNN linear carries (its attr argument), attention calls and generated kernels."""
    counts = {name: len(re.findall(pattern, code)) for name, pattern in GEMM_PATTERNS.items()}
    post_ops = collections.Counter(re.findall(
        r"(?:_linear_pointwise(?:\.default|\.binary|_binary)?)\([^;\n]*?[\"']([a-z_]+)[\"']", code))
    counts["post-ops"] = dict(sorted(post_ops.items()))
    counts["generated kernels"] = len(set(re.findall(r"\bcpp_fused_\w+_\d+\b", code)))
    return counts


def gemm_sizes(source: str) -> dict[tuple[int, int, int], int]:
    """How many times the model's example call runs an nn.Linear of each size (rows, in, out)."""
    import runpy

    import torch

    spec = runpy.run_path(source)
    model = spec["build_model"]()
    args, kwargs = suite_variants.call_inputs(spec)
    sizes: collections.Counter = collections.Counter()

    def hook(module, inp, _out):
        sizes[(inp[0].numel() // inp[0].shape[-1], module.in_features, module.out_features)] += 1

    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            m.register_forward_hook(hook)
    with torch.no_grad():
        model(*args, **kwargs)
    return {s: n for s, n in sorted(sizes.items()) if s[0] > 8}  # a pooler's 2 rows are not where time goes


def time_gemms(sizes, repeats: int = 30) -> list[dict]:
    """Each size's linear with its weight prepacked by each library (as freezing does), and
    aten's own, interleaved, median ms at 1 thread; outputs checked against aten's first."""
    import torch

    torch.set_num_threads(1)
    rows = []
    for (m, k, n), calls in sizes.items():
        x, w, b = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
        mkl_w = torch.ops.mkl._mkl_reorder_linear_weight(w, m)
        dnn_w = torch.ops.mkldnn._reorder_linear_weight(w, m)
        fns = {"MKL packed": lambda: torch.ops.mkl._mkl_linear(x, mkl_w, w, b, m),
               "oneDNN": lambda: torch.ops.mkldnn._linear_pointwise(x, dnn_w, b, "none", [], ""),
               "aten": lambda: torch.nn.functional.linear(x, w, b)}
        want = fns["aten"]()
        for name, fn in fns.items():
            assert torch.allclose(fn(), want, rtol=1e-3, atol=1e-3), f"{name} differs at {(m, k, n)}"
            for _ in range(3):
                fn()
        times = {name: [] for name in fns}
        for _ in range(repeats):
            for name, fn in fns.items():
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
        med = {name: statistics.median(t) * 1e3 for name, t in times.items()}
        rows.append({"size": [m, k, n], "calls": calls, **{f"{name} ms": round(v, 3) for name, v in med.items()},
                     "MKL / oneDNN": round(med["MKL packed"] / med["oneDNN"], 2)})
    return rows


# ---- the driver --------------------------------------------------------------------------

def output_code(log: Path) -> str:
    """The Python module torch.compile's log says it wrote (its last compile's)."""
    written = re.findall(r"Output code written to: (\S+)", log.read_text())
    if not written:
        raise SystemExit(f"torch.compile's log {log} names no output code")
    return Path(written[-1]).read_text()


def study(name: str, rounds: int, tmp: Path, say) -> dict:
    say(f"{name}: aotc compile")
    bundle = suite_variants.compile_bundle(name, tmp)
    with zipfile.ZipFile(bundle / "compiled" / "cpu" / "inference.pt2") as z:
        code = {"aotc": "\n".join(z.read(n).decode() for n in z.namelist() if n.endswith(".cpp"))}
    runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    for k in range(rounds):  # the variants take turns, a fresh process each
        for variant in VARIANTS:
            say(f"{name}: {variant} (process {k + 1} of {rounds})")
            logs = {} if variant == "aotc" else {"TORCH_LOGS": "output_code",
                                                 "TORCH_LOGS_OUT": str(tmp / f"{name}-{variant.replace(' ', '-')}-{k}.log")}
            # aotc's package calls its GEMMs below the profiler's reach: only torch.compile's is profiled
            runs[variant].append(suite_variants.run(variant, name, bundle, tmp, profile=bool(logs), **logs))
            if logs and k == 0:
                code[variant] = output_code(Path(logs["TORCH_LOGS_OUT"]))
    timed = {v: suite_variants.summary(rs) for v, rs in runs.items()}
    for t in timed.values():
        ops = t.pop("profile") or {}
        t["gemm_share"] = (sum(ms for op, ms in ops.items() if re.search(GEMM_OPS, op)) / sum(ops.values())
                           if ops else None)
    say(f"{name}: GEMM sizes")
    proc = subprocess.run([sys.executable, __file__, "--gemms", str(suite_variants.SUITE / f"{name}.py")],
                          env=suite_variants.env(tmp), capture_output=True, text=True, check=True)
    return {"code": {v: code_summary(c) for v, c in code.items()}, "timed": timed,
            "gemms": json.loads(proc.stdout.strip().splitlines()[-1])}


def report(results: dict, cpu: str) -> str:
    lines = ["# Text models: aotc against torch.compile with freezing", "",
             f"Made by `benchmarks/text_codegen.py` on {cpu}, 1 thread, torch {results['torch']}. "
             "Each variant's first call is checked against eager's output (rtol and atol 1e-3) before it is "
             "timed; times are medians over fresh processes that take turns, ± their spread "
             "((slowest - fastest) / median).", "",
             "Inductor's freezing prepacks each linear's weight (`pack_linear` in "
             "torch/_inductor/fx_passes/mkldnn_fusion.py): for MKL's packed sgemm when it compiles just in time with "
             "static sizes; for oneDNN ahead of time (MKL's packed weights cannot be saved and loaded elsewhere) or "
             "when the rows are symbolic, as with `dynamic=True`. oneDNN's linear also takes a following add, GELU, "
             "SiLU or tanh as a post-op, so fewer generated kernels run.", ""]
    for name, r in results["models"].items():
        lines += [f"## {name}", "", "| variant | ms per call | time / aotc's | check | GEMM share of the profile |",
                  "|---|---|---|---|---|"]
        base = r["timed"]["aotc"]["median_ms"]
        for variant, t in r["timed"].items():
            share = f"{100 * t['gemm_share']:.0f}%" if t["gemm_share"] is not None else "(not profiled)"
            ms = f"{t['median_ms']:.2f} ±{100 * t['spread']:.0f}%" if t["median_ms"] else "-"
            ratio = f"{t['median_ms'] / base:.2f}x" if t["median_ms"] and base else "-"
            lines.append(f"| {variant} | {ms} | {ratio} | {t['check']} | {share} |")
        lines += ["", "What each package's generated code calls:", "",
                  "| | " + " | ".join(r["code"]) + " |", "|---|" + "---|" * len(r["code"])]
        for key in (*GEMM_PATTERNS, "post-ops", "generated kernels"):
            cells = [c[key] if key != "post-ops" else ", ".join(f"{a} {n}" for a, n in c[key].items()) or "-"
                     for c in r["code"].values()]
            lines.append(f"| {key} | " + " | ".join(str(c) for c in cells) + " |")
        lines += ["", "Each distinct linear size (rows, in, out), alone, weights prepacked as freezing does:", "",
                  "| size | calls per model call | MKL packed | oneDNN | aten linear | MKL / oneDNN |",
                  "|---|---|---|---|---|---|"]
        for g in r["gemms"]:
            lines.append(f"| {tuple(g['size'])} | {g['calls']} | {g['MKL packed ms']:.3f} ms | {g['oneDNN ms']:.3f} ms | "
                         f"{g['aten ms']:.3f} ms | {g['MKL / oneDNN']:.2f}x |")
        total = {lib: sum(g["calls"] * g[f"{lib} ms"] for g in r["gemms"]) for lib in ("MKL packed", "oneDNN", "aten")}
        gap = (r["timed"]["tc freeze"]["median_ms"] or 0) - (base or 0)
        lines += [f"| all, per model call | | {total['MKL packed']:.2f} ms | {total['oneDNN']:.2f} ms | "
                  f"{total['aten']:.2f} ms | {total['MKL packed'] / total['oneDNN']:.2f}x |", "",
                  f"From the sizes alone, MKL's packed linears cost {total['MKL packed'] - total['oneDNN']:.2f} ms more "
                  f"per call than oneDNN's; torch.compile with freezing took {gap:.2f} ms more than aotc.", ""]
    return "\n".join(lines)


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "this CPU"


def main() -> None:
    if sys.argv[1:2] == ["--gemms"]:
        print(json.dumps(time_gemms(gemm_sizes(sys.argv[2]))))
        return
    sys.exit(suite_variants.main(__doc__.split("\n\n")[0], "bert,llama",
                                 suite_variants.ROOT / "benchmarks" / "text_codegen", study,
                                 lambda results: report(results, _cpu())))


if __name__ == "__main__":
    main()
