"""`aotc export`: capture a model file into a bundle."""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import click

from aotc.cli._common import Phases, console, debug_option, emit_json, handles_errors, human_size, json_option
from aotc.cli.options import ExportOptions, grouped
from aotc.errors import AotcError
from aotc.sources.hf_folder import TASKS as HF_TASKS

# Commands import the library inside their bodies: `aotc --help` imports no torch (STYLE.md).


def parse_dynamic(values: tuple[str, ...], flag: str = "--dynamic") -> dict[str, dict[int, str]]:
    """`x:0` -> {"x": {0: "x_dim0"}}: input name, dim index, and a name for the Dim."""
    dims: dict[str, dict[int, str]] = {}
    for value in values:
        name, sep, dim = value.rpartition(":")
        if not sep or not name or not dim.isdigit():
            raise click.BadParameter(
                f"'{value}' is not NAME:DIM (an input name and a dimension index, e.g. x:0).",
                param_hint=flag,
            )
        dims.setdefault(name, {})[int(dim)] = f"{name.replace('.', '_')}_dim{dim}"
    return dims


def without_static(spec, static: dict[str, dict[int, str]]):
    """`spec` (the merged dynamic_shapes) with the dims of --static NAME:DIM static again."""
    if not static:
        return spec
    if not isinstance(spec, dict):
        found = "no dynamic_shapes is declared" if spec is None else f"dynamic_shapes is a {type(spec).__name__}"
        raise AotcError(
            f"--static makes a declared dynamic dim static, but {found}; --static takes dims of a "
            "dynamic_shapes dict keyed by input name."
        )
    spec = dict(spec)
    for name, dims in static.items():
        entry = spec.get(name)
        if isinstance(entry, (list, tuple)):
            entry = dict(enumerate(entry))
        if not isinstance(entry, dict) or not set(dims) <= {k for k, v in entry.items() if v is not None}:
            raise click.BadParameter(
                f"input '{name}' has no dynamic dim {', '.join(map(str, sorted(dims)))} to make static "
                f"(dynamic_shapes['{name}'] is {entry!r}).",
                param_hint="--static",
            )
        spec[name] = {k: v for k, v in entry.items() if k not in dims}
    return spec


def merge_dynamic(file_spec, cli_dims: dict[str, dict[int, str]], static: dict[str, dict[int, str]] | None = None):
    if not cli_dims:
        return without_static(file_spec, static or {})
    from torch.export import Dim

    if file_spec is not None and not isinstance(file_spec, dict):
        raise AotcError(
            "--dynamic cannot be combined with a model file whose dynamic_shapes is a "
            f"{type(file_spec).__name__}; write dynamic_shapes as a dict keyed by input name."
        )
    merged = {k: dict(v) if isinstance(v, dict) else v for k, v in (file_spec or {}).items()}
    for name, dims in cli_dims.items():
        entry = merged.setdefault(name, {})
        if not isinstance(entry, dict):
            raise AotcError(f"dynamic_shapes['{name}'] in the model file is not a dict of dims; cannot add --dynamic {name}:...")
        for dim, dim_name in dims.items():
            entry[dim] = Dim(dim_name)
    return without_static(merged, static or {})


def graph_options(fn):
    fn = click.option("--autograd", is_flag=True, help="Capture forward + backward graphs (an autograd.Function).")(fn)
    fn = click.option("--joint", is_flag=True, help="Capture one training-step graph: loss, gradients, buffer updates.")(fn)
    return fn


def mode_from_flags(joint: bool, autograd: bool) -> tuple[str, ...]:
    if joint and autograd:
        raise click.UsageError("--joint and --autograd are exclusive: choose one graph kind.")
    if joint:
        return ("joint",)
    if autograd:
        return ("forward", "backward")
    return ("inference",)


