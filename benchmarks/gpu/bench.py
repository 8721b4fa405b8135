"""aotc on a GPU against eager, torch.compile (default, max-autotune-no-cudagraphs,
reduce-overhead) and the bare AOTInductor runner, under a wall-clock budget.

    python benchmarks/gpu/bench.py --out DIR [--device cuda] [--budget-s 270]
        [--models bert gpt2 llama resnet vit unet2d_condition] [--dtypes fp32 bf16]
        [--batches 1 16] [--train | --no-train] [--variants ...] [--quick]

    # the logic on CPU, in under a minute (what tests/test_gpu_bench.py runs):
    python benchmarks/gpu/bench.py --out build/gpu-bench-cpu --device cpu --models mlp --quick \\
        --variants eager aotc raw --no-train

Writes DIR/gpu-bench.json (every row, every round's time, the environment) and
DIR/gpu-bench.md (tables, geomeans, method, sources), both again after every row, so a
run stopped from outside still leaves its finished rows. Rows run in the plan's order
(benchmarks/gpu/plan.py) until the budget is spent; the rest are recorded as not run.
Progress goes to stderr. Exit status: 1 when any variant's outputs differ from eager's
(a WRONG row), else 0; 2 for a bad command line.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script: the repository's packages, benchmarks.gpu among them
    sys.path.insert(0, str(ROOT))

SUITE = ("bert", "gpt2", "llama", "resnet", "vit", "unet2d_condition")


def parse(argv: list[str] | None) -> argparse.Namespace:
    from benchmarks.gpu.plan import TRAIN_MODELS
    from benchmarks.gpu.variants import INFERENCE, TRAINING

    head, _, rest = __doc__.partition("\n\n")
    p = argparse.ArgumentParser(prog="bench.py", description=head, epilog=rest,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, type=Path, help="folder for gpu-bench.json, gpu-bench.md and the bundles")
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu: the CPU runs the same logic")
    p.add_argument("--budget-s", type=float, default=270.0,
                   help="wall-clock seconds for the whole run; rows past it are recorded as not run (default 270)")
    p.add_argument("--models", nargs="+", default=list(SUITE),
                   help="suite or sample model names, or model files (default: the six suite models)")
    p.add_argument("--dtypes", nargs="+", choices=("fp32", "bf16"), help="default fp32 bf16 (--quick: fp32)")
    p.add_argument("--batches", nargs="+", type=int, default=[1, 16], help="batch sizes (default 1 16)")
    p.add_argument("--train", action=argparse.BooleanOptionalAction, default=True,
                   help="fused training-step rows, fp32, for --train-models (default on)")
    p.add_argument("--variants", nargs="+", choices=INFERENCE, default=list(INFERENCE),
                   help="inference variants (default: all)")
    p.add_argument("--train-variants", nargs="+", choices=TRAINING, default=list(TRAINING),
                   help="training variants (default: all)")
    p.add_argument("--train-models", nargs="+", default=list(TRAIN_MODELS), help="default bert gpt2 resnet")
    p.add_argument("--train-batch", type=int, default=16, help="training rows' batch size (default 16)")
    p.add_argument("--optimizers", nargs="+", choices=("sgd", "adamw"), default=["sgd", "adamw"],
                   help="SGD (momentum 0.9) and AdamW rows (default both)")
    p.add_argument("--rounds", type=int, help="timing rounds (default 7; --quick: 3)")
    p.add_argument("--quick", action="store_true",
                   help="a fast look: fp32 only unless --dtypes, 3 rounds of ~20 ms, 3 warm-up calls")
    ns = p.parse_args(argv)
    if "eager" not in ns.variants:
        p.error("--variants needs eager: every variant is checked against it")
    if ns.train and "eager-fused" not in ns.train_variants:
        p.error("--train-variants needs eager-fused: every step is checked against it")
    return ns


def use_repo_caches() -> None:
    """Compiler caches in the repository's ignored build/ (as the tests keep them), never
    in the home folder; set before torch reads them."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(ROOT / "build" / "inductor-cache"))
    os.environ.setdefault("AOTC_CACHE_DIR", str(ROOT / "build" / "aotc-cache"))


def environment(device) -> dict:
    """What the figures depend on: versions, the device, the date, the commit."""
    import torch

    import aotc

    cpu = f"CPU ({platform.processor() or platform.machine()})"
    env = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "aotc": aotc.__version__,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "commit": _git("rev-parse", "HEAD"),
        "worktree_changed": bool(_git("status", "--porcelain")),
        "inductor_cache": os.environ.get("TORCHINDUCTOR_CACHE_DIR"),
        "aotc_cache": os.environ.get("AOTC_CACHE_DIR"),
    }
    for lib in ("transformers", "diffusers"):
        try:
            env[lib] = __import__(lib).__version__
        except ImportError:
            env[lib] = None
    return env


def _git(*args: str) -> str | None:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def write(run: dict, out: Path) -> None:
    from benchmarks.gpu import report

    (out / "gpu-bench.json").write_text(json.dumps(run, indent=1))
    (out / "gpu-bench.md").write_text(report.render(run))


def pick_device(name: str):
    """The device asked for, with its index ('cuda' as 'cuda:N', as the bundles' loaders and
    the CUDA events name it); None when CUDA is asked for and absent."""
    import torch

    from aotc.devices import with_index

    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        return None
    return with_index(device)


