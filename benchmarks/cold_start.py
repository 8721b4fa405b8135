"""Cold start and steady state: aotc's compiled bundle vs torch.compile vs eager.

Each variant runs in a fresh Python process, timed from before the process starts to its
first output (so interpreter start and imports count), then runs N more calls for the
steady-state latency. torch.compile gets an empty inductor cache (cold) and, separately,
the cache its cold run left behind (warm). Printed as one table with ratios.

    .venv/bin/python benchmarks/cold_start.py [--models mlp tiny_transformer] [--iters 200]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, time, statistics
variant, model_file, bundle, iters = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
import torch
torch.set_num_threads(1)
if variant == "aotc":
    import aotc
    m = aotc.load(bundle)
    from aotc._torch_compat import pytree
    from aotc.runtime.inputs import random_inputs
    args, kwargs = random_inputs(aotc.Bundle.open(bundle).metadata, pytree.treespec_loads(aotc.Bundle.open(bundle).signature.in_spec))
else:
    from aotc.model_file import load_model
    spec = load_model(model_file)
    m = spec.module.eval()
    args, kwargs = spec.args, spec.kwargs
    if variant.startswith("torch.compile"):
        m = torch.compile(m)
with torch.no_grad():
    m(*args, **kwargs)
    print("FIRST", flush=True)
    times = []
    for _ in range(iters):
        t = time.perf_counter(); m(*args, **kwargs); times.append(time.perf_counter() - t)
print(json.dumps({"steady_us": statistics.median(times) * 1e6}))
"""


def run_variant(variant: str, model_file: Path, bundle: Path, iters: int, env: dict) -> dict:
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, variant, str(model_file), str(bundle), str(iters)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=ROOT,
    )
    first = None
    result = {}
    for line in proc.stdout:
        if line.startswith("FIRST") and first is None:
            first = time.perf_counter() - start
        elif line.startswith("{"):
            result = json.loads(line)
    if proc.wait() != 0 or first is None:
        raise RuntimeError(f"{variant} failed for {model_file.name}")
    return {"variant": variant, "cold_start_s": first, **result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["mlp", "tiny_transformer"])
    parser.add_argument("--iters", type=int, default=200)
    opts = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import aotc
    from aotc.model_file import load_model

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in opts.models:
            model_file = ROOT / "sample_models" / f"{name}.py"
            spec = load_model(str(model_file))
            bundle = aotc.export(spec.module.eval(), (spec.args, spec.kwargs), Path(tmp) / name, name=name,
                                 dynamic_shapes=spec.dynamic_shapes)
            aotc.compile(bundle.path)
            env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(Path(tmp) / f"inductor-{name}"),
                       PYTHONPATH=str(ROOT))
            for variant in ("aotc", "torch.compile (cold cache)", "torch.compile (warm cache)", "eager"):
                rows.append({"model": name, **run_variant(variant, model_file, bundle.path, opts.iters, env)})
    print(f"{'model':<18} {'variant':<28} {'cold start s':>12} {'steady µs':>10} {'cold vs aotc':>13} {'steady vs aotc':>15}")
    for r in rows:
        base = next(x for x in rows if x["model"] == r["model"] and x["variant"] == "aotc")
        print(
            f"{r['model']:<18} {r['variant']:<28} {r['cold_start_s']:12.2f} {r['steady_us']:10.1f} "
            f"{r['cold_start_s'] / base['cold_start_s']:12.1f}x {r['steady_us'] / base['steady_us']:14.2f}x"
        )


if __name__ == "__main__":
    main()
