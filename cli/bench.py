"""`aotc bench`: a bundle's backends against eager and torch.compile."""

from __future__ import annotations

from pathlib import Path

import click

from aotc.cli._common import (
    console,
    debug_option,
    emit_json,
    handles_errors,
    json_option,
    public_key_option,
    record_results,
    step_progress,
    trust_option,
)

# Commands import the library inside their bodies: `aotc --help` imports no torch (STYLE.md).


@click.command("bench")
@click.argument("bundle", type=click.Path(path_type=Path), required=False)
@click.option("--suite", is_flag=True, help="Run the benchmark suite (real model definitions, each compiled with "
              "no flags) instead of one bundle; writes results.json, report.md and report.png to --out.")
@click.option("--models", help="--suite: comma-separated model names [default: all].")
@click.option("--out", type=click.Path(path_type=Path), default=Path("benchmarks/suite"), show_default=True,
              help="--suite: where results and bundles go.")
@click.option("--no-train", is_flag=True, help="--suite: inference rows only.")
@click.option("--no-inference", is_flag=True, help="--suite: training rows only (of the models that have them).")
@click.option("--stale", is_flag=True, help="--suite: only the models with no row, or a part that ran on other aotc "
              "code than the checkout's or on a CPU of another instruction set (the suite runs in parts; the "
              "report counts the parts on this code).")
@click.option("--model", help="Model file (or pkg.mod:factory) for the eager and torch.compile baselines "
              "[default: for a bundle exported from a Hugging Face folder, rebuilt from its hf/config.json].")
@click.option("--backend", "backends", multiple=True, help="fx, aoti or onnx (repeatable) [default: all present].")
@click.option("--baselines", default="eager,torch.compile,aot_compile,raw", show_default=True,
              help="Comma-separated: eager, torch.compile (with and without freezing), torch.compile dynamic "
                   "(freezing with dynamic=True, inference), aot_compile (torch.compile's saved artifact), "
                   "raw (the AOTInductor package's own runner, no aotc code); 'none' for the bundle alone.")
@click.option("--iters", type=int, help="Timed calls per variant [default: 200; --suite: 30].")
@click.option("--warmup", default=20, show_default=True, help="Untimed calls before timing.")
@click.option("--device", default="cpu", show_default=True)
@click.option("--threads", type=int, help="torch threads in each variant's process [default: 1; --suite: 1 and "
              "every core].")
@click.option("--repeats", default=1, show_default=True,
              help="Fresh processes per variant; figures are their medians, with the spread.")
@click.option("--train", is_flag=True, help="Time whole training steps (forward, backward, SGD step).")
@click.option("--record", is_flag=True, help="Keep the results in the bundle (records/bench.json) for aotc report.")
@click.option("--sizes", help="DIM=N,N,...: time a compiled bundle at these sizes of one dynamic dim, in one process "
              "(5 interleaved rounds): the package it runs there (a shape profile's: aotc compile --profile), its "
              "generic package alone, and eager (--model; else the fx graph). E.g. --sizes x:0=1,8,64.")
