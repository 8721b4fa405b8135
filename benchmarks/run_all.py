"""`make bench`: every sample model through `aotc bench`, plus compile cost; writes
benchmarks/results/{results.json, report.md, report.png}.

For each model: an inference bundle with aoti and onnx artifacts is timed against eager
and torch.compile (inference calls), a forward+backward bundle for training steps, and
the compile cost of `aotc compile --no-cache` is set beside torch's own
`aoti_compile_and_package` on the same ExportedProgram, each in a fresh process with an
empty inductor cache.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
MODELS = ["mlp", "cnn", "tiny_transformer", "inplace", "classifier"]

TORCH_AOTI = r"""
import sys, time, torch
from aotc.bundle import Bundle, load_exported_program
from aotc.graph_inputs import example_graph_inputs
from aotc.exporters.aoti import COMPILE_OPTIONS
bundle = Bundle.open(sys.argv[1])
ep = load_exported_program(bundle.graph_path("inference"))
ep.example_inputs = (tuple(example_graph_inputs(bundle, "inference", torch.device("cpu"))), {})
t = time.perf_counter()
torch._inductor.aoti_compile_and_package(ep, package_path=sys.argv[2], inductor_configs=dict(COMPILE_OPTIONS))
print(time.perf_counter() - t)
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


def main() -> None:
    sys.path.insert(0, str(ROOT))
    import aotc
    from aotc.bench import as_json, bench
    from aotc.exporters.onnx import add_to_bundle
    from aotc.model_file import load_model

    RESULTS.mkdir(parents=True, exist_ok=True)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in MODELS:
            print(f"== {name}", flush=True)
            source = str(ROOT / "sample_models" / f"{name}.py")
            spec = load_model(source)
            infer = aotc.export(spec.module, (spec.args, spec.kwargs), Path(tmp) / name, name=name, source=source,
                                dynamic_shapes=spec.dynamic_shapes)
            cost = compile_cost(infer.path)
            add_to_bundle(infer.path)
            train = aotc.export(load_model(source).module, (spec.args, spec.kwargs), Path(tmp) / f"{name}-fb",
                                graphs=("forward", "backward"), name=name, source=source,
                                dynamic_shapes=spec.dynamic_shapes)
            aotc.compile(train.path)
            results[name] = {
                "inference": as_json(bench(infer.path, iters=200, warmup=20, model=source, on_variant=lambda v: print("  ", v))),
                "training": as_json(bench(train.path, iters=50, warmup=5, train=True, model=source,
                                          on_variant=lambda v: print("   train", v))),
                "compile": cost,
            }
    (RESULTS / "results.json").write_text(json.dumps(results, indent=2))
    (RESULTS / "report.md").write_text(report_md(results))
    report_png(results, RESULTS / "report.png")
    print(f"wrote {RESULTS}/results.json, report.md, report.png")


def report_md(results: dict) -> str:
    lines = ["# aotc benchmarks", "", "One run, this machine, 1 thread per variant; each variant in a fresh process.", ""]
    for name, r in results.items():
        lines += [f"## {name}", "", "| variant | cold start s | median µs | p90 µs | peak MiB | vs eager | vs torch.compile |",
                  "|---|---|---|---|---|---|---|"]
        for part in ("inference", "training"):
            rows = r[part]
            eager = next(x for x in rows if x["variant"] == "eager")
            tc = next(x for x in rows if x["variant"] == "torch.compile (warm cache)")
            for x in rows:
                label = x["variant"] + (" (train step)" if part == "training" else "")
                lines.append(f"| {label} | {x['cold_start_s']:.2f} | {x['median_us']:.1f} | {x['p90_us']:.1f} | "
                             f"{x['peak_memory_mib']:.0f} | {eager['median_us'] / x['median_us']:.2f}x | "
                             f"{tc['median_us'] / x['median_us']:.2f}x |")
        c = r["compile"]
        lines += ["", f"Compile (inference, empty caches): `aotc compile` {c['aotc_compile_s']:.1f} s (whole process); "
                      f"torch `aoti_compile_and_package` {c['torch_aoti_compile_s']:.1f} s "
                      f"({c['torch_aoti_process_s']:.1f} s whole process).", ""]
    return "\n".join(lines) + "\n"


def report_png(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(results)
    fig, axes = plt.subplots(1, 2, figsize=(14, 5.5))
    variants = [v["variant"] for v in results[models[0]]["inference"]]
    width = 0.8 / len(variants)
    for i, variant in enumerate(variants):
        rel, cold = [], []
        for m in models:
            rows = {x["variant"]: x for x in results[m]["inference"]}
            rel.append(rows[variant]["median_us"] / rows["eager"]["median_us"] if variant in rows else 0)
            cold.append(rows[variant]["cold_start_s"] if variant in rows else 0)
        xs = [j + i * width for j in range(len(models))]
        axes[0].bar(xs, rel, width, label=variant)
        axes[1].bar(xs, cold, width, label=variant)
    for ax in axes:
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(models))], models, rotation=15)
        ax.set_xlabel("sample model")
    axes[0].axhline(1.0, color="gray", linewidth=0.8)
    axes[0].set_ylabel("steady-state latency / eager (lower is faster)")
    axes[0].set_title("Inference latency relative to eager")
    axes[1].set_yscale("log")
    axes[1].set_ylabel("process start to first output, s (log)")
    axes[1].set_title("Cold start")
    axes[1].legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
