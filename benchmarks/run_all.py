"""`make bench`: every sample model through `aotc bench` with every baseline, plus compile
cost; writes benchmarks/results/{results.json, report.md, report.png}.

For each model and thread count: an inference bundle with aoti and onnx artifacts is
timed against the raw AOTInductor runner, eager, torch.compile (cold and warm inductor
cache) and torch.compile's aot_compile artifact (cold and warm), on inference calls; a
forward+backward bundle the same way on whole training steps, and a joint bundle's
`train_step` (the whole step in one graph) beside them; the inference bundle compiled
with `--freeze` beside torch.compile with freezing; and a joint bundle that carries SGD
with momentum (loss, gradients and update in one graph) against eager's same step. Each variant runs in
`--repeats` fresh processes (the cold-cache ones once); figures are medians, with the
spread. The compile cost of `aotc compile --no-cache` is set beside torch's own
`aoti_compile_and_package` on the same ExportedProgram, each in a fresh process with an
empty inductor cache.

    .venv/bin/python benchmarks/run_all.py [--models mlp gpt_small] [--threads 1 2] [--repeats 3]
    .venv/bin/python benchmarks/run_all.py --report-only      # the report again from results.json

A run adds to results.json (model, threads) by (model, threads), so the report can be
built from runs made one after the other.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import shutil
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
MODELS = ["mlp", "cnn", "tiny_transformer", "inplace", "classifier", "gpt_small", "resnet18"]
RAW = "aoti raw runner"

TORCH_AOTI = r"""
import sys, time, torch
from aotc.bundle import Bundle, load_exported_program
from aotc.exporters.graph_inputs import example_graph_inputs
from aotc.exporters.aoti_cache import compile_options
bundle = Bundle.open(sys.argv[1])
ep = load_exported_program(bundle.graph_path("inference"))
ep.example_inputs = (tuple(example_graph_inputs(bundle, "inference", torch.device("cpu"))), {})
t = time.perf_counter()
torch._inductor.aoti_compile_and_package(ep, package_path=sys.argv[2], inductor_configs=compile_options(torch.device("cpu")))
print(time.perf_counter() - t)
"""

# Cold-start floor of goal 4: a fresh interpreter importing torch and running the model's
# own eager first call (no aotc code but the model-file loader).
EAGER_FLOOR = r"""
import sys, time
t = time.perf_counter()
import torch
torch.set_num_threads(int(sys.argv[2]))
from aotc.sources.model_file import load_model
spec = load_model(sys.argv[1])
with torch.no_grad():
    spec.module.eval()(*spec.args, **spec.kwargs)
