"""`aotc diff`: what changed between two bundles. Reads both; runs them only with --run."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

import click

from aotc.cli._common import console, debug_option, emit_json, handles_errors, json_option, trust_option
from aotc.tools.diff_change import KINDS

# Commands import the library inside their bodies: `aotc --help` imports no torch (STYLE.md).

# GNU diff's convention: 1 means "they differ", so trouble must be something else
TROUBLE = 2


def _kinds(ctx, param, value: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in value.split(",") if k.strip())
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        raise click.BadParameter(f"{', '.join(unknown) or repr(value)} is not a kind of change; "
                                 f"use a comma-separated subset of {','.join(KINDS)}.")
    return kinds


def _render(diff, fail_on: tuple[str, ...]) -> None:
    from rich.markup import escape

    out = console()
    for kind in KINDS:
        lines = [c.text() for c in diff.changes if c.kind == kind]
        if not lines:
            continue
        ignored = "" if kind in fail_on else " [dim](not in --fail-on)[/]"
        out.print(f"[bold]{kind}[/]{ignored}")
        for line in lines:
            out.print(f"  {escape(line)}")
    for note in diff.skipped:
        out.print(f"[yellow]skipped[/] {escape(note)}")
    out.print(diff.summary())


@click.command("diff")
@click.argument("old", type=click.Path(path_type=Path))
@click.argument("new", type=click.Path(path_type=Path))
@click.option("--run", is_flag=True, help="Also load both bundles and compare their outputs on OLD's golden "
              "inputs. Runs their graphs and compiled code: only for bundles you trust.")
@click.option("--fail-on", "fail_on", metavar="KINDS", default=",".join(KINDS), show_default=True, callback=_kinds,
              help="Kinds of change that make the exit code 1 (comma-separated); the others are still shown.")
@trust_option
@json_option
@debug_option
@handles_errors
def diff_command(old, new, run, fail_on, trusted, as_json, debug):
    """Show what changed from bundle OLD to bundle NEW: signature (inputs, outputs,
    mutations, aliasing), operators per graph, weights (with the largest change of
    each), files, build fingerprints and versions; with --run, outputs.

    Without --run nothing is loaded or run: JSON, text and safetensors are read, and
    every file's hash is checked first. Exit code 0 when nothing (of the --fail-on
    kinds) changed, 1 when something did, 2 when a bundle cannot be read.

    \b
    Examples:
      aotc diff release/mlp bundles/mlp
      aotc diff release/mlp bundles/mlp --fail-on signature,weights
      aotc diff release/mlp bundles/mlp --run --json | jq '.changes[] | select(.kind == "outputs")'
    """
    from aotc.errors import AotcError
    from aotc.tools.diff import diff_bundles

    try:
        diff = diff_bundles(old, new, run=run, trusted_subclasses=trusted)
    except AotcError as e:
        # not handles_errors' exit 1, which a CI would read as "the bundles differ"
        if debug:
            traceback.print_exc(file=sys.stderr)
        click.echo(f"Error: {e}", err=True)
        raise SystemExit(TROUBLE) from None
    if as_json:
        emit_json(diff.to_json())
    else:
        _render(diff, fail_on)
    if diff.exit_code(fail_on):
        raise SystemExit(diff.exit_code(fail_on))
