"""Per-call cost of aotc's runtime on a compiled (aoti) bundle, side by side with its floors.

For each model, interleaved in one process, medians of several repeats, µs per call:
- `raw`: the AOTInductor package's runner on a flat list gathered once (no Python around it);
- `python floor`: the least any Python wrapper does: gather the parameters, build the
  list, call the runner, pick the output;
- `aotc`: `loaded(*inputs)`, the whole runtime (the fast path when it applies);
- `full stack`: `loaded.forward(*inputs)`, every wrapper layer with no fast path;
- `eager`: the model itself.
Inference calls under torch.no_grad, 1 thread.

    .venv/bin/python benchmarks/overhead.py [--iters 2000] [--repeats 9]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aotc  # noqa: E402
from aotc.sources.model_file import load_model  # noqa: E402


def _per_call_us(fn, iters: int) -> float:
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - start) / iters * 1e6


def bench(name: str, root: Path, iters: int, repeats: int) -> dict:
    spec = load_model(str(ROOT / "sample_models" / f"{name}.py"))
    bundle = aotc.export(spec.module.eval(), spec.args, root / name, force=True)
    aotc.compile(bundle.path)
    loaded = aotc.load(bundle.path, backend="aoti")
    program = loaded._programs["inference"]
    run = program.graph.fast_call
    args = [a.clone() for a in spec.args]
    flat = program.primals(list(args))
    state = flat[: len(flat) - len(args)]
    first = program.epilogue.outputs[0].output
    model = spec.module.eval()
    epilogue = "none" if program.epilogue.trivial else "mutations/aliases"

    variants = {
        "raw": lambda: run(list(flat)),
        "python floor": lambda: run([*state, *args])[first],
        "aotc": lambda: loaded(*args),
        "full stack": lambda: loaded.forward(*args),
        "eager": lambda: model(*args),
    }
    results: dict = {k: [] for k in variants}
    with torch.no_grad():
        for fn in variants.values():
            _per_call_us(fn, iters // 10)  # warm up
        for _ in range(repeats):
            for k, fn in variants.items():
                results[k].append(_per_call_us(fn, iters))
    return {"model": name, "epilogue": epilogue, **{k: statistics.median(v) for k, v in results.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=9)
    opts = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        rows = [bench(n, Path(tmp), opts.iters, opts.repeats) for n in ("mlp", "inplace")]
    cols = ["raw", "python floor", "aotc", "full stack", "eager"]
    print(f"{'model':<9} {'epilogue':<18}" + "".join(f"{c:>13}" for c in cols) + f"{'aotc/raw':>10}{'aotc-raw':>10}")
    for r in rows:
        print(f"{r['model']:<9} {r['epilogue']:<18}" + "".join(f"{r[c]:13.2f}" for c in cols)
              + f"{r['aotc'] / r['raw']:10.2f}{r['aotc'] - r['raw']:10.2f}")
    print("µs per call, medians; aotc-raw is what aotc adds over the package's own runner.")


if __name__ == "__main__":
    main()