def run_options(ns: argparse.Namespace, device, out: Path):
    from benchmarks.gpu import models
    from benchmarks.gpu.rows import RunOptions

    return RunOptions(device=device, workdir=out / "bundles", variants=tuple(ns.variants),
                      train_variants=tuple(ns.train_variants), rounds=ns.rounds or (3 if ns.quick else 7),
                      warmup=3 if ns.quick else 5, round_s=0.02 if ns.quick else 0.1,
                      # torch.export may prove a dynamic dim's graph for one less than its max (the UNet)
                      max_batch=max(models.MAX_BATCH, 2 * max(ns.batches)),
                      row_prior_s=90.0 if device.type == "cuda" else 30.0)


def plan_rows(ns: argparse.Namespace, sources: dict[str, Path]) -> list:
    from benchmarks.gpu.plan import PlanOptions, make_plan

    dtypes = ns.dtypes or (["fp32"] if ns.quick else ["fp32", "bf16"])
    return make_plan(PlanOptions(sources, tuple(dtypes), tuple(ns.batches), ns.train, tuple(ns.train_models),
                                 ns.train_batch, tuple(ns.optimizers)))


def new_run(ns: argparse.Namespace, argv: list[str] | None, device, sources: dict[str, Path], options) -> dict:
    """The run's JSON before any row: environment, options, timing method, budget."""
    from benchmarks.gpu.measure import TOLERANCES

    return {
        "environment": environment(device),
        "device": device.type,
        "options": {"models": {k: str(v) for k, v in sources.items()}, "variants": list(ns.variants),
                    "train_variants": list(ns.train_variants), "train": ns.train, "quick": ns.quick,
                    "argv": sys.argv[1:] if argv is None else list(argv)},
        "timing": {"rounds": options.rounds, "warmup": options.warmup, "round_s": options.round_s,
                   "check_steps": options.check_steps,
                   "samples": "samples_ms: one per round, the mean ms per call over calls_per_round back-to-back "
                              "calls; median_ms, low_ms, high_ms: their median, min and max",
                   "tolerances": ", ".join(f"{str(d).removeprefix('torch.')} rtol {r:g} atol {a:g}"
                                           for d, (r, a) in TOLERANCES.items())},
        "budget": {"seconds": ns.budget_s, "spent_s": 0.0},
        "rows": [],
    }


def run_plan(plan: list, options, budget, run: dict, out: Path) -> list[dict]:
    """Every row in order while the budget lasts, the rest recorded as not run; the JSON
    and the report rewritten after each row, so a run killed from outside keeps what it
    finished (and says which rows it never reached)."""
    from benchmarks.gpu import rows
    from benchmarks.gpu.plan import NOT_RUN_BUDGET, RowCosts

    bundles, costs, results = rows.Bundles(options), RowCosts(options.row_prior_s), []
    for i, row in enumerate(plan):
        if budget.over():
            names = options.variants if row.kind == "inference" else options.train_variants
            results.append(rows.not_run(row, names, NOT_RUN_BUDGET).as_json())
            continue
        say(f"[{budget.spent():5.0f} s] row {i + 1}/{len(plan)}: {row.label}")
        result = rows.run_row(row, options, bundles, budget, costs, len(plan) - i - 1, say)
        costs.add(result.seconds)
        results.append(result.as_json())
        say(f"[{budget.spent():5.0f} s] row {i + 1}/{len(plan)}: {row.label}: {result.status}"
            f"{' (' + result.reason + ')' if result.reason else ''}, fastest {result.fastest or '-'} "
            f"({result.seconds:.1f} s)")
        unreached = [rows.not_run(r, (), "not reached: the run stopped before this row").as_json()
                     for r in plan[i + 1:]]
        run["rows"], run["budget"]["spent_s"] = results + unreached, budget.spent()
        write(run, out)
    run["rows"], run["budget"]["spent_s"] = results, budget.spent()
    write(run, out)
    return results


def main(argv: list[str] | None = None) -> int:
    started = time.perf_counter()  # the budget counts imports too, as the outer run's clock does
    ns = parse(argv)
    use_repo_caches()
    from benchmarks.gpu import models
    from benchmarks.gpu.plan import Budget

    device = pick_device(ns.device)
    if device is None:
        say("Error: --device cuda, but torch sees no CUDA device; run with --device cpu to try the logic here.")
        return 2
    try:
        sources = {path.stem: path for path in map(models.resolve, ns.models)}
    except models.UnknownModel as e:
        say(f"Error: {e}")
        return 2
    out = ns.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    options = run_options(ns, device, out)
    plan = plan_rows(ns, sources)
    run = new_run(ns, argv, device, sources, options)
    say(f"gpu bench: {len(plan)} rows planned on {run['environment']['device_name']}, budget {ns.budget_s:.0f} s")
    results = run_plan(plan, options, Budget(ns.budget_s, started), run, out)
    say(f"wrote {out / 'gpu-bench.json'} and {out / 'gpu-bench.md'} ({time.perf_counter() - started:.0f} s)")
    wrong = [r for r in results if r["status"] == "WRONG"]
    for r in wrong:
        say(f"WRONG: {r['model']} {r['dtype']} batch {r['batch']}: {r['reason']}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
