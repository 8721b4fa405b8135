"""Per-call cost of aotc's runtime wrapper stack, side by side with the raw graph call.

For each model: the backend's graph called directly with pre-gathered flat inputs (no
checks, no epilogue), `aotc.load(...)(x)` (signature checks, guard, epilogue), and eager.
Runs interleaved in one process; prints medians of several repeats, in µs per call.

    .venv/bin/python benchmarks/overhead.py [--iters 2000] [--repeats 7]
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
from aotc.model_file import load_model  # noqa: E402


def _per_call_us(fn, iters: int) -> float:
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - start) / iters * 1e6


def bench(name: str, root: Path, iters: int, repeats: int) -> dict:
    spec = load_model(str(ROOT / "sample_models" / f"{name}.py"))
    bundle = aotc.export(spec.module.eval(), spec.args, root / name, force=True)
    loaded = aotc.load(bundle.path)
    program = loaded._programs["inference"]
    graph = program.graph
    args = [a.clone() for a in spec.args]
    primals = program.primals(list(args))
    model = spec.module.eval()
    epilogue = "none" if program.epilogue.trivial else "mutations/aliases"

    def raw():
        return graph(*primals)

    def stack():
        return loaded(*args)

    def eager():
        return model(*args)

    results = {"raw": [], "aotc": [], "eager": []}
    with torch.inference_mode(False), torch.no_grad():
        for fn in (raw, stack, eager):
            _per_call_us(fn, iters // 10)  # warm up
        for _ in range(repeats):
            results["raw"].append(_per_call_us(raw, iters))
            results["aotc"].append(_per_call_us(stack, iters))
            results["eager"].append(_per_call_us(eager, iters))
    med = {k: statistics.median(v) for k, v in results.items()}
    return {"model": name, "epilogue": epilogue, **med, "overhead": med["aotc"] - med["raw"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=7)
    opts = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        rows = [bench(n, Path(tmp), opts.iters, opts.repeats) for n in ("mlp", "inplace")]
    print(f"{'model':<10} {'epilogue':<18} {'graph µs':>9} {'aotc µs':>9} {'eager µs':>9} {'overhead µs':>12}")
    for r in rows:
        print(
            f"{r['model']:<10} {r['epilogue']:<18} {r['raw']:9.2f} {r['aotc']:9.2f} {r['eager']:9.2f} "
            f"{r['overhead']:12.2f}"
        )


if __name__ == "__main__":
    main()