@trust_option
@public_key_option
@json_option
@debug_option
@handles_errors
def bench_command(bundle, suite, models, out, no_train, no_inference, stale, model, backends, baselines, iters, warmup, device, threads,
                  repeats, train, record, sizes, trusted, public_keys, as_json, debug):
    """Time every backend of BUNDLE against eager, torch.compile, torch.compile's
    aot_compile artifact and the raw AOTInductor runner, side by side.

    Each variant runs in a fresh process: cold start is the time from process start to
    the first output; steady state is the median and p90 of --iters calls. With
    --repeats, the variants' processes take turns. A baseline that fails is reported in
    its row; an aotc backend that fails is an error. Each variant's first call is checked
    against eager's (or the bundle's reference): one that differs is WRONG, counts in no
    ratio, and the exit code is 1.

    \b
    Examples:
      aotc bench bundles/tiny_transformer --model sample_models/tiny_transformer.py
      aotc bench bundles/mlp-fb --baselines none --train --json
      aotc bench --suite --models bert,resnet --repeats 3
      aotc bench bundles/resnet --sizes pixel_values:0=1,8,32 --model resnet.py
    """
    if suite:
        if no_train and no_inference:
            raise click.UsageError("--no-train and --no-inference leave nothing to time.")
        return _suite(models, out, threads, repeats, iters or 30, not no_train, as_json, not no_inference, stale)
    if stale:
        raise click.UsageError("--stale picks the suite's models to run again: it goes with --suite.")
    if bundle is None:
        raise click.UsageError("name a BUNDLE to time, or --suite.")
    threads, iters = threads or 1, iters or 200
    if sizes:
        return _sizes(bundle, sizes, model, threads, device, trusted, public_keys, as_json)
    from aotc.tools.bench import BASELINES
    from aotc.tools.bench import as_json as results_json
    from aotc.tools.bench import bench

    chosen = () if baselines.strip() == "none" else tuple(b.strip() for b in baselines.split(",") if b.strip())
    unknown = set(chosen) - set(BASELINES)
    if unknown:
        raise click.BadParameter(f"unknown baseline(s) {sorted(unknown)}; use {', '.join(BASELINES)} or none.",
                                 param_hint="--baselines")
    out = console()
    with step_progress(out) as progress:
        task = progress.add_task("starting", total=None)
        done = []

        def on_variant(name: str) -> None:
            # each variant's own elapsed time: a cold torch.compile takes minutes, a load seconds
            progress.reset(task, description=f"timing {name} (variant {len(done) + 1})", total=None)
            done.append(name)

        results = bench(bundle, backends=backends or None, baselines=chosen, iters=iters, warmup=warmup,
                        device=device, train=train, threads=threads, model=model, trusted_subclasses=trusted,
                        repeats=repeats, on_variant=on_variant, public_keys=public_keys)
    data = {"bundle": str(bundle), "device": device, "train": train, "threads": threads, "repeats": repeats,
            "iters": iters, "results": results_json(results)}
    if record:
        from aotc.bundle.files import Bundle
        from aotc.runtime.regional import is_regional
        from aotc.tools.bench import times_training

        if is_regional(bundle):
            out.print("[yellow]not recorded[/]: a regional bundle keeps no records")
        else:  # what was timed: a joint bundle's calls are training steps without --train
            record_results(bundle, "bench", {**data, "train": times_training(Bundle.open(bundle), train)}, out)
    wrong = [r for r in results if r.wrong]
    if as_json:
        emit_json(data)
    else:
        out.print(results_table(results, f"bench {bundle} ({device}, {threads} thread{'s' if threads > 1 else ''}"
                                         f"{', training step' if train else ''})"))
        out.print(f"{iters} timed calls per variant after {warmup} warm-up calls; ratios > 1 mean faster.")
    if wrong:
        raise click.exceptions.Exit(_say_wrong(wrong, out))


def _sizes(bundle, sizes: str, model, threads: int, device: str, trusted, public_keys, as_json: bool) -> None:
    """--sizes: each size's package and times (aotc/tools/bench_sizes.py); exit code 1 where a
    variant's outputs differ from the reference's."""
    import dataclasses

    from rich.table import Table

    from aotc.tools.bench_sizes import bench_sizes

    out = console()
    with step_progress(out) as progress:
        task = progress.add_task("loading", total=None)
        results = bench_sizes(bundle, sizes, model=model, threads=threads, device=device, trusted=trusted,
                              public_keys=public_keys,
                              on_size=lambda dim, n: progress.reset(task, description=f"timing {dim}={n}", total=None))
    if as_json:
        emit_json({"bundle": str(bundle), "device": device, "threads": threads,
                   "sizes": [dataclasses.asdict(r) | {"speedup": r.speedup} for r in results]})
    else:
        names = list(dict.fromkeys(n for r in results for n in [*r.ms, *r.wrong]))
        table = Table(title=f"bench {bundle} at {results[0].dim} = {sizes.partition('=')[2]} ({device}, {threads} "
                            f"thread{'s' if threads > 1 else ''}; ms per call, median of 5 rounds)", title_justify="left")
        for col in ("size", "package", *names, "vs\ngeneric"):
            table.add_column(col, justify="right" if col not in ("package",) else "left")
        for r in results:
            cells = [f"{r.ms[n]:.3f}" if n in r.ms else "[red]WRONG[/red]" for n in names]
            table.add_row(str(r.size), r.package, *cells, f"{r.speedup:.2f}x" if r.speedup else "-")
        out.print(table)
    wrong = [f"{r.dim}={r.size}, {name}: {why}" for r in results for name, why in r.wrong.items()]
    for line in wrong:
        out.print(f"[red]WRONG {line}[/red]")
    if wrong:
        raise click.exceptions.Exit(1)


