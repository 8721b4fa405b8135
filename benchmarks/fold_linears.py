"""A folded package (linears prepacked for oneDNN, aotc compile's default) against the same
graph compiled `--no-fold` (weights as inputs, linears on aten's GEMM), on the suite's text,
vision and audio models, at 1 and 2 threads: the measurement behind folding linear layers on
every CPU (exporters/aoti_frozen.py, benchmarks/linear_prepack.md for the calls alone).

Each model's bundle (from `aotc bench --suite`'s bundles folder) is copied twice and compiled
both ways. Every figure is one fresh process's median of --iters calls; the processes take
turns (eager, unfolded, folded, then again), and each variant's first output is compared with
eager's before it is timed.

    .venv/bin/python benchmarks/fold_linears.py [--models gpt2,bert] [--rounds 3]

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
VARIANTS = ("eager", "no-fold", "folded")

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


def compile_both(source: Path, work: Path) -> dict:
    paths = {}
    for variant, flags in (("no-fold", ["--no-fold"]), ("folded", [])):
        path = work / f"{source.name}-{variant}"
        shutil.copytree(source, path)
        subprocess.run([str(Path(sys.executable).parent / "aotc"), "compile", str(path), "--no-cache", *flags],
                       check=True, capture_output=True, cwd=ROOT)
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
    args = parser.parse_args()
    import torch

    isa = torch.backends.cpu.get_cpu_capability()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            paths = {"eager": "eager", **compile_both(ROOT / args.bundles / name, Path(tmp))}
            for threads in (1, 2):
                ms = {v: [] for v in VARIANTS}
                for _ in range(args.rounds):  # the variants take turns
                    for v in VARIANTS:
                        ms[v].append(timed(name, paths[v], threads, args.iters))
                med = {v: statistics.median(t) for v, t in ms.items()}
                cells = [f"{med[v]:.1f} ({min(ms[v]):.1f}-{max(ms[v]):.1f})" for v in VARIANTS]
                row = (f"| {name} | {threads} | {' | '.join(cells)} | {med['eager'] / med['no-fold']:.2f}x | "
                       f"{med['eager'] / med['folded']:.2f}x | {med['no-fold'] / med['folded']:.2f}x |")
                print(row, flush=True)
                rows.append(row)
    OUT.write_text("\n".join([
        f"# Folded linears against aten's GEMM, {isa}", "",
        f"`benchmarks/fold_linears.py --models {args.models} --rounds {args.rounds} --iters {args.iters}`, torch "
        f"{torch.__version__}, instruction set {isa}. Milliseconds a call: median of {args.rounds} fresh processes "
        f"(min-max), each its own median of {args.iters} calls, the variants taking turns. no-fold: "
        "`aotc compile --no-fold` (weights as inputs, linears on aten's addmm); folded: `aotc compile` (linears "
        "and convolutions prepacked for oneDNN).", "",
        "| model | threads | eager | no-fold | folded | no-fold speedup | folded speedup | folded / no-fold |",
        "|---|---|---|---|---|---|---|---|", *rows]) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
