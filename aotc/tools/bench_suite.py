"""`aotc bench --suite` (`make bench-suite`): aotc against eager and torch.compile on a suite
of real model definitions, with geomeans per family.

Each model is a model file in aotc/tools/suite_models (transformers' and diffusers' own
classes built from configs, random weights) or one of the repository's sample models.
For each: `aotc compile` with no flags (timed, with the bundle's size), then `aotc bench`
on inference at each thread count: aotc's aoti backend, the raw AOTInductor runner, eager,
torch.compile, and torch.compile with freezing with static sizes and with `dynamic=True`
(their cold-cache first call is their compile time; aotc is set against the fastest).
Training rows add a forward+backward bundle's step and the fused steps of joint bundles
that carry SGD and AdamW, against eager's same steps. Every variant runs in
`repeats` fresh processes; figures are medians.

Results go to `<out>/results.json` (a run adds to it model by model, so the suite can be
run in parts), `<out>/report.md` (the table and the geomeans) and `<out>/report.png`. Each
part (a model's inference at one thread count, or one training step) records the aotc
commit, torch, CPU and instruction set it ran on; the report counts the parts that ran on the
current code, and `stale=True` runs again only the models with a part that did not, or that
ran on another instruction set.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aotc.errors import AotcError
from aotc.tools.bench import as_json, bench
from aotc.tools.bench_provenance import current, current_commit, folding, parts, provenance, stamp

HERE = Path(__file__).resolve().parent
SAMPLES = HERE.parent.parent / "sample_models"  # in a checkout of the repository


@dataclass(frozen=True)
class SuiteModel:
    name: str
    family: str  # text, vision, audio, diffusion, samples
    source: Path
    train: bool = False  # also timed on training steps


def _suite() -> list[SuiteModel]:
    models = HERE / "suite_models"
    families = {
        "text": ["bert", "roberta", "distilbert", "gpt2", "llama", "qwen2"],
        "vision": ["vit", "resnet", "convnext", "swin", "mobilenetv2"],
        "audio": ["wav2vec2", "whisper_encoder"],
        "diffusion": ["unet2d_condition", "vae_decoder"],
    }
    train = {"bert", "gpt2", "resnet"}
    suite = [SuiteModel(n, f, models / f"{n}.py", n in train) for f, names in families.items() for n in names]
    if SAMPLES.is_dir():
        samples = ["mlp", "cnn", "tiny_transformer", "classifier", "gpt_small", "resnet18"]
        suite += [SuiteModel(n, "samples", SAMPLES / f"{n}.py", n in {"mlp", "cnn", "tiny_transformer", "resnet18"})
                  for n in samples]
    return suite


SUITE = _suite()
INFERENCE = ("aotc aoti/cpu", "aoti raw runner", "eager", "torch.compile (warm cache)",
             "torch.compile freezing (warm cache)", "torch.compile freezing dynamic (warm cache)")
RIVALS = INFERENCE[3:]  # torch.compile's variants: aotc is set against the fastest


def pick(names: list[str] | None) -> list[SuiteModel]:
    if not names:
        return SUITE
    known = {m.name: m for m in SUITE}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise AotcError(f"the suite has no model {', '.join(unknown)}; it has {', '.join(known)}.")
    return [known[n] for n in names]


def compile_bundle(model: SuiteModel, target: Path, flags: list[str]) -> dict:
    """`aotc compile` of the model file into `target` in a fresh process, with the compile
    cache off (the time is a first compile's); its --json summary."""
    aotc_bin = Path(sys.executable).parent / "aotc"
    started = time.perf_counter()
    proc = subprocess.run([str(aotc_bin), "compile", str(model.source), "-o", str(target), "--force", "--no-cache",
                           "--json", *flags], capture_output=True, text=True, env=os.environ.copy())
    if proc.returncode != 0:
        last = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()][-1:] or ["no output"]
        raise AotcError(f"aotc compile {model.name} {' '.join(flags)} failed: {last[0]}")
    summary = json.loads(proc.stdout)
    return {"compile_s": round(time.perf_counter() - started, 1), "size_bytes": summary["size_bytes"],
            "build": {p: e["build"] for p, e in summary.get("compiled", {}).items()}}


