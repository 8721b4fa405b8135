"""The block-stack sample (sample_models/gpt_blocks.py): regional bundle vs whole model.

In one run: AOTInductor compile time of the regional bundle (`--regions 'blocks.*'`:
one block graph for six blocks), of the whole model, and of one block alone, each
with an empty inductor cache after a throwaway compile pays inductor's one-time
set-up; bundle sizes; and steady-state latency per forward (batch 2, 16 tokens),
interleaved rounds in one process: eager, torch.compile, whole-model aoti, and the
model with its regions applied (aoti blocks, Python glue).

    .venv/bin/python benchmarks/regions.py [--iters 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aotc  # noqa: E402

SAMPLE = ROOT / "sample_models" / "gpt_blocks.py"


def _sample():
    spec = importlib.util.spec_from_file_location("gpt_blocks_bench", SAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _timed_compile(path: Path) -> float:
    start = time.perf_counter()
    aotc.compile(path, use_cache=False)
    return time.perf_counter() - start


def _per_call_us(fn, ids, iters: int) -> float:
    with torch.no_grad():
        start = time.perf_counter()
        for _ in range(iters):
            fn(ids)
        return (time.perf_counter() - start) / iters * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sample = _sample()
    ids = sample.example_inputs()[0]

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(root / "inductor")
        aotc.export(torch.nn.Linear(4, 4), (torch.randn(2, 4),), root / "warm-up")
        aotc.compile(root / "warm-up", use_cache=False)

        model = sample.build_model()
        aotc.export_regions(model, (ids,), root / "regional", regions="blocks.*", dynamic_shapes=sample.dynamic_shapes)
        aotc.export(model, (ids,), root / "whole", dynamic_shapes=sample.dynamic_shapes)
        x = model.tokens(ids) + model.positions(torch.arange(ids.shape[1]))
        aotc.export(model.blocks[0], (x.detach(),), root / "block")
        sizes = {k: _size(root / k) for k in ("regional", "whole")}
        compile_s = {k: _timed_compile(root / k) for k in ("regional", "whole", "block")}
        sizes_compiled = {k: _size(root / k) for k in ("regional", "whole")}

        variants = {
            "eager": sample.build_model(),
            "torch.compile": torch.compile(sample.build_model()),
            "aotc whole (aoti)": aotc.load(root / "whole", backend="aoti"),
            "aotc regions (aoti)": aotc.apply(root / "regional", sample.build_model(), backend="aoti"),
        }
        with torch.no_grad():
            want = variants["eager"](ids)
            for label, fn in variants.items():
                torch.testing.assert_close(fn(ids), want, rtol=1e-4, atol=1e-4)  # also warms torch.compile
        for fn in variants.values():
            _per_call_us(fn, ids, 20)
        times: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(args.rounds):
            for label, fn in variants.items():
                times[label].append(_per_call_us(fn, ids, args.iters))

    print("AOTInductor compile, cold cache: " + ", ".join(f"{k} {v:.1f} s" for k, v in compile_s.items()))
    print("bundle size without / with compiled code: " + ", ".join(
        f"{k} {sizes[k] / 1e6:.2f} / {sizes_compiled[k] / 1e6:.2f} MB" for k in sizes))
    print(f"steady state, ids {tuple(ids.shape)}, {args.threads} thread(s), median of {args.rounds} rounds:")
    eager = statistics.median(times["eager"])
    for label, values in times.items():
        median = statistics.median(values)
        print(f"  {label:22s} {median:8.1f} µs  ({eager / median:.2f}x eager, spread {max(values) - min(values):.1f} µs)")


if __name__ == "__main__":
    main()
