"""Cold start and steady state: aotc's compiled bundle vs torch.compile vs eager.

Each variant runs in a fresh Python process (through `aotc.tools.bench`), timed from before the
process starts to its first output (so interpreter start and imports count), then for
N more calls (steady state). torch.compile gets an empty inductor cache (cold) and the
cache its cold run left behind (warm). Printed as one table with ratios.

    .venv/bin/python benchmarks/cold_start.py [--models mlp tiny_transformer] [--iters 200]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["mlp", "tiny_transformer"])
    parser.add_argument("--iters", type=int, default=200)
    opts = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import aotc
    from aotc.tools.bench import bench
    from aotc.sources.model_file import load_model

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in opts.models:
            source = str(ROOT / "sample_models" / f"{name}.py")
            spec = load_model(source)
            bundle = aotc.export(spec.module.eval(), (spec.args, spec.kwargs), Path(tmp) / name, name=name,
                                 source=source, dynamic_shapes=spec.dynamic_shapes)
            aotc.compile(bundle.path)
            rows += [(name, r) for r in bench(bundle.path, backends=["aoti"], iters=opts.iters, warmup=20, model=source)]
    print(f"{'model':<18} {'variant':<28} {'cold start s':>12} {'steady µs':>10} {'cold vs aotc':>13} {'steady vs aotc':>15}")
    for name, r in rows:
        base = next(x for n, x in rows if n == name and x.variant.startswith("aotc"))
        print(f"{name:<18} {r.variant:<28} {r.cold_start_s:12.2f} {r.median_us:10.1f} "
              f"{r.cold_start_s / base.cold_start_s:12.1f}x {r.median_us / base.median_us:14.2f}x")


if __name__ == "__main__":
    main()