TRAIN_STEPS = {"forward+backward": ["--autograd"], "joint+sgd": ["--joint", "--optimizer", "sgd"],
               "joint+adamw": ["--joint", "--optimizer", "adamw"]}  # each with its aotc compile flags


def run_model(model: SuiteModel, workdir: Path, threads: list[int], repeats: int, iters: int, train: bool,
              say: Callable[[str], None], inference: bool = True) -> dict:
    """One model's rows: {"inference": {threads: {variant: figures}}, "train": {...}, compile facts}."""
    row: dict = {"family": model.family, "inference": {}, "train": {}}
    bundle = workdir / model.name
    if inference:
        say(f"{model.name}: aotc compile")
        row["compile"] = compile_bundle(model, bundle, [])
    for t in threads if inference else []:
        results = bench(bundle, backends=["aoti"], baselines=("eager", "torch.compile", "torch.compile dynamic", "raw"),
                        iters=iters, warmup=max(3, iters // 10), threads=t, repeats=repeats, model=str(model.source),
                        on_variant=lambda v, t=t: say(f"{model.name}: {v} ({t} thread{'s' * (t > 1)})"))
        row["inference"][str(t)] = {r["variant"]: r for r in as_json(results)}
    if train and model.train:
        for kind, flags in TRAIN_STEPS.items():
            say(f"{model.name}: aotc compile {kind}")
            path = workdir / f"{model.name}-{kind.replace('+', '-')}"
            facts = compile_bundle(model, path, flags)
            # eager in torch.optim's three implementations; torch.compile of the model and of the whole step
            baselines = ("eager", "torch.compile")
            results = bench(path, backends=["aoti"], baselines=baselines, iters=iters, warmup=max(3, iters // 10),
                            threads=threads[0], train=True, repeats=repeats, model=str(model.source),
                            on_variant=lambda v, k=kind: say(f"{model.name}: {k}: {v}"))
            row["train"][kind] = {"compile": facts, "threads": threads[0],
                                  "results": {r["variant"]: r for r in as_json(results)}}
    return row


def run_suite(names: list[str] | None, out: Path, threads: list[int], repeats: int = 3, iters: int = 30,
              train: bool = True, say: Callable[[str], None] = print, inference: bool = True,
              stale: bool = False) -> dict:
    """Run the suite (or the models `names`), adding each model's rows to out/results.json
    as it finishes (rows of other thread counts or steps from earlier runs are kept);
    writes the report; returns every result so far. Without `inference`, only the
    training rows of the models that have them; with `stale`, only the models whose row
    has a part that ran on other code (or has no row)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    results = json.loads(path.read_text()) if path.is_file() else {}
    workdir = out / "bundles"
    now = current_commit()
    for model in pick(names):
        if not inference and not (train and model.train):
            continue
        wanted = [f"inference {t}" for t in threads if inference] + list(TRAIN_STEPS if train and model.train else ())
        if stale and current(results.get(model.name, {}), wanted, now):
            say(f"{model.name}: its parts ran on this code")
            continue
        row = run_model(model, workdir, threads, repeats, iters, train, say, inference)
        earlier = results.get(model.name, {})  # other thread counts and steps from earlier runs stay
        row.setdefault("compile", earlier.get("compile"))
        row["ran"] = {**earlier.get("ran", {}), **dict.fromkeys(parts(row), stamp())}
        row["inference"] = {**earlier.get("inference", {}), **row["inference"]}
        row["train"] = {**earlier.get("train", {}), **row["train"]}
        results[model.name] = row
        path.write_text(json.dumps(results, indent=1))
        write_report(results, out)
    return results


# ----------------------------------------------------------------- the report


def _median(figures: dict | None) -> float | None:
    """A variant's median; None where it failed or gave other results than eager (WRONG)."""
    if not figures or figures.get("check", "").startswith("WRONG"):
        return None
    return figures.get("median_us")


def wrong_rows(results: dict) -> list[str]:
    """Every variant, inference or training, whose first call differed from eager's."""
    found = []
    for name, row in results.items():
        for t, timed in row["inference"].items():
            found += [f"{name} ({t} thread{'s' * (int(t) > 1)}): {v}: {f['check']}" for v, f in timed.items()
                      if f.get("check", "").startswith("WRONG")]
        for kind, facts in row["train"].items():
            found += [f"{name} {kind}: {v}: {f['check']}" for v, f in facts["results"].items()
                      if f.get("check", "").startswith("WRONG")]
    return found


def spread(figures: dict | None) -> float:
    """(slowest - fastest) / median over a variant's processes; 0 with one."""
    return (figures or {}).get("spread") or 0.0


def versus_best(row: dict, threads: str) -> str:
    """aotc's speed over the fastest torch.compile variant, or "tie" where the two's spreads
    are wider than the margin between them."""
    timed, s = row["inference"].get(threads, {}), speedups(row, threads)
    rivals = [v for v in RIVALS if v in s]
    if "aotc aoti/cpu" not in s or not rivals:
        return "-"
    best = max(rivals, key=s.get)
    ratio = s["aotc aoti/cpu"] / s[best]
    noise = max(spread(timed.get("aotc aoti/cpu")), spread(timed.get(best)))
    return f"tie ({ratio:.2f}x, spread {100 * noise:.0f}%)" if abs(ratio - 1) <= noise else f"{ratio:.2f}x"


def speedups(row: dict, threads: str) -> dict[str, float]:
    """Each inference variant's speed relative to eager (eager time / its time) at `threads`."""
    timed = row["inference"].get(threads, {})
    eager = _median(timed.get("eager"))
    return {v: eager / _median(timed[v]) for v in INFERENCE if eager and _median(timed.get(v))}


def geomean(values: list[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def family_geomeans(results: dict, threads: str) -> dict[str, dict[str, float]]:
    families: dict[str, dict[str, list[float]]] = {}
    for row in results.values():
        for variant, s in speedups(row, threads).items():
            families.setdefault(row["family"], {}).setdefault(variant, []).append(s)
    return {f: {v: geomean(xs) for v, xs in by.items()} for f, by in families.items()}


# Inductor's published CPU figures (Intel's TorchInductor updates: fp32 inference, freezing
# on; geomean speedup over eager at 1 thread and on one socket's threads) per suite, and the
# families of this suite each is set against: transformers' text and audio models against
# its Hugging Face figure, the vision models against timm's, diffusers' against TorchBench's
# (the repository's samples are their own family, outside every published comparison).
SOURCE = ("Intel's PyTorch team, \"TorchInductor Update 5: CPU backend performance update and deep dive on key "
          "optimizations\", PyTorch dev-discuss, 2023 "
          "(https://dev-discuss.pytorch.org/t/torchinductor-update-5-cpu-backend-backend-performance-update-and-deep-"
          "dive-on-key-optimizations/1117): inductor over eager, fp32 inference with weight prepacking (freezing), "
          "geomeans over the dynamo benchmarks' TorchBench (56 of 60 models passing), Hugging Face (44 of 46) and "
          "timm (61 of 61) suites, on one socket's threads and on one core's single thread. Their models and "
          "batch sizes are not this suite's: a family here is set beside the suite it draws from.")
PUBLISHED = {"Hugging Face": ((1.15, 1.20), ("text", "audio")), "timm": ((1.37, 1.73), ("vision",)),
             "TorchBench": ((1.29, 1.39), ("diffusion",))}  # the samples are in no published suite


def published_rows(results: dict, threads: str, all_threads: bool) -> list[str]:
    """Table rows: each published suite's figure beside this run's aotc and torch.compile
    freezing (static and dynamic) geomeans over the families set against it."""
    rows = []
    for suite, (figures, families) in PUBLISHED.items():
        by = {v: [s[v] for r in results.values() if r["family"] in families
                  for s in [speedups(r, threads)] if v in s]
              for v in ("aotc aoti/cpu", *RIVALS[1:])}
        if not by["aotc aoti/cpu"]:
            continue
        models = len(by["aotc aoti/cpu"])
        cells = [f"{geomean(xs):.2f}x" + (f" ({len(xs)} of {models})" if len(xs) < models else "") if xs else "-"
                 for xs in by.values()]  # a variant an older row never ran is over fewer models: say so
        rows.append(f"| {suite} | {', '.join(families)} | {models} | {figures[1 if all_threads else 0]:.2f}x | "
                    + " | ".join(cells) + " |")
    return rows


SHORT = {"aotc aoti/cpu": "aotc", "aoti raw runner": "raw", "eager": "eager", "torch.compile (warm cache)": "tc",
         "torch.compile freezing (warm cache)": "tc freeze",
         "torch.compile freezing dynamic (warm cache)": "tc freeze dyn"}


def report_md(results: dict) -> str:
    threads = sorted({t for row in results.values() for t in row["inference"]}, key=int)
    wrong = wrong_rows(results)
    lines = ["# aotc benchmark suite", "",
             "Inference speed relative to eager (eager's median time / the variant's; > 1 is faster), "
             "medians of fresh processes, which take turns (each variant's k-th process runs after every "
             "variant's (k-1)-th); ± is a variant's spread, (slowest - fastest) / median over its processes. "
             "`aotc`: `aotc compile` with no flags, loaded with aotc.load; "
             "`raw`: the same package's own runner; `tc`: torch.compile (warm cache); `tc freeze`: torch.compile "
             "with inductor's freezing; `tc freeze dyn`: the same with `dynamic=True` (its linears run on oneDNN, "
             "as a folded package's do, not on MKL's packed sgemm: benchmarks/text_codegen.md, "
             "benchmarks/linear_prepack.md); "
             "`aotc vs best tc`: aotc over the fastest of the three, a tie where either's "
             "spread is wider than the margin. Compile: `aotc compile --no-cache` wall time, and torch.compile's "
             "cold-cache first call.", "",
             "Before it is timed, every variant's first call is compared with eager's on the same inputs, within "
             "the bundle's tolerances: outputs for inference, the loss for a training step. A variant that differs "
             "is WRONG: it counts in no ratio or geomean. "
             + (f"**{len(wrong)} WRONG:** " + "; ".join(wrong) if wrong else "None was WRONG in this run."), "",
             provenance(results), "", folding(results), ""]
    for t in threads:
        lines += [f"## Inference, {t} thread{'s' * (int(t) > 1)}", "",
                  "| model | family | eager | aotc | raw | tc | tc freeze | tc freeze dyn | aotc vs best tc | aotc compile "
                  "| tc compile | bundle |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for name, row in results.items():
            timed = row["inference"].get(t)
            if not timed:
                continue
            s = speedups(row, t)
            eager = _median(timed.get("eager"))
            cold = (timed.get("torch.compile (cold cache)") or {}).get("cold_start_s")
            cells = [_cell(s.get(v), timed.get(v)) for v in INFERENCE if v != "eager"]
            lines.append(f"| {name} | {row['family']} | {eager / 1e3:.2f} ms ±{100 * spread(timed.get('eager')):.0f}% | "
                         + " | ".join(cells) + f" | {versus_best(row, t)} | {row['compile']['compile_s']:.0f} s | "
                         f"{cold:.0f} s | {row['compile']['size_bytes'] / 2**20:.1f} MiB |" if eager and cold
                         else f"| {name} | {row['family']} | failed | | | | | | | | | |")
        lines += ["", f"Geomean speedup over eager per family ({t} thread{'s' * (int(t) > 1)}):", "",
                  "| family | models | aotc | raw | tc | tc freeze | tc freeze dyn |", "|---|---|---|---|---|---|---|"]
        for family, g in family_geomeans(results, t).items():
            count = sum(1 for r in results.values() if r["family"] == family and t in r["inference"])
            lines.append(f"| {family} | {count} | " + " | ".join(
                f"{g[v]:.2f}x" if g.get(v) else "-" for v in INFERENCE if v != "eager") + " |")
        every = t == threads[-1] and len(threads) > 1  # the most threads run: this machine's every core
        lines += ["", f"Against inductor's published CPU figures ({'all threads' if every else 'single thread'}):", "",
                  "| published suite | families here | models | published | aotc | tc freeze | tc freeze dyn |",
                  "|---|---|---|---|---|---|---|", *published_rows(results, t, every), "", f"Source: {SOURCE}"]
        lines.append("")
    trained = {n: r for n, r in results.items() if r["train"]}
    if trained:
        lines += ["## Training steps (speed relative to eager's same step)", "",
                  "Eager's step in torch.optim's for-loop implementation (CPU's default), and the faster of its "
                  "`foreach=True` and `fused=True` ones; `tc`: torch.compile of the model, `tc step`: of the whole "
                  "step (forward, backward and `optimizer.step()`), both with eager's random kernels (inductor's "
                  "`fallback_random`, as aotc compiles): dropout draws eager's masks, so the loss is checked. Every "
                  "variant's process keeps glibc's freed heap between steps, as aotc's runtime does for itself "
                  "(aotc.runtime.heap): eager's steps gain 3% by it (gpt2), aotc's fused step 17%.", "",
                  "| model | step | eager | eager, best of foreach and fused | aotc | tc | tc step | aotc compile |",
                  "|---|---|---|---|---|---|---|---|"]
        for name, row in trained.items():
            for kind, facts in row["train"].items():
                res = facts["results"]
                eager = _median(res.get("eager"))
                aotc = next((r for v, r in res.items() if v.startswith("aotc")), None)
                ratio = (lambda r: "-" if r is None else _cell(eager / _median(r) if _median(r) else None, r))
                cells = [ratio(_best_eager(res)), ratio(aotc), ratio(res.get("torch.compile (warm cache)")),
                         ratio(res.get("torch.compile whole step (warm cache)"))]
                lines.append(f"| {name} | {kind} | {eager / 1e3:.2f} ms | " + " | ".join(cells)
                             + f" | {facts['compile']['compile_s']:.0f} s |" if eager else f"| {name} | {kind} | failed |")
        lines.append("")
        for label, kinds in (("forward+backward", ("forward+backward",)), ("fused step", ("joint+sgd", "joint+adamw"))):
            for against, pick_row in (("eager's", lambda res: res.get("eager")),
                                      ("the best eager step's (foreach or fused)", _best_eager),
                                      ("torch.compile of the whole step's",
                                       lambda res: res.get("torch.compile whole step (warm cache)"))):
                ratios = [r for row in trained.values() for k, f in row["train"].items() if k in kinds
                          if (r := _train_speedup(f, pick_row)) is not None]
                if ratios:
                    lines.append(f"Geomean of aotc's {label} over {against}: {geomean(ratios):.2f}x "
                                 f"({len(ratios)} rows).")
        lines.append("")
    return "\n".join(lines)


def _cell(speedup: float | None, figures: dict | None) -> str:
    """A ratio with its variant's spread over processes; WRONG or failed where it has none,
    and "not run" for a variant the row's run did not have (an older suite's row)."""
    if speedup is not None:
        return f"{speedup:.2f}x ±{100 * spread(figures):.0f}%"
    if figures is None:
        return "not run"
    return "WRONG" if (figures or {}).get("check", "").startswith("WRONG") else "failed"


def _best_eager(res: dict) -> dict | None:
    """The faster of eager's foreach and fused steps (the strongest eager step a user can pick)."""
    timed = [res[v] for v in ("eager foreach", "eager fused") if _median(res.get(v))]
    return min(timed, key=_median) if timed else None


def _train_speedup(facts: dict, baseline=lambda res: res.get("eager")) -> float | None:
    res = facts["results"]
    base = _median(baseline(res))
    aotc = _median(next((r for v, r in res.items() if v.startswith("aotc")), None))
    return base / aotc if base and aotc else None


def write_report(results: dict, out: Path) -> None:
    (out / "report.md").write_text(report_md(results))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # make bench-suite installs it; the table is written either way
        return
    threads = sorted({t for row in results.values() for t in row["inference"]}, key=int)
    if not threads:  # training rows alone: the table says it all
        return
    fig, axes = plt.subplots(len(threads), 1, figsize=(12, 4 * len(threads)), squeeze=False)
    variants = [v for v in INFERENCE if v != "eager"]
    for ax, t in zip(axes[:, 0], threads):
        names = [n for n, r in results.items() if t in r["inference"]]
        width = 0.8 / len(variants)
        for k, v in enumerate(variants):
            ax.bar([i + k * width for i in range(len(names))],
                   [speedups(results[n], t).get(v, 0) for n in names], width, label=SHORT[v])
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(names))], names, rotation=45, ha="right")
        ax.set_ylabel("speed vs eager")
        ax.set_title(f"inference, {t} thread{'s' * (int(t) > 1)}")
        ax.legend(ncol=len(variants), fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "report.png", dpi=100)
    plt.close(fig)
