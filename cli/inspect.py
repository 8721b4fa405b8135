"""`aotc inspect`: what a bundle holds. Reads JSON and text only; runs nothing."""

from __future__ import annotations

from pathlib import Path

import click

from aotc.cli._common import (
    console,
    debug_option,
    emit_json,
    handles_errors,
    human_size,
    json_option,
    public_key_option,
)

# Commands import the library inside their bodies: `aotc --help` imports no torch (STYLE.md).


def _shape(tensor: dict | None) -> str:
    if tensor is None:
        return "-"
    dims = []
    for i, size in enumerate(tensor["shape"]):
        dyn = tensor["dynamic_dims"].get(str(i))
        if dyn:
            hi = "inf" if dyn["max"] is None else dyn["max"]
            lo, hi_declared = dyn.get("declared_min"), dyn.get("declared_max")
            note = f" (declared from {lo})" if lo is not None else ""
            if hi_declared is not None:
                note = f" (declared {dyn['min'] if lo is None else lo}..{hi_declared})"
            dims.append(f"{dyn['symbol']}[{dyn['min']}..{hi}]{note}")
        else:
            dims.append(str(size))
    return "(" + ", ".join(dims) + ")"


def _mutation(inp: dict) -> str:
    """'data', 'metadata', ... ; --json has the full AOTAutograd fields."""
    if inp["mutation_type"] == "NOT_MUTATED":
        return ""
    what = [w for w, flag in (("data", inp["mutates_data"]), ("metadata", inp["mutates_metadata"])) if flag]
    notes = [n for n, flag in (
        ("in graph", inp["mutation_type"] == "MUTATED_IN_GRAPH"),
        ("no_grad", inp["mutations_under_no_grad_or_inference_mode"]),
    ) if flag]
    return "+".join(what) + (f" ({', '.join(notes)})" if notes else "")


_KIND = {"parameter": "param", "buffer": "buffer", "user_input": "input", "synthetic_base": "base"}


def _table(title: str, *columns: str):
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for col in columns:
        # fold, never truncate: a cut-off FQN or mutation type is worse than a tall table
        table.add_column(col, overflow="fold", justify="right" if col in ("size", "count") else "left")
    return table


def _profile_dims(profile: str, where: dict) -> str:
    """`s33=2..2` as the user names it too: `x:0=2 (s33)`."""
    parts = []
    for item in profile.split(","):
        symbol, _, span = item.partition("=")
        lo, _, hi = span.partition("..")
        size = lo if lo == hi else f"{lo}..{hi}"
        parts.append(f"{where[symbol]}={size} ({symbol})" if symbol in where else f"{symbol}={size}")
    return ", ".join(parts)


def _built_by(f: dict) -> str:
    """Which torch and target built a compiled file, and whether this torch can run it."""
    import torch

    b = f["build"]
    target = b.get("device", "?") + (f" ({b['cpu_isa']})" if b.get("cpu_isa") else "") + \
        (f" ({b['cuda_arch']})" if b.get("cuda_arch") else "")
    line = f"[bold]{f['path']}[/]: built by torch {b.get('torch', '?')} for {target}"
    if b.get("torch") != torch.__version__:
        line += f"; this is torch {torch.__version__}, which refuses it: aotc compile BUNDLE rebuilds it"
    return line