def _say_wrong(wrong, out) -> int:
    """Names the variants whose first call differs from eager's; the exit code (1)."""
    for r in wrong:
        out.print(f"[red]{r.variant}: {r.check}[/red]")
    out.print(f"[red]{len(wrong)} variant(s) give other results than eager: their timings do not count.[/red]")
    return 1


def results_table(results, title: str):
    """The results as a rich Table that fits a 100-column terminal, then the baselines that
    failed, with their errors: each variant's speed relative to eager, torch.compile (warm
    cache) and the raw AOTInductor runner, where those ran, and the spread with several
    runs. Calls per second and every run's figures are in --json."""
    from rich.console import Group
    from rich.table import Table

    from aotc.number_format import human_time_us
    from aotc.tools.bench import RAW

    ref = {r.variant: r for r in results if r.median_us and not r.wrong}
    bases = [(ref[name], label) for name, label in (("eager", "vs\neager"), ("torch.compile (warm cache)",
             "vs torch\n.compile"), (RAW, "vs raw\nrunner")) if name in ref]
    spread = any(r.spread is not None for r in results)
    table = Table(title=title, title_justify="left")
    table.add_column("variant", ratio=1)  # the one column that wraps when the terminal is narrow
    for col in ("cold\nstart", "median", *(["spread"] if spread else []), "p90", "peak\nMiB", "check",
                *(b for _, b in bases)):
        table.add_column(col, justify="right", no_wrap=True)
    failed = []
    for r in results:
        if not r.median_us:
            failed.append(f"[red]{r.variant} failed[/red]: {r.error}")
            table.add_row(f"{r.variant} [red](failed)[/red]", *["-"] * (len(table.columns) - 1))
            continue
        table.add_row(
            r.variant, f"{r.cold_start_s:.2f} s", human_time_us(r.median_us),
            *([f"{100 * r.spread:.0f}%" if r.spread is not None else "-"] if spread else []),
            human_time_us(r.p90_us), f"{r.peak_memory_mib:.0f}", _check_cell(r.check),
            *((f"{base.median_us / r.median_us:.2f}x" if not r.wrong else "-") for base, _ in bases),
        )
    return Group(table, *failed)


def _check_cell(check: str) -> str:
    """Its first call against eager's: "same", WRONG, or "-" (eager itself, or nothing to
    compare with: --json says why)."""
    if check.startswith("WRONG"):
        return "[red]WRONG[/red]"
    return "same" if check == "pass" else "-"


def _suite(models: str | None, out: Path, threads: int | None, repeats: int, iters: int, train: bool,
           as_json: bool, inference: bool = True, stale: bool = False) -> None:
    import os
    import time

    from aotc.tools.bench_suite import run_suite, wrong_rows

    console_out = console()
    names = [m.strip() for m in models.split(",") if m.strip()] if models else None
    counts = [threads] if threads else sorted({1, os.cpu_count() or 1})
    started = time.perf_counter()
    with step_progress(console_out) as progress:
        task = progress.add_task("starting", total=None)

        def say(what: str) -> None:
            progress.reset(task, description=what, total=None)

        results = run_suite(names, out, counts, repeats=repeats, iters=iters, train=train, say=say,
                            inference=inference, stale=stale)
    if as_json:
        emit_json(results)
    else:
        console_out.print((out / "report.md").read_text(), markup=False, highlight=False)
        console_out.print(f"written to {out}/ (results.json, report.md, report.png) in "
                          f"{time.perf_counter() - started:.0f} s")
    wrong = wrong_rows(results)
    if wrong:
        for line in wrong:
            console_out.print(f"[red]{line}[/red]")
        raise click.exceptions.Exit(1)
