"""`aotc run`: load a bundle and call it once, without the model's source."""

from __future__ import annotations

import time
from pathlib import Path

import click

from aotc.cli.options import GenerateOptions, RunOptions, grouped
from aotc.cli._common import console, debug_option, emit_json, handles_errors, json_option, trust_option
from aotc.errors import AotcError


def _read_inputs(path: Path, names: list[str], in_spec):
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from aotc._torch_compat import pytree

    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError) as e:
        raise AotcError(f"--inputs '{path}' is not a readable safetensors file ({e}).") from e
    missing = [n for n in names if n not in tensors]
    extra = sorted(set(tensors) - set(names))
    if missing or extra:
        raise AotcError(
            f"--inputs '{path}' must hold one tensor per input, named {', '.join(names)}; "
            f"missing: {', '.join(missing) or 'none'}; unexpected: {', '.join(extra) or 'none'}."
        )
    return pytree.tree_unflatten([tensors[n] for n in names], in_spec)


def _describe(name: str, value) -> dict:
    import torch

    if not isinstance(value, torch.Tensor):
        return {"name": name, "value": value}
    info = {"name": name, "shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch.")}
    if value.numel():
        v = value.detach().double()
        info |= {"min": v.min().item(), "max": v.max().item(), "mean": v.mean().item()}
    return info


def _parse_ids(text: str) -> list[int]:
    try:
        ids = [int(t) for t in text.replace(" ", "").split(",") if t]
    except ValueError:
        raise click.BadParameter(f"'{text}' is not a comma-separated list of token ids, e.g. 1,2,3.",
                                 param_hint="--prompt-ids") from None
    if not ids:
        raise click.BadParameter("give at least one token id.", param_hint="--prompt-ids")
    return ids


def _generate(info, gen: GenerateOptions, run: RunOptions, as_json: bool):
    import torch

    import aotc
    from aotc.generation import generate

    if info.manifest.generation is None:
        raise AotcError(
            f"--prompt-ids needs a generation bundle (prefill and decode graphs); '{info.path}' has "
            f"{', '.join(info.graph_kinds)}. Export a causal LM folder with --task text-generation."
        )
    prompt = _parse_ids(gen.prompt_ids)
    t0 = time.perf_counter()
    module = aotc.load(info.path, backend=run.backend, device=run.device)
    load_s = time.perf_counter() - t0
    ids = torch.tensor([prompt] * info.manifest.generation.batch_size)
    t0 = time.perf_counter()
    tokens = generate(module, ids, gen.max_new_tokens, do_sample=gen.do_sample, temperature=gen.temperature,
                      top_k=gen.top_k, top_p=gen.top_p, seed=run.seed if gen.do_sample else None)
    gen_s = time.perf_counter() - t0
    new = tokens[:, len(prompt):].tolist()
    summary = {
        "bundle": str(info.path),
        "backend": module.backend,
        "prompt_ids": prompt,
        "new_ids": new[0] if len(new) == 1 else new,
        "seconds": {"load": round(load_s, 4), "generate": round(gen_s, 4)},
        "tokens_per_second": round(sum(map(len, new)) / gen_s, 2) if gen_s else None,
    }
    if as_json:
        emit_json(summary)
        return
    click.echo(" ".join(map(str, summary["new_ids"])))
    console().print(f"{sum(map(len, new))} tokens in {gen_s:.3f} s ({summary['tokens_per_second']} tokens/s, "
                    f"{module.backend}); load {load_s * 1e3:.1f} ms")