def export_options(fn):
    """The options of `aotc export`, shared with `aotc compile MODEL`."""
    for decorator in reversed([
        click.option("-o", "--output", type=click.Path(path_type=Path), help="Bundle directory [default: bundles/<model name>]."),
        graph_options,
        click.option("--train", is_flag=True, help="Capture the inference graph with the model in train mode."),
        click.option("--entry", help="Factory function to call instead of build_model."),
        click.option("--task", type=click.Choice(list(HF_TASKS)),
                     help="For a Hugging Face model folder: the head to build [default: from config.json's architectures]."),
        click.option("--max-cache-len", type=click.IntRange(min=2), default=256, show_default=True,
                     help="text-generation folders: tokens the static KV cache holds (prompt + new tokens)."),
        click.option("--batch-size", type=click.IntRange(min=1), default=1, show_default=True,
                     help="text-generation folders: sequences generated at once."),
        click.option("--checkpoint", type=click.Path(path_type=Path), help="Weights (.safetensors, or .pt/.bin as weights only)."),
        click.option("--dynamic", multiple=True, metavar="NAME:DIM", help="Mark dim DIM of input NAME dynamic (repeatable)."),
        click.option("--static", multiple=True, metavar="NAME:DIM",
                     help="Keep dim DIM of input NAME static though the model file declares it dynamic (repeatable)."),
        click.option(
            "--partitioner", type=click.Choice(["min-cut", "default"]), default="min-cut", show_default=True,
            help="How --autograd splits the joint graph into forward and backward.",
        ),
        click.option("--force", is_flag=True, help="Replace an existing bundle at the output path."),
        click.option("--onnx", "with_onnx", is_flag=True, help="Also write onnx/<kind>.onnx (torch.onnx, dynamo)."),
        click.option("--opset", type=int, help="ONNX opset [default: 18]."),
        click.option("--regions", metavar="auto|PATTERN",
                     help="For a model torch cannot capture whole: export its submodules instead, 'auto' (the "
                          "largest that capture) or those whose FQN matches PATTERN (e.g. 'blocks.*'); apply "
                          "them to the model with aotc.apply."),
        click.option("--optimizer", type=click.Choice(["sgd", "adamw"]),
                     help="--joint: put this optimizer's update in the graph (train_step is then the whole step); "
                          "hyperparameters default to torch.optim's."),
        click.option("--lr", type=float, help="--optimizer: learning rate."),
        click.option("--momentum", type=float, help="--optimizer sgd: momentum."),
        click.option("--weight-decay", type=float, help="--optimizer: weight decay."),
        click.option("--nesterov", is_flag=True, help="--optimizer sgd: Nesterov momentum."),
        click.option("--betas", metavar="B1,B2", help="--optimizer adamw: betas."),
        click.option("--eps", type=float, help="--optimizer adamw: eps."),
    ]):
        fn = decorator(fn)
    return fn


def exports(fn):
    """`export_options`, passed to the command as one `export=ExportOptions(...)`."""
    return export_options(grouped(ExportOptions, "export")(fn))


