"""`aotc verify`: check every artifact of a bundle against eager."""

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


@click.command("verify")
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--model", help="Model file (or pkg.mod:factory) to rebuild eager from, for the random samples "
              "[default: for a bundle exported from a Hugging Face folder, transformers' class built from the "
              "bundle's hf/config.json]. A model path recorded in the bundle is never run.")
@click.option("--checkpoint", help="Weights for --model [default: the model file's CHECKPOINT].")
@click.option("--no-run", is_flag=True, help="Check integrity only: hashes, archive members, headers, metadata. "
              "Loads and runs nothing; the check for a bundle you do not trust.")
@click.option("--atol", type=float, help="Absolute tolerance for every check [default: per entry, from the manifest].")
@click.option("--rtol", type=float, help="Relative tolerance for every check [default: per entry, from the manifest].")
@click.option("--samples", default=2, show_default=True,
              help="Random inputs (within the dynamic ranges) to compare with the rebuilt eager model.")
@click.option("--junit", "junit_path", type=click.Path(path_type=Path), help="Write a JUnit XML report here.")
@click.option("--device", help="Run the fx graphs, the compiled package and the rebuilt eager model on this device "
              "alone (cpu, cuda, cuda:N) [default: fx and onnx on the CPU, aoti on every device it was compiled for "
              "that is here].")
@click.option("--record", is_flag=True, help="Keep the results in the bundle (records/verify.json) for aotc report.")
@trust_option
@public_key_option
@json_option
@debug_option
@handles_errors
def verify_command(bundle, model, checkpoint, no_run, atol, rtol, samples, junit_path, device, record, trusted,
                   public_keys, as_json, debug):
    """Run every artifact of BUNDLE (fx, aoti per device, onnx) and compare with eager.

    Integrity comes first: every file's hash, archive members, headers and metadata.
    Then the golden inputs and eager results in the bundle are checked; with --model,
    eager is rebuilt and compared on random inputs too. Exit code 0 when every check
    passes, 1 on any mismatch or a damaged bundle. A compiled artifact is native code:
    check a bundle from someone you do not trust with --no-run, and do not run it.

    \b
    Examples:
      aotc verify bundles/cnn --model sample_models/cnn.py
      aotc verify bundles/mlp-joint --atol 1e-5 --rtol 1e-4 --json --junit report.xml
      aotc verify downloaded-bundle --no-run
      aotc verify downloaded-bundle --public-key publisher.pub
      aotc verify bundles/mlp --model sample_models/mlp.py --device cuda
    """
    from aotc.tools.junit import junit_xml
    from aotc.tools.verify import verify

    out = console()
    with step_progress(out) as progress:
        task = progress.add_task("checking integrity", total=None)

        def on_artifact(label: str, done: int, total: int) -> None:
            progress.update(task, description=f"running {label}", completed=done, total=total)

        report = verify(bundle, model=model, rtol=rtol, atol=atol, samples=samples, run=not no_run,
                        checkpoint=checkpoint, trusted_subclasses=trusted, on_artifact=on_artifact,
                        public_keys=public_keys, device=device)
    if junit_path:
        junit_path.write_text(junit_xml(report))
    result = {
        "bundle": report.bundle,
        "ok": report.ok,
        "integrity": report.integrity,
        "signature": report.signature,
        "skipped": report.skipped,
        "checks": [c.__dict__ for c in report.checks],
    }
    if record:
        _record(bundle, result, out)
    if as_json:
        emit_json(result)
    else:
        from rich.table import Table

        table = Table(title=f"verify {report.bundle}", title_justify="left")
        for col in ("artifact", "entry", "max abs", "max rel", "tol (rtol, atol)", "result"):
            table.add_column(col, overflow="fold", justify="right" if col.startswith("max") else "left")
        for c in report.checks:
            result = "[green]pass[/]" if c.passed else f"[red]FAIL[/] {c.note}".strip()
            table.add_row(c.artifact, c.name, f"{c.max_abs:.2e}", f"{c.max_rel:.2e}", f"{c.rtol:g}, {c.atol:g}", result)
        out.print(f"integrity: {len(report.integrity)} files checked; signature: {report.signature}")
        if report.checks:
            out.print(table)
        for note in report.skipped:
            out.print(f"skipped {note}")
        failed = sum(not c.passed for c in report.checks)
        out.print(f"{len(report.checks) - failed} passed, {failed} failed")
    if report.exit_code:
        raise SystemExit(report.exit_code)


def _record(bundle: Path, result: dict, out) -> None:
    from aotc.runtime.regional import is_regional

    if is_regional(bundle):
        out.print("[yellow]not recorded[/]: a regional bundle keeps no records (its groups are bundles of their own)")
        return
    record_results(bundle, "verify", result, out)