def _render(info: dict, top_ops: int) -> None:
    from rich.table import Table

    from aotc.bundle.cpp_support import describe_cpp

    out = console()
    m = info["manifest"]
    model = m["model"]
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    for label, value in [
        ("bundle", info["path"]),
        ("model", f"{model['name']} ({model['class_name']}, {model['num_parameters']:,} parameters)"),
        ("source", model["source"] or "-"),
        ("mode", "train" if model["training"] else "eval"),
        ("graphs", ", ".join(m["graph_kinds"]) + (f"  (partitioner: {m['partitioner']})" if m["partitioner"] else "")),
        ("format", f"{m['format_version']}  aotc {m['aotc_version']}  torch {m['torch_version']}  python {m['python_version']}"
                   + (f"  (torch.export format {'.'.join(map(str, m['export_schema']))})" if m.get("export_schema") else "")),
        ("created", m["created"]),
        ("size", "  ".join([f"total {human_size(info['size']['total'])}"] + [f"{k} {human_size(v)}" for k, v in info["size"].items() if k != "total"])),
    ]:
        head.add_row(label, value)
    if model.get("task"):
        head.add_row("task", model["task"])
    if info.get("cpp"):
        head.add_row("C++ runtime", describe_cpp(info["cpp"]))
    opt = info["metadata"].get("optimizer")
    if opt:
        hyper = ", ".join(f"{k} {v:g}" for k, v in opt["hyperparameters"].items())
        flags = "".join(f", {k}" for k, v in opt["options"].items() if v)
        head.add_row("optimizer", f"{opt['name']} ({hyper}{flags}) in the joint graph: train_step updates "
                                  f"{len(opt['parameters'])} parameters; state {', '.join(opt['state']) or 'none'} "
                                  "in optimizer.safetensors")
    ambient = info["metadata"].get("ambient")
    if ambient:
        autocast = ", ".join(f"{d} to {t}" for d, t in ambient["autocast"].items()) or "off"
        modes = ", ".join(ambient["torch_function_modes"]) or "none"
        head.add_row("exported under", f"grad {'on' if ambient['grad_enabled'] else 'off'}, autocast {autocast}, "
                                       f"default dtype {ambient['default_dtype']}, deterministic "
                                       f"{'on' if ambient['deterministic'] else 'off'}, torch-function modes {modes}")
    if m.get("generation"):
        g = m["generation"]
        head.add_row("generation", f"batch {g['batch_size']}, KV cache of {g['max_cache_len']} tokens, "
                                   f"eos {g['eos_token_ids'] or '-'} (aotc run BUNDLE --prompt-ids ...)")
    out.print(head)

    files = _table("Files", "path", "kind", "size", "sha256")
    for f in m["files"]:
        files.add_row(f["path"], f["kind"], human_size(f["size"]), f["sha256"][:16])
    out.print(files)
    weights = sum(f["size"] for f in m["files"] if f["kind"] == "weights")
    for f in m["files"]:
        if f["kind"] == "compiled" and f["build"]:
            out.print(_built_by(f))
        if f["kind"] == "compiled" and (f["build"] or {}).get("frozen") == "true":
            prepacked = f["build"].get("prepacked")
            out.print(f"[bold]{f['path']}[/]: frozen: the weights are folded into the code (its own copy, "
                      f"{human_size(f['size'])} beside weights.safetensors' {human_size(weights)})"
                      + (f", {prepacked} calls on oneDNN-prepacked weights" if prepacked else "")
                      + "; the loaded module refuses new weights")
        elif f["kind"] == "compiled" and (f["build"] or {}).get("weights") == "folded":
            prepacked = f["build"].get("prepacked")
            out.print(f"[bold]{f['path']}[/]: frozen code, the weights folded in at load and again when they change"
                      + (f" ({prepacked} calls on oneDNN-prepacked weights)" if prepacked else ""))
        elif f["kind"] == "compiled" and (f["build"] or {}).get("not_folded"):
            out.print(f"[bold]{f['path']}[/]: weights passed as inputs, not folded: {f['build']['not_folded']}")
        if f["kind"] == "compiled" and (f["build"] or {}).get("profile"):
            out.print(f"[bold]{f['path']}[/]: shape profile {_profile_dims(f['build']['profile'], info.get('dims', {}))}, "
                      f"{human_size(f['size'])}: run for calls of these sizes")
        if f["kind"] == "compiled" and (f["build"] or {}).get("updates") == "in_place":
            out.print(f"[bold]{f['path']}[/]: writes the new parameters, optimizer state and buffers into their "
                      "own memory (no copies after the step)")
        if f["kind"] == "onnx" and f["build"]:
            b = f["build"]
            out.print(f"[bold]{f['path']}[/]: opset {b['opset']}; inputs {b['inputs'].replace(',', ', ')}; "
                      f"outputs {b['outputs'].replace(',', ', ')}")

    if info["constant_inputs"]:
        fixed = _table("Constant inputs", "name", "type", "value (each call passes it)")
        for c in info["constant_inputs"]:
            fixed.add_row(c["name"], c["type"], repr(c["value"]))
        out.print(fixed)
    ints = [u["name"] for u in info["user_inputs"] if u.get("kind") == "int"]
    if ints:
        out.print(f"[bold]int inputs[/] (dynamic sizes, passed as Python ints): {', '.join(ints)}")

    user_index = {u["name"]: i for i, u in enumerate(info["user_inputs"])}
    for program, meta in info["metadata"]["programs"].items():
        inputs = _table(f"{program}: inputs", "#", "kind", "name", "shape", "dtype", "grad", "mutated")
        for i, inp in enumerate(meta["inputs"]):
            t = inp["tensor"] or {}
            shown = t
            if inp["kind"] == "user_input" and inp["name"] in user_index:
                shown = info["metadata"]["user_inputs"][user_index[inp["name"]]]  # the range the bundle accepts
            inputs.add_row(str(i), _KIND[inp["kind"]], inp["name"], _shape(shown or None), t.get("dtype", "-"),
                           "yes" if inp["requires_grad"] else "", _mutation(inp))
        for dup, first in meta["duplicate_user_inputs"].items():
            inputs.add_row("", "input", info["user_inputs"][int(dup)]["name"], "", "", "",
                           f"same tensor as {info['user_inputs'][first]['name']}")
        out.print(inputs)
        outputs = _table(f"{program}: outputs", "#", "alias", "base", "shape", "grad", "view replay")
        for o in meta["outputs"]:
            outputs.add_row(str(o["index"]), o["output_type"], o["base"] or "", _shape(o["tensor"]),
                            "yes" if o["requires_grad"] else "", " -> ".join(o["view_replay"]))
        out.print(outputs)

    if info["constants"]:
        consts = _table("Constants (tensors made in forward; stored in weights.safetensors)", "name", "graph", "dtype", "shape")
        for c in info["constants"]:
            consts.add_row(c["name"], c["graph"], str(c["dtype"]), str(c["shape"]))
        out.print(consts)

    if info["subclasses"]:
        subs = _table("Tensor subclasses (the graphs take their inner tensors)", "where", "name", "class", "shape",
                      "dtype", "inner tensors")
        for row in info["subclasses"]:
            inner = "; ".join(f"{i['name'].rpartition(':')[2] if row['where'] != 'output' else i['name']} "
                              f"{i['dtype'] or ''} {list(i['shape']) if i['shape'] is not None else ''}".strip()
                              for i in row["inner"])
            subs.add_row(row["where"], row["name"], row["class"], str(tuple(row["shape"])), row["dtype"], inner)
        out.print(subs)

    for kind, g in info["graphs"].items():
        sig = g["signature"]
        roles: dict[str, int] = {}
        for s in sig["outputs"]:
            roles[s["role"]] = roles.get(s["role"], 0) + 1
        out.print(f"[bold]{kind}[/] graph: {g['num_nodes']} ops, {g['num_inputs']} inputs, "
                  f"{g['num_outputs']} outputs ({', '.join(f'{n} {r}' for r, n in roles.items())})")
        if sig["backward"]:
            bw = _table(f"{kind}: backward signature", "output", "gradient of")
            for name, target in sig["backward"]["gradients_to_parameters"].items():
                bw.add_row(name, f"parameter {target}")
            for name, target in sig["backward"]["gradients_to_user_inputs"].items():
                bw.add_row(name, f"input {target}")
            if sig["backward"]["loss_output"]:
                bw.add_row(sig["backward"]["loss_output"], "(loss)")
            out.print(bw)
        ops = _table(f"{kind}: ops", "op", "count")
        items = list(g["ops"].items())
        for op, n in items[:top_ops]:
            ops.add_row(op, str(n))
        if len(items) > top_ops:
            ops.add_row(f"... {len(items) - top_ops} more", str(sum(n for _, n in items[top_ops:])))
        out.print(ops)