def run_export(phases: Phases, model: str, options: ExportOptions):
    """Load the model file and export it, reporting phases; returns (spec, bundle)."""
    o = options
    graphs = mode_from_flags(o.joint, o.autograd)
    cli_dims = parse_dynamic(o.dynamic)
    static_dims = parse_dynamic(o.static, "--static")
    if o.output is not None:
        from aotc.bundle.files import check_target, check_writable

        check_target(o.output, o.force)  # before loading a model for seconds
        check_writable(o.output)
    phases.start("load")
    from aotc.bundle.files import check_target
    from aotc.sources.model_file import load_model

    spec = load_model(model, entry=o.entry, checkpoint=o.checkpoint, task=o.task)
    target = o.output or Path("bundles") / spec.name
    check_target(target, o.force)
    if "joint" in graphs and spec.loss is None:
        raise AotcError(
            f"Model file '{spec.source}' defines no loss(outputs, *inputs); --joint needs one "
            "that returns a scalar tensor."
        )
    if spec.task == "text-generation" and graphs == ("inference",):
        if o.with_onnx:
            raise AotcError("--onnx is not supported for generation bundles (prefill + decode); export without it.")
        # a causal LM folder: prefill and decode graphs over a static KV cache, for aotc.generate
        from aotc.tools.generation_export import export_generation

        bundle = export_generation(
            spec.module, target, batch_size=o.batch_size, max_cache_len=o.max_cache_len, force=o.force, name=spec.name,
            source=spec.source, task=spec.task, assets=spec.assets, on_phase=phases.start,
        )
        phases.finish()
        return spec, bundle
    if o.regions:
        if o.joint:
            raise AotcError(
                "--regions cannot take --joint: a joint graph is one whole training step, loss included, and a "
                "regional bundle leaves the model's own Python (and the loss) outside its graphs. Export the regions "
                "with --autograd (each region's backward runs under the loss's .backward()), or make the model "
                "capturable whole for --joint (aotc export without --regions lists what breaks it)."
            )
        if o.with_onnx:
            raise AotcError("--regions takes inference or --autograd graphs, without --onnx.")
        from aotc.tools.regions import export_regions

        phases.start("regions")
        bundle = export_regions(
            spec.module, (spec.args, spec.kwargs), target, regions=o.regions, graphs=graphs,
            dynamic_shapes=merge_dynamic(spec.dynamic_shapes, cli_dims, static_dims), train=o.train, force=o.force,
            name=spec.name, source=spec.source,
        )
        phases.finish()
        return spec, bundle
    from aotc import api
    from aotc.errors import RangeNarrowedWarning

    settings = api.ExportOptions(
        partitioner=o.partitioner, train=o.train, force=o.force, name=spec.name, source=spec.source,
        checkpoint=str(spec.checkpoint) if spec.checkpoint else None, task=spec.task, assets=spec.assets,
        on_phase=phases.start,
    )
    with warnings.catch_warnings():  # the summary says it, in a note per dim
        warnings.simplefilter("ignore", RangeNarrowedWarning)
        bundle = api.export(
            spec.module, (spec.args, spec.kwargs), target, graphs=graphs, loss=spec.loss,
            loss_inputs=spec.loss_inputs if "joint" in graphs else None,
            dynamic_shapes=merge_dynamic(spec.dynamic_shapes, cli_dims, static_dims),
            optimizer=build_optimizer(o, spec.module), options=settings,
        )
    if o.with_onnx:
        phases.start("onnx")
        from aotc.exporters.formats import BuildOptions, add_artifacts

        bundle = add_artifacts(bundle.path, "onnx", options=BuildOptions(opset=o.opset))
    phases.finish()
    return spec, bundle


def build_optimizer(o: ExportOptions, module):
    """The torch.optim optimizer --optimizer and its hyperparameter options name, or None."""
    given = {"lr": o.lr, "momentum": o.momentum, "weight_decay": o.weight_decay, "eps": o.eps, "betas": o.betas}
    if o.optimizer is None:
        named = [f"--{k.replace('_', '-')}" for k, v in given.items() if v is not None] + (["--nesterov"] if o.nesterov else [])
        if named:
            raise click.UsageError(f"{', '.join(named)} set the hyperparameters of --optimizer; name the optimizer.")
        return None
    if not o.joint:
        raise click.UsageError("--optimizer needs --joint: the update runs after the gradients, in the joint graph.")
    allowed = {"sgd": {"lr", "momentum", "weight_decay"}, "adamw": {"lr", "weight_decay", "eps", "betas"}}[o.optimizer]
    wrong = [f"--{k.replace('_', '-')}" for k, v in given.items() if v is not None and k not in allowed]
    if wrong or (o.nesterov and o.optimizer != "sgd"):
        raise click.UsageError(f"--optimizer {o.optimizer} takes no {', '.join(wrong or ['--nesterov'])}.")
    kwargs = {k: v for k, v in given.items() if v is not None}
    if "betas" in kwargs:
        try:
            kwargs["betas"] = tuple(float(b) for b in kwargs["betas"].split(","))
        except ValueError:
            kwargs["betas"] = ()
        if len(kwargs["betas"]) != 2:
            raise click.UsageError(f"--betas takes two numbers, B1,B2; got {o.betas!r}.")
    import torch

    try:
        if o.optimizer == "sgd":
            return torch.optim.SGD(module.parameters(), **kwargs, nesterov=o.nesterov)
        return torch.optim.AdamW(module.parameters(), **kwargs)
    except ValueError as e:  # torch.optim's own check of the values, e.g. nesterov without momentum
        raise click.UsageError(f"--optimizer {o.optimizer}: {e}") from e


