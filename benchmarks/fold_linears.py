"""A folded package (linears prepacked for oneDNN, aotc compile's default) against the same
graph compiled `--no-fold` (weights as inputs, linears on aten's GEMM), on the suite's text,
vision and audio models, at 1 and 2 threads: the measurement behind folding linear layers on
every CPU (exporters/aoti_frozen.py, benchmarks/linear_prepack.md for the calls alone). The
`fused` variant is folded with the pointwise ops after its linears fused into them as oneDNN
post-ops whatever the CPU (linear_post_ops_pay forced true): the measurement behind leaving
them to generated kernels on a CPU without AVX-512 (benchmarks/linear_post_ops.md).

Each model's bundle (from `aotc bench --suite`'s bundles folder) is copied and compiled
each way. Every figure is one fresh process's median of --iters calls; the processes take
turns (eager, unfolded, folded, then again), and each variant's first output is compared with
eager's before it is timed.

    .venv/bin/python benchmarks/fold_linears.py [--models gpt2,bert] [--rounds 3] [--variants eager,fused,folded]

Writes benchmarks/fold_linears.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(__file__).resolve().parent / "fold_linears.md"
MODELS = "bert,gpt2,llama,vit,swin,whisper_encoder"
VARIANTS = ("eager", "no-fold", "fused", "folded")
FLAGS = {"no-fold": ["--no-fold"], "fused": [], "folded": []}
# aotc compile, its linears' post-ops fused on every CPU
FUSED = ("import sys; from aotc.exporters import aoti_frozen; aoti_frozen.linear_post_ops_pay = lambda: True; "
         "from aotc.cli.main import main; sys.argv[0] = 'aotc'; main()")

CHILD = """
import importlib, json, statistics, sys, time, torch
name, bundle, threads, iters = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(threads)
sys.path.insert(0, "aotc/tools/suite_models")  # the suite's model files (not a package)
m = importlib.import_module(name)
model, example = m.build_model(), m.example_inputs()
args, kwargs = example if len(example) == 2 and isinstance(example[1], dict) else (example, {})
with torch.no_grad():
    call = lambda: model(*args, **kwargs)
    if bundle != "eager":
        import aotc
        loaded = aotc.load(bundle, backend="aoti")
        torch.testing.assert_close(loaded(*args, **kwargs)[0], model(*args, **kwargs)[0], rtol=1e-3, atol=1e-3)
        call = lambda: loaded(*args, **kwargs)
    for _ in range(3):
        call()
    times = []
    for _ in range(iters):
        start = time.perf_counter(); call(); times.append(time.perf_counter() - start)
print(json.dumps(statistics.median(times) * 1e3))
"""


def compile_each(source: Path, work: Path, variants: list[str]) -> dict:
    paths = {}
    for variant in variants:
        path = work / f"{source.name}-{variant}"
        shutil.copytree(source, path)
        aotc = [sys.executable, "-c", FUSED] if variant == "fused" else [str(Path(sys.executable).parent / "aotc")]
        subprocess.run([*aotc, "compile", str(path), "--no-cache", *FLAGS[variant]], check=True, capture_output=True,
                       cwd=ROOT)
        paths[variant] = str(path)
    return paths


def timed(name: str, bundle: str, threads: int, iters: int) -> float:
    out = subprocess.run([sys.executable, "-c", CHILD, name, bundle, str(threads), str(iters)],
                         check=True, capture_output=True, text=True, cwd=ROOT)
    return json.loads(out.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=MODELS)
    parser.add_argument("--bundles", default="benchmarks/suite-avx2/bundles", help="the suite's bundles folder")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--variants", default=",".join(VARIANTS), help="eager first, then any of the others")
    args = parser.parse_args()
    variants = args.variants.split(",")
    import torch

    isa = torch.backends.cpu.get_cpu_capability()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            paths = {"eager": "eager", **compile_each(ROOT / args.bundles / name, Path(tmp), variants[1:])}
            for threads in (1, 2):
                ms = {v: [] for v in variants}
                for _ in range(args.rounds):  # the variants take turns
                    for v in variants:
                        ms[v].append(timed(name, paths[v], threads, args.iters))
                med = {v: statistics.median(t) for v, t in ms.items()}
                cells = [f"{med[v]:.1f} ({min(ms[v]):.1f}-{max(ms[v]):.1f})" for v in variants]
                speedups = [f"{med['eager'] / med[v]:.2f}x" for v in variants[1:]]
                row = f"| {name} | {threads} | {' | '.join(cells + speedups)} |"
                print(row, flush=True)
                rows.append(row)
    OUT.write_text("\n".join([
        f"# Folded linears against aten's GEMM, {isa}", "",
        f"`benchmarks/fold_linears.py --models {args.models} --rounds {args.rounds} --iters {args.iters}`, torch "
        f"{torch.__version__}, instruction set {isa}. Milliseconds a call: median of {args.rounds} fresh processes "
        f"(min-max), each its own median of {args.iters} calls, the variants taking turns. no-fold: "
        "`aotc compile --no-fold` (weights as inputs, linears on aten's addmm); fused: folded with the pointwise "
        "ops after the linears as oneDNN post-ops on every CPU; folded: `aotc compile` (linears and convolutions "
        "prepacked for oneDNN; on a CPU without AVX-512 their post-ops left to generated kernels).", "",
        f"| model | threads | {' | '.join(variants)} | {' | '.join(f'{v} speedup' for v in variants[1:])} |",
        "|---|---|" + "---|" * (2 * len(variants) - 1), *rows]) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