print("FIRST", flush=True)
"""


def _fresh_env() -> dict:
    return dict(os.environ, TORCHINDUCTOR_CACHE_DIR=tempfile.mkdtemp(prefix="inductor-"), PYTHONPATH=str(ROOT))


def compile_cost(bundle: Path) -> dict:
    aotc_bin = Path(sys.executable).parent / "aotc"
    t = time.perf_counter()
    subprocess.run([str(aotc_bin), "compile", str(bundle), "--no-cache", "--json"], check=True,
                   capture_output=True, env=_fresh_env())
    aotc_s = time.perf_counter() - t
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", TORCH_AOTI, str(bundle), str(Path(tmp) / "m.pt2")], check=True,
                             capture_output=True, text=True, env=_fresh_env())
        torch_process_s = time.perf_counter() - t
    return {"aotc_compile_s": aotc_s, "torch_aoti_compile_s": float(out.stdout.strip().splitlines()[-1]),
            "torch_aoti_process_s": torch_process_s}


def import_torch_and_eager_first_call(source: str, threads: int, repeats: int) -> float:
    """Median seconds from process start to the model's first eager output."""
    runs = []
    for _ in range(repeats):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", EAGER_FLOOR, source, str(threads)], check=True, capture_output=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
        runs.append(time.perf_counter() - t)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("--threads", nargs="+", type=int, default=[1])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--no-compile-cost", action="store_true", help="skip the aotc vs torch compile-time comparison")
    parser.add_argument("--report-only", action="store_true", help="rebuild report.md and report.png from results.json")
    opts = parser.parse_args()
    if opts.report_only:
        results = json.loads((RESULTS / "results.json").read_text())
        (RESULTS / "report.md").write_text(report_md(results))
        report_png(results, RESULTS / "report.png")
        print(f"wrote {RESULTS}/report.md, report.png")
        return
    sys.path.insert(0, str(ROOT))
    import torch

    import aotc
    from aotc.tools.bench import as_json, bench
    from aotc.errors import AotcError
    from aotc.exporters.onnx import add_to_bundle
    from aotc.sources.model_file import load_model

    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "results.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in opts.models:
            print(f"== {name}", flush=True)
            source = str(ROOT / "sample_models" / f"{name}.py")
            spec = load_model(source)
            infer = aotc.export(spec.module, (spec.args, spec.kwargs), Path(tmp) / name, name=name, source=source,
                                dynamic_shapes=spec.dynamic_shapes)
            cost = None if opts.no_compile_cost else compile_cost(infer.path)
            aotc.compile(infer.path)
            try:
                add_to_bundle(infer.path)
            except AotcError as e:
                print(f"   no onnx: {e}", flush=True)
            train = aotc.export(load_model(source).module, (spec.args, spec.kwargs), Path(tmp) / f"{name}-fb",
                                graphs=("forward", "backward"), name=name, source=source,
                                dynamic_shapes=spec.dynamic_shapes)
            aotc.compile(train.path)
            joint = aotc.export(load_model(source).module, (spec.args, spec.kwargs), Path(tmp) / f"{name}-joint",
                                graphs=("joint",), loss=spec.loss, name=name, source=source,
                                dynamic_shapes=spec.dynamic_shapes)
            aotc.compile(joint.path)
            frozen = Path(tmp) / f"{name}-frozen"  # inference with the weights folded in
            shutil.copytree(Path(tmp) / name, frozen)
            aotc.compile(frozen, freeze=True)
            model = load_model(source).module
            fused = aotc.export(model, (spec.args, spec.kwargs), Path(tmp) / f"{name}-fused", graphs=("joint",),
                                loss=spec.loss, name=name, source=source, dynamic_shapes=spec.dynamic_shapes,
                                optimizer=torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9))
            aotc.compile(fused.path)
            iters = max(20, opts.iters // 10) if name in ("gpt_small", "resnet18") else opts.iters
            for threads in opts.threads:
                def show(v, part="infer"):
                    print(f"   {threads}t {part} {v}", flush=True)

                entry = {
                    "inference": as_json(
                        bench(infer.path, iters=iters, warmup=max(2, iters // 10), model=source,
                              threads=threads, repeats=opts.repeats, on_variant=show)
                        + bench(frozen, iters=iters, warmup=max(2, iters // 10), baselines=("raw",),
                                threads=threads, repeats=opts.repeats, on_variant=show, backends=("aoti",))),
                    # the whole step (SGD with momentum) in one graph, against eager's same step
                    "fused step": as_json(
                        bench(fused.path, iters=max(10, iters // 4), warmup=max(2, iters // 40), train=True,
                              baselines=("eager", "raw"), model=source, threads=threads, repeats=opts.repeats,
                              on_variant=lambda v: show(v, "fused"))),
                    "training": as_json(
                        bench(train.path, iters=max(10, iters // 4), warmup=max(2, iters // 40), train=True,
                              model=source, threads=threads, repeats=opts.repeats, on_variant=lambda v: show(v, "train"))
                        + bench(joint.path, iters=max(10, iters // 4), warmup=max(2, iters // 40), train=True,
                                baselines=(), threads=threads, repeats=opts.repeats,
                                on_variant=lambda v: show(v, "train"))),
                    "eager_floor_s": import_torch_and_eager_first_call(source, threads, opts.repeats),
                }
                if cost is not None:
                    entry["compile"] = cost
                results.setdefault(name, {})[f"threads={threads}"] = entry
                path.write_text(json.dumps(results, indent=2))  # a long run keeps what it measured
    (RESULTS / "report.md").write_text(report_md(results))
    report_png(results, RESULTS / "report.png")
    print(f"wrote {RESULTS}/results.json, report.md, report.png")


def _by_variant(rows: list[dict]) -> dict:
    return {x["variant"]: x for x in rows if x.get("median_us")}


def _ratio(base: dict | None, x: dict) -> str:
    return f"{base['median_us'] / x['median_us']:.2f}x" if base and x.get("median_us") else "-"


def report_md(results: dict) -> str:
    lines = ["# aotc benchmarks", "",
             "This machine; each variant in fresh processes, figures are medians over the runs (spread = "
             "(slowest - fastest) / median of the runs' medians); ratios > 1 mean faster than the column's "
             "baseline. Training rows time a whole step (forward, backward, SGD). The raw runner is the "
             "AOTInductor package's own `run` with no aotc code (training: forward and backward packages "
             "and a foreach SGD update, without the loss function, autograd or buffer updates).", ""]
    for name, per_threads in results.items():
        for threads, r in per_threads.items():
            lines += [f"## {name} ({threads})", "",
                      "| variant | cold start s | median µs | spread | p90 µs | peak MiB | vs eager | "
                      "vs torch.compile | vs raw runner |", "|---|---|---|---|---|---|---|---|---|"]
            for part in ("inference", "training", "fused step"):
                rows = _by_variant(r.get(part, []))
                eager = rows.get("eager")
                # the inference part holds two bundles, each with its raw runner: the unfrozen one
                # is set beside torch.compile, the frozen one beside torch.compile with freezing
                raws = [x for x in r.get(part, []) if x["variant"] == RAW]
                for x in r.get(part, []):
                    label = x["variant"] + {"training": " (train step)", "fused step": " (step + SGD momentum)"}.get(part, "")
                    frozen = part == "inference" and ("frozen" in x["variant"] or (len(raws) > 1 and x is raws[-1]))
                    if frozen and x["variant"] == RAW:
                        label += " (frozen)"
                    own_raw = (raws[-1] if frozen else raws[0]) if raws else None
                    peer = rows.get("torch.compile freezing (warm cache)" if frozen else "torch.compile (warm cache)")
                    if not x.get("median_us"):
                        lines.append(f"| {label} | failed: {x['error']} | | | | | | | |")
                        continue
                    spread = "-" if x.get("spread") is None else f"{100 * x['spread']:.0f}%"
                    lines.append(f"| {label} | {x['cold_start_s']:.2f} | {x['median_us']:.1f} | {spread} | "
                                 f"{x['p90_us']:.1f} | {x['peak_memory_mib']:.0f} | {_ratio(eager, x)} | "
                                 f"{_ratio(peer, x)} | {_ratio(own_raw, x)} |")
            lines += ["", f"Process start to first eager output (`import torch` + the model's first call): "
                          f"{r['eager_floor_s']:.2f} s."]
            c = r.get("compile")
            if c:
                lines += [f"Compile (inference, empty caches): `aotc compile` {c['aotc_compile_s']:.1f} s (whole "
                          f"process); torch `aoti_compile_and_package` {c['torch_aoti_compile_s']:.1f} s "
                          f"({c['torch_aoti_process_s']:.1f} s whole process)."]
            lines.append("")
    return "\n".join(lines) + "\n"


def report_png(results: dict, path: Path) -> None:
    """Per thread count: steady-state latency relative to eager (inference and training
    step) and cold start, every variant of every model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    threads = sorted({t for per in results.values() for t in per})
    fig, axes = plt.subplots(len(threads), 3, figsize=(21, 5.5 * len(threads)), squeeze=False)
    for row, t in zip(axes, threads):
        models = [m for m in results if t in results[m]]
        variants: list[str] = []
        for m in models:
            for part in ("inference", "training"):
                variants += [x["variant"] for x in results[m][t][part] if x["variant"] not in variants]
        width = 0.8 / len(variants)
        colors = plt.get_cmap("tab20")  # more variants than the default cycle's 10 colours
        panels = [("inference", "median_us", "Inference latency / eager (lower is faster)"),
                  ("training", "median_us", "Training step / eager (lower is faster)"),
                  ("inference", "cold_start_s", "Cold start: process start to first output, s (log)")]
        for ax, (part, key, title) in zip(row, panels):
            for i, variant in enumerate(variants):
                values = []
                for m in models:
                    rows = _by_variant(results[m][t][part])
                    x, eager = rows.get(variant), rows.get("eager")
                    if x is None or eager is None:
                        values.append(0)
                    else:
                        values.append(x[key] / eager[key] if key == "median_us" else x[key])
                ax.bar([j + i * width for j in range(len(models))], values, width, label=variant, color=colors(i % 20))
            ax.set_xticks([j + 0.4 - width / 2 for j in range(len(models))], models, rotation=15)
            ax.set_title(f"{title} [{t}]")
            if key == "median_us":
                ax.axhline(1.0, color="gray", linewidth=0.8)
                ax.set_yscale("log")
            else:
                ax.set_yscale("log")
        row[2].legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
