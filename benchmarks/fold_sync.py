"""What a weight-folded package's per-call check costs (issue 48, part 6).

A package compiled with its weights folded holds constants computed from the weights. Each
call, `FoldedWeights.sync` checks that every weight the fold read is the same tensor,
unchanged in place (its version counter), and refolds when one is not. This times that
check when nothing changed, at 200 and 2,000 weights, beside its floor: reading each
weight's version counter once, which any exact check must do while torch gives a version
to each tensor alone. Interleaved in one process, medians over repeats, 1 thread.

    .venv/bin/python benchmarks/fold_sync.py [--iters 20000] [--repeats 7]
"""

from __future__ import annotations

import argparse
import operator
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aotc.exporters.weight_fold import FoldedWeights, FoldProgram  # noqa: E402


class _Loader:
    """Stands in for the package's loader: sync hands it the folded constants."""

    def load_constants(self, constants, *flags) -> None:
        self.loaded = constants


def _per_call_us(fn, iters: int) -> float:
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - start) / iters * 1e6


def bench(weights: int, iters: int, repeats: int) -> dict[str, float]:
    args = [torch.randn(4, 4) for _ in range(weights)] + [torch.randn(2, 4)]  # the weights, then a user input
    program = FoldProgram([], {f"c{i}": {"input": i} for i in range(weights)})
    folded = FoldedWeights(program, _Loader(), "benchmark")
    folded.sync(args)  # the first call folds
    version = operator.attrgetter("_version")
    weights_only = args[:weights]
    variants = {"sync": lambda: folded.sync(args), "floor": lambda: list(map(version, weights_only))}
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):  # interleaved: one repeat of each in turn
        for name, fn in variants.items():
            times[name].append(_per_call_us(fn, iters))
    # the check still sees a change: an in-place edit and a replaced tensor each refold
    args[0].add_(1)
    before = folded._constants
    folded.sync(args)
    assert folded._constants is not before, "an in-place change was not seen"
    args[1] = args[1].clone()
    before = folded._constants
    folded.sync(args)
    assert folded._constants is not before, "a replaced weight was not seen"
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print("| weights | sync, nothing changed | per weight | floor: each version read once | per weight |")
    print("| --- | --- | --- | --- | --- |")
    for weights in (200, 2000):
        t = bench(weights, args.iters if weights < 1000 else args.iters // 10, args.repeats)
        print(f"| {weights} | {t['sync']:.1f} µs | {t['sync'] / weights * 1e3:.0f} ns | {t['floor']:.1f} µs | "
              f"{t['floor'] / weights * 1e3:.0f} ns |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
