"""`aotc run`: load a bundle and call it once, without the model's source (aotc.tools.run_once)."""

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
    trust_option,
)
from aotc.cli.options import GenerateOptions, RunOptions, grouped

# Commands import the library inside their bodies: `aotc --help` imports no torch (STYLE.md).


def _parse_ids(text: str) -> list[int]:
    try:
        ids = [int(t) for t in text.replace(" ", "").split(",") if t]
    except ValueError:
        raise click.BadParameter(f"'{text}' is not a comma-separated list of token ids, e.g. 1,2,3.",
                                 param_hint="--prompt-ids") from None
    if not ids:
        raise click.BadParameter("give at least one token id.", param_hint="--prompt-ids")
    return ids


@click.command("run")
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--inputs", "inputs_path", type=click.Path(path_type=Path), help="safetensors file, one tensor per input name.")
@click.option("--output", "output_path", type=click.Path(path_type=Path), help="Write the outputs to this safetensors file.")
@click.option("--backend", default="auto", show_default=True,
              help="auto (aoti where compiled for the device, else fx), fx, aoti or onnx.")
@click.option("--device", default="cpu", show_default=True, help="cpu or cuda.")
@click.option("--mode", type=click.Choice(["eval", "train"]), help="Default: eval if the bundle has an eval graph.")
@click.option("--seed", default=0, show_default=True, help="Seed for random inputs (and for sampling).")
@click.option("--model", help="Regional bundles: the model file to apply the regions to; it runs on its example inputs.")
@click.option("--prompt-ids", help="Generation bundles: the prompt as comma-separated token ids, e.g. 1,2,3.")
@click.option("--max-new-tokens", type=click.IntRange(min=1), default=20, show_default=True,
              help="Generation bundles: tokens to generate.")
@click.option("--do-sample", is_flag=True, help="Generation bundles: sample instead of greedy decoding.")
@click.option("--temperature", type=float, default=1.0, show_default=True, help="With --do-sample.")
@click.option("--top-k", type=click.IntRange(min=1), help="With --do-sample: keep the k most likely tokens.")
@click.option("--top-p", type=click.FloatRange(0, 1), help="With --do-sample: keep the most likely tokens up to this probability.")
@trust_option
@public_key_option
@json_option
@debug_option
@handles_errors
@grouped(RunOptions, "run")
@grouped(GenerateOptions, "gen")
def run_command(bundle: Path, run: RunOptions, gen: GenerateOptions, trusted: tuple[str, ...], public_keys,
                as_json: bool, debug: bool):
    """Load BUNDLE and call it once; print a summary of the outputs.

    Without --inputs, random inputs shaped like the example inputs are used. A joint
    bundle runs one training step and reports the loss. A generation bundle with
    --prompt-ids generates tokens.

    \b
    Examples:
      aotc run bundles/mlp
      aotc run bundles/mlp --inputs in.safetensors --output out.safetensors --json
      aotc run bundles/gpt2 --prompt-ids 1,2,3 --max-new-tokens 20
    """
    # imported here: `aotc --help` must not import torch
    from aotc.runtime.regional import is_regional
    from aotc.tools.run_once import run_bundle, run_generation

    if is_regional(bundle) and not run.model:
        raise click.UsageError(f"'{bundle}' is a regional bundle: name the model to apply it to with --model FILE.")
    if gen.prompt_ids is not None:
        result = run_generation(bundle, _parse_ids(gen.prompt_ids), gen.max_new_tokens, backend=run.backend,
                                device=run.device, do_sample=gen.do_sample, temperature=gen.temperature,
                                top_k=gen.top_k, top_p=gen.top_p, seed=run.seed, public_keys=public_keys)
    else:
        result = run_bundle(bundle, inputs=run.inputs_path, backend=run.backend, device=run.device, mode=run.mode,
                            seed=run.seed, model=run.model, trusted=trusted, public_keys=public_keys)
    if run.output_path and result.tensors:
        import torch
        from safetensors.torch import save_file

        save_file({k: v.detach().contiguous().cpu() for k, v in result.values.items() if isinstance(v, torch.Tensor)},
                  str(run.output_path))
    summary = result.summary()
    if as_json:
        emit_json(summary)
    elif gen.prompt_ids is not None:
        _print_generation(summary)
    elif "model" in summary:
        _print_regions(summary)
    else:
        _print_outputs(summary)


def _print_generation(summary: dict) -> None:
    new = summary["new_ids"]
    rows = new if new and isinstance(new[0], list) else [new]
    click.echo(" ".join(map(str, new)))
    seconds = summary["seconds"]
    console().print(f"{sum(map(len, rows))} tokens in {seconds['generate']:.3f} s ({summary['tokens_per_second']} "
                    f"tokens/s, {summary['backend']}); load {seconds['load'] * 1e3:.1f} ms")


def _print_regions(summary: dict) -> None:
    for o in summary["outputs"]:
        console().print(f"{o['name']}: shape {tuple(o['shape'])} {o['dtype']}, mean {o.get('mean', float('nan')):.4g}")
    seconds = summary["seconds"]
    console().print(f"apply {seconds['apply'] * 1e3:.1f} ms, call {seconds['call'] * 1e3:.2f} ms (example inputs of "
                    f"{summary['model']})")


def _print_outputs(summary: dict) -> None:
    from rich.table import Table

    table = Table(title=f"{summary['bundle']} ({summary['backend']}, {summary['device']}, {summary['mode']})",
                  title_justify="left")
    for col in ("output", "shape", "dtype", "min", "max", "mean"):
        table.add_column(col, overflow="fold", justify="left" if col in ("output", "shape", "dtype") else "right")
    for o in summary["outputs"]:
        if "shape" not in o:
            table.add_row(o["name"], "", "", "", "", str(o["value"]))
            continue
        stats = [f"{o[k]:.4g}" if k in o else "" for k in ("min", "max", "mean")]
        table.add_row(o["name"], str(tuple(o["shape"])), o["dtype"], *stats)
    out = console()
    out.print(table)
    seconds = summary["seconds"]
    out.print(f"load {seconds['load'] * 1e3:.1f} ms, call {seconds['call'] * 1e3:.2f} ms, inputs: {summary['inputs']}")
