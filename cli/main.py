"""The `aotc` command group. Commands live one per module and import torch lazily."""

from __future__ import annotations

import warnings

import click

from aotc import __version__
from aotc.cli.bench import bench_command
from aotc.cli.compile import compile_command
from aotc.cli.diff import diff_command
from aotc.cli.export import export_command
from aotc.cli.inspect import inspect_command
from aotc.cli.report import report_command
from aotc.cli.run import run_command
from aotc.cli.sign import sign_command
from aotc.cli.verify import verify_command


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="aotc")
def cli():
    """aotc: export, compile, inspect and run PyTorch models ahead of time.

    \b
    aotc export sample_models/mlp.py -o bundles/mlp      capture graphs into a bundle
    aotc compile bundles/mlp                             add AOTInductor artifacts
    aotc inspect bundles/mlp                             show what a bundle holds
    aotc run bundles/mlp                                 call it once on random inputs
    aotc verify bundles/mlp                              check every artifact against eager
    aotc bench bundles/mlp                               time it against eager and torch.compile
    aotc report bundles/mlp -o mlp.html                  one HTML page: graphs, tables, results
    aotc diff release/mlp bundles/mlp                    what changed since the last release
    aotc sign bundles/mlp --key key.pem                  sign every file; load with the public key
    """


cli.add_command(export_command)
cli.add_command(compile_command)
cli.add_command(inspect_command)
cli.add_command(run_command)
cli.add_command(verify_command)
cli.add_command(bench_command)
cli.add_command(report_command)
cli.add_command(diff_command)
cli.add_command(sign_command)


def main() -> None:
    # torch 2.13 warns about its own pytree internals while (de)serializing graphs
    warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
    cli(prog_name="aotc")