def graph_summary(bundle) -> dict:
    from aotc.bundle.summary import describe, describe_regions
    from aotc.runtime.regional import RegionalBundle
    from aotc.tools.size_check import narrowed

    if isinstance(bundle, RegionalBundle):
        return describe_regions(bundle)

    info = describe(bundle)
    return {
        "narrowed": narrowed(bundle.metadata, [u.name for u in bundle.signature.user_inputs]),
        "bundle": str(bundle.path),
        "model": info["manifest"]["model"]["name"],
        "source": info["manifest"]["model"]["source"],
        "graphs": {
            k: {"nodes": g["num_nodes"], "inputs": g["num_inputs"], "outputs": g["num_outputs"]}
            for k, g in info["graphs"].items()
        },
        "size_bytes": info["size"]["total"],
        "size": {k: v for k, v in info["size"].items() if k != "total"},
    }


def print_regions(out, summary: dict) -> None:
    """The regions of a regional bundle, the graphs they share, and the break report."""
    from rich.table import Table

    table = Table(title=f"{summary['model']} -> {summary['bundle']} (regions)", title_justify="left")
    for col in ("region", "class", "group", "graphs", "parameters"):
        table.add_column(col, justify="right" if col == "parameters" else "left")
    for r in summary["regions"]:
        table.add_row(r["fqn"], r["class"], r["group"], ", ".join(r["graphs"]), f"{r['parameters']:,}")
    out.print(table)
    groups = summary["groups"]
    out.print(f"{len(summary['regions'])} region(s) share {len(groups)} group(s) of graphs: "
              + "; ".join(f"{g['name']} ({g['regions']} region(s), {', '.join(g['compiled']) or 'not compiled'})"
                          for g in groups))
    for i, b in enumerate(summary["breaks"], 1):
        out.print(f"break {i}: {b['file']}:{b['line']} in {b['function']}: {b['kind']} ({b['code']})")


def print_graph_table(out, summary: dict) -> None:
    from rich.table import Table

    # its own line: as the table's title, a long path would wrap at the table's width
    out.print(f"{summary['model']} -> {summary['bundle']}", soft_wrap=True)
    table = Table()
    for col in ("graph", "nodes", "inputs", "outputs"):
        table.add_column(col, justify="left" if col == "graph" else "right")
    for kind, g in summary["graphs"].items():
        table.add_row(kind, str(g["nodes"]), str(g["inputs"]), str(g["outputs"]))
    out.print(table)


@click.command("export")
@click.argument("model")
@exports
@json_option
@debug_option
@handles_errors
def export_command(model: str, export: ExportOptions, as_json: bool, debug: bool):
    """Capture MODEL (a model file, package.module:factory, or a Hugging Face folder) into a bundle.

    \b
    Examples:
      aotc export sample_models/mlp.py -o bundles/mlp
      aotc export sample_models/mlp.py --joint -o bundles/mlp-joint
      aotc export sample_models/mlp.py --autograd --dynamic x:0 -o bundles/mlp-fb
      aotc export sample_models/cnn.py --onnx -o bundles/cnn
      aotc export path/to/hf-folder --task text-classification -o bundles/clf
      aotc export path/to/gpt2-folder --max-cache-len 128 -o bundles/gpt2   # prefill + decode
      aotc export sample_models/breaks.py --regions auto -o bundles/b        # submodules; glue stays Python
      aotc export sample_models/gpt_blocks.py --regions 'blocks.*' -o bundles/g
    """
    out = console()
    phases = Phases(out)
    started = time.perf_counter()
    try:
        spec, bundle = run_export(phases, model, export)
    finally:
        phases.abort()
    timings = dict(phases.times, total=time.perf_counter() - started)
    summary = graph_summary(bundle) | {"seconds": {k: round(v, 3) for k, v in timings.items()}}
    if as_json:
        emit_json(summary)
        return
    if "regions" in summary:
        print_regions(out, summary)
        out.print(f"{human_size(summary['size_bytes'])} in {timings['total']:.2f} s")
        return
    print_graph_table(out, summary)
    for line in summary["narrowed"]:
        out.print(f"[yellow]note[/]: {line}")
    out.print(f"{human_size(summary['size_bytes'])} in {timings['total']:.2f} s")
