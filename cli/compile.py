"""`aotc compile`: AOTInductor artifacts for a model file or an existing bundle."""

from __future__ import annotations

import time
from pathlib import Path

import click

from aotc.cli._common import (
    Phases,
    console,
    debug_option,
    emit_json,
    handles_errors,
    human_size,
    is_signed,
    json_option,
    note_signature_dropped,
)
from aotc.cli.export import exports, graph_summary, print_graph_table, print_regions, run_export
from aotc.cli.options import ExportOptions

# Commands import the library inside their bodies: `aotc --help` imports no torch (STYLE.md).


def _is_bundle(target: str) -> bool:
    from aotc.runtime.regional import is_regional

    return (Path(target) / "manifest.json").is_file() or is_regional(target)


@click.command("compile")
@click.argument("target", metavar="MODEL|BUNDLE")
@click.option("--device", "devices", multiple=True, default=("cpu",), show_default=True,
              help="cpu or cuda (repeatable).")
@click.option("--cache-dir", type=click.Path(path_type=Path),
              help="Compile cache [default: $AOTC_CACHE_DIR or ~/.cache/aotc].")
@click.option("--no-cache", is_flag=True, help="Compile again even if an identical graph was compiled before.")
@click.option("--no-fold", is_flag=True,
              help="Keep the weights as inputs of the CPU inference graphs instead of compiling them frozen "
                   "with the weights folded in at load.")
@click.option("--freeze", is_flag=True,
              help="Embed the folded weights in the inference graphs' packages (no folding at load; the loaded "
                   "module then refuses new weights).")
@click.option("--profile", "profiles", multiple=True, metavar="DIM=LO..HI",
              help="A shape profile: one more package per graph, compiled for these sizes alone (repeatable; "
                   "DIM is INPUT:INDEX or a dim symbol; several dims: x:0=1,x:1=2..64).")
@click.option("--no-generic", is_flag=True,
              help="With --profile: no package for every size; a call outside every profile is refused.")
@exports
@json_option
@debug_option
@handles_errors
def compile_command(target: str, devices: tuple[str, ...], cache_dir: Path | None, no_cache: bool, no_fold: bool,
                    freeze: bool, profiles: tuple[str, ...], no_generic: bool,
                    export: ExportOptions, as_json: bool, debug: bool):
    """Compile every graph of a bundle with AOTInductor, for each --device.

    TARGET is a model file (exported first, as by aotc export) or an existing bundle,
    which gets compiled/<device>/<kind>.pt2 (and with --onnx, onnx/<kind>.onnx) added in
    place.

    \b
    Examples:
      aotc compile sample_models/mlp.py -o bundles/mlp
      aotc compile sample_models/mlp.py --autograd -o bundles/mlp-fb
      aotc compile bundles/mlp --device cuda
      aotc compile bundles/resnet18 --freeze
      aotc compile bundles/mlp --profile x:0=1 --profile x:0=2..16
    """
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from aotc.compiler import CompileOptions
    from aotc.compiler import compile as compile_bundle
    from aotc.devices import resolve_device

    for d in devices:
        resolve_device(d)  # fail before exporting
    out = console()
    started = time.perf_counter()
    phases = Phases(out)
    was_signed = _is_bundle(target) and is_signed(target)  # --onnx and compiling drop it
    try:
        if _is_bundle(target):
            if export.output and Path(export.output).resolve() != Path(target).resolve():
                raise click.UsageError("-o is for model files; a bundle is compiled in place.")
            bundle_path = Path(target)
            if export.with_onnx:
                from aotc.exporters.formats import BuildOptions, add_artifacts

                phases.start("onnx")
                add_artifacts(bundle_path, "onnx", options=BuildOptions(opset=export.opset))
                phases.finish()
        else:
            _, bundle = run_export(phases, target, export)
            bundle_path = bundle.path
    finally:
        phases.abort()

    graph_times: dict[str, float] = {}
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                  console=out, transient=False) as progress:
        tasks: dict[tuple[str, str], tuple[int, float]] = {}

        def on_graph(kind: str, device: str, event: str) -> None:
            if event == "start":
                task = progress.add_task(f"compile {kind} ({device})", total=1)
                tasks[(kind, device)] = (task, time.perf_counter())
                return
            task, t0 = tasks[(kind, device)]
            key = f"{device}/{kind}"  # a graph compiled for shape profiles has one package each
            n = sum(k.split(" ")[0] == key for k in graph_times)
            graph_times[key + (f" #{n + 1}" if n else "")] = time.perf_counter() - t0
            note = "cached" if event == "cached" else "compiled"
            progress.update(task, completed=1, description=f"{note} {kind} ({device})")

        options = CompileOptions(cache_dir=cache_dir, use_cache=not no_cache, freeze=freeze, fold=not no_fold,
                                 profiles=profiles, generic=not no_generic, on_graph=on_graph)
        bundle = compile_bundle(bundle_path, devices=devices, options=options)
    total = time.perf_counter() - started
    note_signature_dropped(out, was_signed, "compiling")
    from aotc.runtime.regional import RegionalBundle

    if isinstance(bundle, RegionalBundle):
        summary = graph_summary(bundle) | {"seconds": {**{f"compile {k}": round(v, 3) for k, v in graph_times.items()},
                                                       "total": round(total, 3)}}
        if as_json:
            emit_json(summary)
        else:
            print_regions(out, summary)
            out.print(f"{human_size(summary['size_bytes'])} in {total:.1f} s")
        return
    summary = graph_summary(bundle) | {
        "devices": list(devices),
        "compiled": {
            f.path: {"size_bytes": f.size, "build": f.build}
            for f in bundle.manifest.files if f.kind == "compiled"
        },
        "seconds": {**{k: round(v, 3) for k, v in phases.times.items()},
                    **{f"compile {k}": round(v, 3) for k, v in graph_times.items()}, "total": round(total, 3)},
    }
    if as_json:
        emit_json(summary)
        return
    print_graph_table(out, summary)
    frozen = {p: e["size_bytes"] for p, e in summary["compiled"].items() if (e["build"] or {}).get("frozen") == "true"}
    if frozen:  # each holds its own copy of the weights
        out.print("frozen (weights folded in; the loaded module refuses new weights): "
                  + ", ".join(f"{p} {human_size(size)}" for p, size in frozen.items()))
    sizes = ", ".join(f"{k} {human_size(v)}" for k, v in summary["size"].items())
    out.print(f"{human_size(summary['size_bytes'])} ({sizes}) in {total:.1f} s")