def _run_regions(path: Path, run: RunOptions, trusted, as_json: bool):
    """A regional bundle: applied to the model file's model, called on its example inputs."""
    import torch

    import aotc
    from aotc._torch_compat import pytree
    from aotc.model_file import load_model

    if not run.model:
        raise click.UsageError(f"'{path}' is a regional bundle: name the model to apply it to with --model FILE.")
    spec = load_model(run.model)
    mode = run.mode or ("train" if aotc.RegionalBundle.open(path).manifest.graph_kinds != ["inference"] else "eval")
    t0 = time.perf_counter()
    model = aotc.apply(path, spec.module.train(mode == "train"), backend=run.backend, device=run.device, mode=mode,
                       trusted_subclasses=trusted)
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    with torch.set_grad_enabled(mode == "train"):
        out = model(*spec.args, **spec.kwargs)
    call_s = time.perf_counter() - t0
    result = {f"output{pytree.keystr(p)}": v for p, v in pytree.tree_leaves_with_path(out)}
    summary = {"bundle": str(path), "model": run.model, "outputs": [_describe(k, v) for k, v in result.items()],
               "seconds": {"apply": round(load_s, 4), "call": round(call_s, 4)}}
    if as_json:
        emit_json(summary)
        return
    for o in summary["outputs"]:
        console().print(f"{o['name']}: shape {tuple(o['shape'])} {o['dtype']}, mean {o.get('mean', float('nan')):.4g}")
    console().print(f"apply {load_s * 1e3:.1f} ms, call {call_s * 1e3:.2f} ms (example inputs of {run.model})")


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
@json_option
@debug_option
@handles_errors
@grouped(RunOptions, "run")
@grouped(GenerateOptions, "gen")
def run_command(bundle: Path, run: RunOptions, gen: GenerateOptions, trusted: tuple[str, ...], as_json: bool,
                debug: bool):
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
    import torch

    import aotc
    from aotc._torch_compat import pytree
    from aotc.bundle import Bundle
    from aotc.outputs import load_spec
    from aotc.runtime.inputs import random_inputs
    from aotc.runtime.subclasses import caller_inputs

    from aotc.regional_bundle import is_regional

    if is_regional(bundle):
        _run_regions(bundle, run, trusted, as_json)
        return
    info = Bundle.open(bundle)
    if gen.prompt_ids is not None:
        _generate(info, gen, run, as_json)
        return
    mode = run.mode
    if mode is None:
        mode = "eval" if {"inference", "prefill"} & set(info.graph_kinds) and not info.metadata.training else "train"
    t0 = time.perf_counter()
    module = aotc.load(bundle, backend=run.backend, device=run.device, mode=mode, trusted_subclasses=trusted)
    load_s = time.perf_counter() - t0
    in_spec = load_spec(info.signature.in_spec)
    names = [u.name for u in info.signature.user_inputs]
    if run.inputs_path:
        args, kwargs = caller_inputs(info, _read_inputs(run.inputs_path, names, in_spec), trusted)
        args, kwargs = pytree.tree_map_only(torch.Tensor, lambda t: t.to(module.device), (args, kwargs))
    else:
        args, kwargs = caller_inputs(info, random_inputs(info.metadata, in_spec, seed=run.seed, device=module.device),
                                     trusted)

    t0 = time.perf_counter()
    if "joint" in info.graph_kinds:
        from aotc.observe import LOSS, grad_key

        result = {LOSS: module.train_step(*args, **kwargs)}
        result |= {grad_key(n): p.grad for n, p in module.named_parameters() if p.grad is not None}
    else:
        with torch.no_grad():
            out = module(*args, **kwargs)
        leaves = pytree.tree_leaves_with_path(out)
        result = {f"output{pytree.keystr(path)}": v for path, v in leaves}
    call_s = time.perf_counter() - t0
    from aotc.subclasses import named_plain

    result = dict(pair for k, v in result.items() for pair in named_plain(k, v))  # subclasses as their inner tensors

    if run.output_path:
        from safetensors.torch import save_file

        save_file({k: v.detach().contiguous().cpu() for k, v in result.items() if isinstance(v, torch.Tensor)},
                  str(run.output_path))
    summary = {
        "bundle": str(bundle),
        "backend": module.backend,
        "device": str(module.device),
        "mode": mode,
        "inputs": str(run.inputs_path) if run.inputs_path else f"random (seed {run.seed})",
        "seconds": {"load": round(load_s, 4), "call": round(call_s, 4)},
        "outputs": [_describe(k, v) for k, v in result.items()],
    }
    if as_json:
        emit_json(summary)
        return
    from rich.table import Table

    table = Table(title=f"{bundle} ({module.backend}, {module.device}, {mode})", title_justify="left")
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
    out.print(f"load {load_s * 1e3:.1f} ms, call {call_s * 1e3:.2f} ms, inputs: {summary['inputs']}")
