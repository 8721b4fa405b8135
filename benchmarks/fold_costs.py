"""What weight folding costs at run time (issue 48, part 6): the per-call check, and the
refold after load_state_dict.

A package compiled with its weights folded holds constants computed from the weights. Each
call, `FoldedWeights.sync` checks that every weight the fold read is the same tensor,
unchanged in place (its version counter), and refolds when one is not. This times that
check when nothing changed, at 200 and 2,000 weights, beside its floor: reading each
weight's version counter once, which any exact check must do while torch gives a version
to each tensor alone. Interleaved in one process, medians over repeats, 1 thread.

After `load_state_dict`, the next call refolds every constant. For the suite's BERT and
ResNet (`aotc compile` with no flags, which folds), each in a fresh process at 1 thread:
the steady call, the first call after load_state_dict of weights that differ (checked
against eager with those weights), and how far that call raises the process's peak RSS
(/proc/self/clear_refs resets the high-water mark just before it).

    .venv/bin/python benchmarks/fold_costs.py [--iters 20000] [--repeats 7] [--models bert,resnet]

Writes benchmarks/fold_costs.md.
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SUITE = ROOT / "aotc" / "tools" / "suite_models"

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


def _status_mib(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def refold(source: str, bundle: str, calls: int = 20) -> dict:
    """One model's refold after load_state_dict, in this (fresh) process."""
    import aotc
    from aotc._torch_compat import pytree
    from aotc.bundle.files import Bundle
    from aotc.sources.model_file import load_model

    torch.set_num_threads(1)
    spec = load_model(source)
    model = aotc.load(bundle, backend="aoti")
    folded = any((f.build or {}).get("weights") == "folded" for f in Bundle.open(bundle).manifest.files if f.build)
    call = lambda: model(*spec.args, **spec.kwargs)  # noqa: E731
    with torch.no_grad():
        call()
        steady = statistics.median(_timed(call) for _ in range(calls))
        state = {k: v * 1.01 if v.is_floating_point() else v for k, v in model.state_dict().items()}
        model.load_state_dict(state)
        before = _status_mib("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # the peak RSS starts again from here
        after_load = _timed(lambda: call())
        peak = _status_mib("VmHWM") - before
        got = call()
        steady_after = statistics.median(_timed(call) for _ in range(calls))
        eager = spec.module
        eager.load_state_dict(state)
        want = eager(*spec.args, **spec.kwargs)
    got, want = (pytree.tree_leaves(x)[0] for x in (got, want))
    assert torch.allclose(got, want, rtol=1e-3, atol=1e-3), "the refolded package differs from eager"
    weights = sum(v.numel() * v.element_size() for v in state.values()) / 2**20
    return {"folded": folded, "weights_mib": round(weights, 1), "steady_ms": round(steady, 2),
            "after_load_ms": round(after_load, 1), "peak_mib": round(peak, 1), "steady_after_ms": round(steady_after, 2)}


def refold_rows(models: list[str], tmp: Path) -> list[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", AOTC_CACHE_DIR=str(tmp / "aotc-cache"),
               TORCHINDUCTOR_CACHE_DIR=str(tmp / "inductor"))
    rows = []
    for name in models:
        source, bundle = SUITE / f"{name}.py", tmp / name
        print(f"{name}: aotc compile", file=sys.stderr, flush=True)
        subprocess.run([str(Path(sys.executable).parent / "aotc"), "compile", str(source), "-o", str(bundle), "--force"],
                       check=True, env=env, capture_output=True)
        proc = subprocess.run([sys.executable, __file__, "--refold", str(source), str(bundle)], env=env,
                              capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(f"{name}'s refold failed:\n{proc.stderr[-3000:]}")
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        if not r["folded"]:
            raise SystemExit(f"{name}'s package was not compiled with its weights folded")
        rows.append(f"| {name} | {r['weights_mib']} MiB | {r['steady_ms']:.2f} ms | {r['after_load_ms']:.1f} ms | "
                    f"+{r['after_load_ms'] - r['steady_ms']:.1f} ms | +{r['peak_mib']:.1f} MiB | "
                    f"{r['steady_after_ms']:.2f} ms |")
    return rows


def main() -> int:
    if sys.argv[1:2] == ["--refold"]:
        print(json.dumps(refold(*sys.argv[2:4])))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--models", default="bert,resnet")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "fold_costs.md")
    args = ap.parse_args()
    torch.set_num_threads(1)
    lines = ["# What weight folding costs at run time", "",
             "Made by `benchmarks/fold_costs.py`, 1 thread, torch " + torch.__version__ + ".", "",
             "## The per-call check, nothing changed", "",
             "Medians over repeats, interleaved; the floor reads each weight's version counter once.", "",
             "Why the check is not O(1): a load_state_dict hook alone would miss a weight changed in place "
             "(an optimizer's step, `p.data.mul_()`), and the package would run on stale constants. torch keeps a "
             "version counter per tensor (a view shares its base's), so one counter for every weight needs them "
             "all to be views of one buffer: safetensors refuses to save tensors that share memory, and a "
             "user's load_state_dict of new tensors would break the sharing. The check stays within 2x of "
             "reading each counter once.", "",
             "| weights | sync, nothing changed | per weight | floor: each version read once | per weight |",
             "| --- | --- | --- | --- | --- |"]
    for weights in (200, 2000):
        t = bench(weights, args.iters if weights < 1000 else args.iters // 10, args.repeats)
        lines.append(f"| {weights} | {t['sync']:.1f} µs | {t['sync'] / weights * 1e3:.0f} ns | {t['floor']:.1f} µs | "
                     f"{t['floor'] / weights * 1e3:.0f} ns |")
    lines += ["", "## The call after load_state_dict", "",
              "The suite's models compiled by `aotc compile` (weights folded), in a fresh process each. The call "
              "after load_state_dict (every weight x1.01) refolds, and its output is checked against eager's with "
              "the same weights. Peak: how far that call raised the process's peak RSS above its RSS before it.", "",
              "| model | weights | steady call | call after load_state_dict | refold's cost | peak RSS | "
              "steady call after |", "| --- | --- | --- | --- | --- | --- | --- |"]
    with tempfile.TemporaryDirectory(prefix="aotc-fold-costs-") as tmp:
        lines += refold_rows(args.models.split(","), Path(tmp))
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
