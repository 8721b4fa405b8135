"""`aotc report`: one self-contained HTML page about a bundle."""

from __future__ import annotations

import time
from pathlib import Path

import click

from aotc.cli._common import console, debug_option, emit_json, handles_errors, json_option

# Commands import the library inside their bodies: `aotc --help` imports no torch (STYLE.md).


@click.command("report")
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("-o", "--output", "output", type=click.Path(path_type=Path), required=True,
              help="The HTML file to write (replaced atomically).")
@json_option
@debug_option
@handles_errors
def report_command(bundle, output, as_json, debug):
    """Write one HTML page about BUNDLE: every graph drawn (grouped by module,
    collapsible, searchable; mutated inputs, aliased outputs, saved activations and
    backward ops marked), the tables of aotc inspect, and the results of
    `aotc verify --record` and `aotc bench --record`. A regional bundle's page shows
    its regions, groups and graph breaks and every group's graphs.

    The page needs no network and no server: open it in any browser. Making it reads
    the bundle and runs nothing in it.

    \b
    Examples:
      aotc report bundles/mlp-fb -o mlp.html
      aotc verify bundles/mlp-fb --record && aotc report bundles/mlp-fb -o mlp.html
    """
    from aotc.tools.report import write_report

    out = console()
    start = time.perf_counter()
    with out.status("drawing the graphs..."):
        path = write_report(bundle, output)
    size = path.stat().st_size
    if as_json:
        emit_json({"bundle": str(bundle), "report": str(path), "bytes": size})
    else:
        out.print(f"wrote {path} ({size / 1024:.0f} KiB) in {time.perf_counter() - start:.1f} s")