@click.command("inspect")
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--graph", "graph_kind", metavar="KIND", help="Print that graph's readable code to stdout.")
@click.option("--top", default=15, show_default=True, help="Operators listed per graph.")
@click.option("--no-verify", is_flag=True, help="Skip checking sha256 of every file.")
@public_key_option
@json_option
@debug_option
@handles_errors
def inspect_command(bundle, graph_kind, top, no_verify, public_keys, as_json, debug):
    """Show what BUNDLE holds: manifest, inputs, outputs, signatures, operators.

    Nothing in the bundle is loaded or run; every file's hash is checked first.

    \b
    Examples:
      aotc inspect bundles/mlp-joint
      aotc inspect bundles/mlp-joint --json | jq .graphs.joint.num_nodes
      aotc inspect bundles/mlp --graph inference
    """
    from aotc.bundle.files import Bundle
    from aotc.bundle.signing import signature_facts
    from aotc.bundle.summary import describe
    from aotc.runtime.regional import RegionalBundle, is_regional

    if is_regional(bundle):
        from aotc.bundle.summary import describe_regions
        from aotc.cli.export import print_regions

        info = describe_regions(RegionalBundle.open(bundle))
        info["signature"] = signature_facts(bundle, public_keys, any(g["compiled"] for g in info["groups"]))
        if as_json:
            emit_json(info)
        else:
            print_regions(console(), info)
            _print_signature(info["signature"])
        return
    b = Bundle.open(bundle, verify_hashes=not no_verify)
    if graph_kind:
        click.echo(b.graph_code(graph_kind), nl=False)
        return
    info = describe(b)
    info["signature"] = signature_facts(bundle, public_keys, any(f.kind == "compiled" for f in b.manifest.files))
    if as_json:
        emit_json(info)
    else:
        _render(info, top)
        _print_signature(info["signature"])


def _print_signature(facts: dict) -> None:
    out = console()
    style = {"signed": "green", "invalid": "red"}.get(facts["state"], "yellow")
    out.print(f"signature: [{style}]{facts['description']}[/{style}]")
    if facts["note"]:
        out.print(facts["note"])
