"""One suite model (aotc/tools/suite_models) as each variant the profiling benchmarks compare
(text_codegen.py, diffusion_profile.py): built, checked against eager, timed and profiled
in a process of its own, at 1 thread.

    python benchmarks/suite_variants.py VARIANT SOURCE BUNDLE [--profile]

prints one JSON line: the check, the median ms per call, and with --profile the
profiler's self time per op (ms per call).
"""

from __future__ import annotations

import json
import os
import runpy
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "aotc" / "tools" / "suite_models"
VARIANTS = ("eager", "aotc", "tc freeze", "tc freeze dyn")
CALLS = 30


def env(tmp: Path, **extra: str) -> dict:
    """A child's environment: 1 thread, caches inside `tmp`."""
    return dict(os.environ, OMP_NUM_THREADS="1", TORCHINDUCTOR_CACHE_DIR=str(tmp / "inductor"),
                AOTC_CACHE_DIR=str(tmp / "aotc-cache"), **extra)


def compile_bundle(name: str, tmp: Path, *flags: str) -> Path:
    """`aotc compile` of the suite's model file into tmp/NAME."""
    bundle = tmp / name
    tmp.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([str(Path(sys.executable).parent / "aotc"), "compile", str(SUITE / f"{name}.py"),
                           "-o", str(bundle), "--force", *flags], env=env(tmp), capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"aotc compile {name} failed:\n{proc.stderr[-3000:]}")
    return bundle


def run(variant: str, name: str, bundle: Path, tmp: Path, profile: bool = False, **extra_env: str) -> dict:
    """One variant's figures from a fresh process."""
    proc = subprocess.run([sys.executable, __file__, variant, str(SUITE / f"{name}.py"), str(bundle),
                           *(["--profile"] if profile else [])],
                          env=env(tmp, **extra_env), capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"{name} {variant} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def summary(runs: list[dict]) -> dict:
    """Several processes' figures of one variant: the median of their medians and the spread."""
    wrong = [r["check"] for r in runs if r["check"].startswith("WRONG")]
    medians = [r["median_ms"] for r in runs if "median_ms" in r]
    middle = statistics.median(medians) if medians else None
    return {"check": wrong[0] if wrong else runs[0]["check"], "median_ms": round(middle, 2) if middle else None,
            "spread": round((max(medians) - min(medians)) / middle, 3) if middle else None,
            "profile": next((r["profile"] for r in runs if r.get("profile")), None)}


def call_inputs(spec: dict) -> tuple[tuple, dict]:
    """A suite model file's example inputs as (args, kwargs): it returns args alone, or both."""
    inputs = spec["example_inputs"]()
    return inputs if len(inputs) == 2 and isinstance(inputs[1], dict) else (inputs, {})


def main(description: str, default_models: str, out: Path, study, report) -> int:
    """A profiling benchmark's command line: `study(name, rounds, tmp, say)` for each model,
    in fresh processes with caches in one temporary folder; writes OUT.json and OUT.md
    (`report(results)`); 1 where a variant's output was WRONG."""
    import argparse
    import tempfile

    import torch

    from aotc.tools import bench_provenance

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--models", default=default_models)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=out)
    a = parser.parse_args()
    say = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    with tempfile.TemporaryDirectory(prefix=f"aotc-{out.name}-") as tmp:
        results = {"torch": torch.__version__, "host": bench_provenance.stamp(),
                   "models": {m: study(m, a.rounds, Path(tmp), say) for m in a.models.split(",")}}
    a.out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    a.out.with_suffix(".md").write_text(report(results) + "\n")
    say(f"wrote {a.out.with_suffix('.md')}")
    return int(any(t["check"].startswith("WRONG") for r in results["models"].values() for t in r["timed"].values()))


def _first_tensor(out):
    from aotc._torch_compat import pytree

    return pytree.tree_leaves(out)[0]


def measure(variant: str, source: str, bundle: str, profile: bool) -> dict:
    import torch

    torch.set_num_threads(1)
    spec = runpy.run_path(source)
    model = spec["build_model"]()
    args, kwargs = call_inputs(spec)
    with torch.no_grad():
        expected = _first_tensor(model(*args, **kwargs))
    if variant == "aotc":
        import aotc

        call = aotc.load(bundle)
    elif variant.startswith("tc freeze"):
        from aotc import _torch_compat as tc

        tc.inductor_freezing_on()
        call = torch.compile(model, dynamic=True if variant == "tc freeze dyn" else None)
    elif variant == "eager":
        call = model
    else:
        raise SystemExit(f"unknown variant {variant!r}; one of {', '.join(VARIANTS)}")
    with torch.no_grad():
        got = _first_tensor(call(*args, **kwargs))
        diff = (got - expected).abs().max().item()
        if not torch.allclose(got, expected, rtol=1e-3, atol=1e-3):
            return {"check": f"WRONG: max abs difference {diff:.3g}"}
        for _ in range(5):
            call(*args, **kwargs)
        times = []
        for _ in range(CALLS):
            start = time.perf_counter()
            call(*args, **kwargs)
            times.append(time.perf_counter() - start)
        ops = None
        if profile:
            from torch.profiler import profile as profiler

            with profiler() as prof:
                for _ in range(5):
                    call(*args, **kwargs)
            ops = {e.key: e.self_cpu_time_total / 5e3 for e in prof.key_averages() if e.self_cpu_time_total > 0}
    return {"check": f"pass (max abs difference {diff:.2g})", "median_ms": statistics.median(times) * 1e3,
            "profile": ops}


if __name__ == "__main__":
    print(json.dumps(measure(sys.argv[1], sys.argv[2], sys.argv[3], "--profile" in sys.argv[4:])))
