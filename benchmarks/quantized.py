"""The int8 weight-only sample (sample_models/int8_mlp.py) against its float original.

In one run: bundle sizes (float vs int8), AOTInductor compile time of each with an
empty inductor cache (after a throwaway compile pays inductor's one-time set-up), and steady-state latency per call, side by side in one process
(interleaved rounds, median of the rounds): eager float, eager int8 (torchao), aotc fx
int8, aotc aoti float, aotc aoti int8.

    .venv/bin/python benchmarks/quantized.py [--batch 8] [--iters 500] [--rounds 7] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
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
from aotc.sources.model_file import load_model  # noqa: E402

SAMPLE = str(ROOT / "sample_models" / "int8_mlp.py")


def _per_call_us(fn, x, iters: int) -> float:
    with torch.no_grad():
        start = time.perf_counter()
        for _ in range(iters):
            fn(x)
        return (time.perf_counter() - start) / iters * 1e6


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--iters", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(root / "inductor")  # cold: nothing compiled before
        os.environ["AOTC_CACHE_DIR"] = str(root / "aotc-cache")
        # inductor's one-time set-up (picking the CPU ISA, loading the compiler) is paid by
        # a throwaway compile first, so neither model's compile time includes it
        aotc.export(torch.nn.Linear(4, 4), (torch.randn(2, 4),), root / "warm-up")
        aotc.compile(root / "warm-up")
        models = {"float": load_model(SAMPLE, entry="build_float_model"), "int8": load_model(SAMPLE)}
        figures: dict = {"batch": args.batch, "threads": args.threads}
        loaded = {}
        for name, spec in models.items():
            bundle = aotc.export(spec.module, spec.args, root / name, dynamic_shapes=spec.dynamic_shapes)
            weights = (bundle.path / "weights.safetensors").stat().st_size
            start = time.perf_counter()
            aotc.compile(bundle.path)
            figures[name] = {
                "weights_bytes": weights,
                "fx_bundle_bytes": _size(bundle.path) - _size(bundle.path / "compiled"),
                "compile_s": round(time.perf_counter() - start, 2),
            }
            loaded[f"aotc aoti {name}"] = aotc.load(bundle.path, backend="aoti")
            if name == "int8":
                loaded["aotc fx int8"] = aotc.load(bundle.path, backend="fx")

        x = torch.randn(args.batch, 256)
        variants = {"eager float": models["float"].module.eval(), "eager int8": models["int8"].module.eval(), **loaded}
        with torch.no_grad():
            want = variants["eager int8"](x)
            for label in ("aotc fx int8", "aotc aoti int8"):
                torch.testing.assert_close(variants[label](x), want)  # timing a wrong result is pointless
        for fn in variants.values():
            _per_call_us(fn, x, 50)  # warm up
        times: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(args.rounds):
            for label, fn in variants.items():
                times[label].append(_per_call_us(fn, x, args.iters))
        figures["latency_us"] = {k: round(statistics.median(v), 1) for k, v in times.items()}
        figures["latency_spread_us"] = {k: round(max(v) - min(v), 1) for k, v in times.items()}

    f, q, lat = figures["float"], figures["int8"], figures["latency_us"]
    print(f"weights.safetensors: float {f['weights_bytes'] / 1e6:.2f} MB, int8 {q['weights_bytes'] / 1e6:.2f} MB "
          f"({q['weights_bytes'] / f['weights_bytes']:.2f}x)")
    print(f"bundle without compiled code: float {f['fx_bundle_bytes'] / 1e6:.2f} MB, int8 {q['fx_bundle_bytes'] / 1e6:.2f} MB")
    print(f"AOTInductor compile (cold cache): float {f['compile_s']:.1f} s, int8 {q['compile_s']:.1f} s")
    print(f"steady state, batch {args.batch}, {args.threads} thread(s), median of {args.rounds} rounds of {args.iters} calls:")
    for label, us in lat.items():
        print(f"  {label:16s} {us:8.1f} µs   ({lat['eager int8'] / us:.2f}x eager int8, "
              f"{lat['eager float'] / us:.2f}x eager float, spread {figures['latency_spread_us'][label]:.1f} µs)")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
