"""gpu-bench.md: the rows as tables per dtype, the geomeans the benchmark exists for, the
method and the published figures that give them context.

Every ratio is a speedup: the other variant's milliseconds over aotc's (> 1: aotc is
faster). Rows with a WRONG variant are left out of every geomean.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from benchmarks.gpu.plan import NOT_RUN_BUDGET
from benchmarks.gpu.variants import INFERENCE, LABELS, TRAINING

RAW_TARGET = 0.98  # aotc's wrapper stack must cost under 2% over the bare runner


@dataclass(frozen=True)
class Geomean:
    """aotc's speedup over `other` (other's ms / aotc's ms), geometric mean over `rows`."""

    title: str
    aotc: str
    other: str
    value: float | None
    rows: int
    note: str = ""


def geomean(values: list[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _ms(row: dict, name: str) -> float | None:
    v = row["variants"].get(name)
    return v["median_ms"] if v and v["status"] == "ok" else None


def ratio_geomean(rows: list[dict], aotc: str, other: str, title: str, note: str = "",
                  where=lambda row: True) -> Geomean:
    ratios = [_ms(r, other) / _ms(r, aotc) for r in rows
              if r["status"] == "ok" and where(r) and _ms(r, other) and _ms(r, aotc)]
    return Geomean(title, aotc, other, geomean(ratios), len(ratios), note)


def geomeans(rows: list[dict]) -> list[Geomean]:
    """The comparisons the benchmark reports, over the rows that have both variants."""
    inference = [r for r in rows if r["kind"] == "inference"]
    training = [r for r in rows if r["kind"] == "train"]
    return [
        ratio_geomean(inference, "aotc", "compile", "aotc vs torch.compile (default)"),
        ratio_geomean(inference, "aotc", "raw", "aotc vs the raw AOTInductor runner",
                      f"target: within 2% (>= {RAW_TARGET:.2f})"),
        ratio_geomean(inference, "aotc-cuda-graphs", "compile-reduce-overhead",
                      "aotc + CUDA graphs vs torch.compile reduce-overhead", "batch-1 rows",
                      where=lambda r: r["batch"] == 1),
        ratio_geomean(training, "aotc-fused", "eager-fused", "aotc fused step vs eager fused optimizer"),
        ratio_geomean(training, "aotc-fused", "compile-step", "aotc fused step vs torch.compile whole step"),
        ratio_geomean(training, "aotc-fused-cuda-graphs", "eager-fused",
                      "aotc fused step + CUDA graphs vs eager fused optimizer"),
    ]


def raw_within_target(rows: list[dict]) -> bool | None:
    g = next(g for g in geomeans(rows) if (g.aotc, g.other) == ("aotc", "raw"))
    return None if g.value is None else g.value >= RAW_TARGET


def _cell(row: dict, name: str) -> str:
    v = row["variants"].get(name)
    if v is None:
        return "-"
    if v["status"] == "ok" and v["median_ms"] is not None:
        eager = _ms(row, row_baseline(row))
        speed = f" {eager / v['median_ms']:.2f}x" if eager and name != row_baseline(row) else ""
        return f"{v['median_ms']:.3f} ({v['low_ms']:.3f}-{v['high_ms']:.3f}){speed}"
    if v["status"] == "not run":
        return "over budget" if v["reason"] == NOT_RUN_BUDGET else (
            "dropped (budget)" if "dropped" in v["reason"] else "not run")
    return v["status"]  # WRONG, failed


def row_baseline(row: dict) -> str:
    return "eager" if row["kind"] == "inference" else "eager-fused"


def _fastest(row: dict) -> str:
    if not row.get("fastest"):
        return row["status"] if row["status"] != "ok" else "-"
    tie = f" (tie with {row['runner_up']})" if row["tie"] else ""
    return f"{row['fastest']}{tie}"


def inference_tables(rows: list[dict], names: list[str]) -> list[str]:
    lines = []
    for dtype in dict.fromkeys(r["dtype"] for r in rows if r["kind"] == "inference"):
        at = [r for r in rows if r["kind"] == "inference" and r["dtype"] == dtype]
        lines += [f"## Inference, {dtype}", "",
                  "ms per call: median over rounds (min-max of the rounds), then the speedup over eager.", "",
                  "| model | batch | " + " | ".join(LABELS[n] for n in names) + " | fastest |",
                  "|---|---|" + "---|" * len(names) + "---|"]
        lines += [f"| {r['model']} | {r['batch']} | " + " | ".join(_cell(r, n) for n in names)
                  + f" | {_fastest(r)} |" for r in at]
        lines += ["", *_geomean_lines(geomeans(at)[:3]), ""]
    return lines


def training_table(rows: list[dict], names: list[str]) -> list[str]:
    trained = [r for r in rows if r["kind"] == "train"]
    if not trained:
        return []
    lines = ["## Training steps, fp32", "",
             "ms per step (forward, loss, backward, optimizer step, zero_grad), then the speedup over eager "
             "with torch.optim's fused kernels.", "",
             "| model | batch | optimizer | " + " | ".join(LABELS[n] for n in names) + " | fastest |",
             "|---|---|---|" + "---|" * len(names) + "---|"]
    lines += [f"| {r['model']} | {r['batch']} | {r['optimizer']} | " + " | ".join(_cell(r, n) for n in names)
              + f" | {_fastest(r)} |" for r in trained]
    return lines + ["", *_geomean_lines(geomeans(trained)[3:]), ""]


def _geomean_lines(gs: list[Geomean]) -> list[str]:
    out = []
    for g in gs:
        value = f"{g.value:.3f}x over {g.rows} row(s)" if g.value is not None else "no rows with both"
        out.append(f"- {g.title}: {value}" + (f" ({g.note})" if g.note else ""))
    return out


def compile_table(rows: list[dict]) -> list[str]:
    lines = ["## Compile and load seconds", "",
             "aotc: `aotc.export` (on the CPU model) and `aotc.compile` (for the device), counted in the first "
             "row that used the bundle; torch.compile: the first call's seconds (compile included); "
             "aotc load: `aotc.load`.", "",
             "| row | aotc export | aotc compile | aotc load | torch.compile | max-autotune | reduce-overhead | "
             "compiled step |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["status"] == "not run":
            continue
        b = r.get("bundle") or {}
        fresh = b.get("built_in_this_row")
        export = f"{b['export_s']:.1f}" if fresh else ("reused" if "export_s" in b else "-")
        compiled = (f"{b['compile_s']:.1f}" + (" (cached)" if b.get("compile_cached") else "")) if fresh else export

        def secs(name: str, key: str = "first_call_s") -> str:
            v = r["variants"].get(name) or {}
            return f"{v[key]:.1f}" if v.get(key) is not None else "-"

        aotc_load = secs("aotc-fused" if r["kind"] == "train" else "aotc", "setup_s")
        label = f"{r['model']} {r['dtype']} b{r['batch']}" + (f" {r['optimizer']}" if r["optimizer"] else "")
        lines.append(f"| {label} | {export} | {compiled} | {aotc_load} | {secs('compile')} | "
                     f"{secs('compile-max-autotune')} | {secs('compile-reduce-overhead')} | {secs('compile-step')} |")
    return lines + [""]


def problems(rows: list[dict]) -> list[str]:
    lines = []
    for r in rows:
        label = f"{r['model']} {r['dtype']} batch {r['batch']}" + (f" train {r['optimizer']}" if r["optimizer"] else "")
        if r["status"] == "not run":
            lines.append(f"- {label}: {r['reason']}")
            continue
        if r["status"] == "failed":
            lines.append(f"- {label}: FAILED: {r['reason']}")
        if r.get("note"):
            lines.append(f"- {label}: {r['note']}")
        if (r.get("bundle") or {}).get("error"):
            lines.append(f"- {label}: aotc bundle: {r['bundle']['error']}")
        for v in r["variants"].values():
            if v["status"] in ("WRONG", "failed"):
                lines.append(f"- {label}: {LABELS[v['name']]}: **{v['status']}**: {v['reason']}")
            elif v["status"] == "not run" and v["reason"] != NOT_RUN_BUDGET:
                lines.append(f"- {label}: {LABELS[v['name']]}: {v['reason']}")
    return (["## Problems, notes and rows not run", "", *lines, ""]) if lines else []


def method(run: dict) -> list[str]:
    t = run["timing"]
    return [
        "## Method", "",
        f"- Every variant of a row runs in one process on the same inputs (on the device), after "
        f"`{t['warmup']}` warm-up calls. Inference runs under `torch.no_grad()`.",
        "- Checked before timing: an inference variant's output (every tensor leaf of its output pytree) "
        "against eager's on the same inputs; per dtype, rtol and atol (scaled by the output's largest "
        f"magnitude, at least 1): {t['tolerances']}. A training variant takes {t['check_steps']} steps from "
        "the same weights, and its parameter updates must match eager's fused optimizer's the same way. A "
        "variant that differs is WRONG: named above, not timed, its row left out of every geomean, and the "
        "run exits 1.",
        f"- Timed interleaved: {t['rounds']} rounds; in each round every checked variant runs a batch of "
        "back-to-back calls (sized so the slowest variant's batch takes about "
        f"{t['round_s'] * 1e3:.0f} ms), the order rotated each round. "
        + ("A round is timed with CUDA events from an idle GPU, so launch overhead counts. " if run["device"] == "cuda"
           else "A round is timed with perf_counter. ")
        + "A cell is the median over rounds of ms per call, with the min-max of the rounds; a row's fastest "
        "variant ties with the next when their ranges overlap.",
        "- aotc: the model exported on CPU with a dynamic batch dimension (one bundle for every batch; a model "
        "that refuses it gets one bundle per batch), compiled with `aotc.compile(devices=(device,))`, loaded "
        "with `aotc.load(backend=\"aoti\")`. The raw runner calls the same AOTInductor package's `run` on the "
        "same inputs, flattened once: aotc's wrapper cost is the difference.",
        "- torch.compile modes compile the eager model; their first call's seconds are their compile "
        "seconds. `max-autotune-no-cudagraphs` is dropped first when the budget is short.",
        "- Training: `aotc.export(graphs=(\"joint\",), optimizer=...)` puts forward, loss, backward and the "
        "optimizer's update in one graph (`train_step`); eager uses torch.optim with `fused=True`; "
        "torch.compile compiles the whole step function (forward, loss, backward, `optimizer.step()`, "
        "`zero_grad()`) with torch.optim's default implementation. The models stay in the mode their file "
        "builds them in (eval for the suite models: no dropout, so every variant computes the same steps).",
        f"- Budget: {run['budget']['seconds']:.0f} s of wall clock for the whole run; rows run in the plan's "
        "order (every model's first row before any model's second), and when the budget is spent the rest "
        "are listed as not run.",
        "",
    ]


SOURCES = [
    "## Sources", "",
    "Published figures for context; other models, GPUs, batch sizes and precisions, so not directly comparable "
    "with the rows above.", "",
    "- PyTorch's torch.compile documentation of the 2.0 era (docs/source/compile/index.rst in pytorch/pytorch, "
    "e.g. https://android.googlesource.com/platform/external/pytorch/+/d1fedad080/docs/source/compile/index.rst): "
    "inductor \"with benchmarks showing 30% to 2x speedups and 10% memory compression\" on real-world models, "
    "training and inference, citing the TorchInductor performance thread "
    "https://github.com/pytorch/pytorch/issues/93794 (geomean tables per suite: TorchBench, Hugging Face, TIMM).",
    "- The TorchInductor performance dashboard, https://hud.pytorch.org/benchmark/compilers: daily speedups of "
    "torch.compile over eager on those suites (pytorch/pytorch's benchmarks/dynamo/README.md introduced it as "
    "run on an NVIDIA A100 GPU). The announcement of torch.compile: https://pytorch.org/get-started/pytorch-2.0/.",
    "- Hugging Face's torch.compile inference benchmark, A100, ms per call without -> with torch.compile: "
    "ViT at batch 1 9.325 -> 7.584, ResNet at batch 1 6.531 -> 4.124; with mode reduce-overhead, ResNet "
    "unbatched 7.435 -> 3.801 (https://huggingface.co/datasets/stevhliu/compile-benchmarks: a100-benchmarks.csv, "
    "reduce-overhead.csv).",
    "",
]


def render(run: dict) -> str:
    """The whole report from the run's JSON."""
    rows = run["rows"]
    env = run["environment"]
    names = [n for n in INFERENCE if n in run["options"]["variants"]]
    train_names = [n for n in TRAINING if n in run["options"]["train_variants"]]
    done = sum(1 for r in rows if r["status"] != "not run")
    wrong = [r for r in rows if r["status"] == "WRONG"]
    lines = [
        "# aotc GPU benchmark", "",
        f"{env['device_name']} · torch {env['torch']} · CUDA {env['cuda'] or '-'} · Python {env['python']} · "
        f"{env['date']}", "",
        f"{done} of {len(rows)} rows run in {run['budget']['spent_s']:.0f} s (budget {run['budget']['seconds']:.0f} s)"
        + (f"; **{len(wrong)} WRONG**" if wrong else "; every checked output matched eager's") + ".", "",
        "## Summary", "",
        "Speedup of aotc over each baseline (the baseline's ms / aotc's; > 1: aotc faster), geometric mean over "
        "the rows that have both.", "",
        "| comparison | geomean | rows | note |", "|---|---|---|---|",
    ]
    for g in geomeans(rows):
        value = f"{g.value:.3f}x" if g.value is not None else "-"
        lines.append(f"| {g.title} | {value} | {g.rows} | {g.note} |")
    within = raw_within_target(rows)
    if within is False:
        lines += ["", "**aotc is more than 2% slower than the raw runner.**"]
    lines.append("")
    lines += problems(rows) + inference_tables(rows, names) + training_table(rows, train_names)
    lines += compile_table(rows) + method(run) + SOURCES
    return "\n".join(lines)
